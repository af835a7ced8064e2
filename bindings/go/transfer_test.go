package llmrt

import (
	"context"
	"errors"
	"testing"
)

// Prefill and three tokens in one runtime, the rest in another: the golden continuation; an
// authenticated export needs its key.
func TestExportImportContinuesWithTheSameTokens(t *testing.T) {
	prefill := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	decode := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	s, err := prefill.NewSession(&SamplingOptions{MaxNewTokens: uint32(len(goldenTokens))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
	var first []int32
	for len(first) < 3 {
		res, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Token != TokenNone {
			first = append(first, res.Token)
		}
	}
	blob, err := s.ExportKV(nil)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	sealed, err := s.ExportKV(key)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := decode.ImportKV(blob, nil, &SamplingOptions{MaxNewTokens: uint32(len(goldenTokens))})
	if err != nil {
		t.Fatal(err)
	}
	defer moved.Close()
	rest, _ := streamIDs(t, moved)
	got := append(first, rest...)
	if len(got) != len(goldenTokens) {
		t.Fatalf("tokens %v, want %v", got, goldenTokens)
	}
	for i := range got {
		if got[i] != goldenTokens[i] {
			t.Fatalf("tokens %v, want %v", got, goldenTokens)
		}
	}
	if _, err := decode.ImportKV(sealed, make([]byte, 32), nil); !errors.Is(err, ErrFormat) {
		t.Errorf("import with another key: %v", err)
	}
	auth, err := decode.ImportKV(sealed, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth.Close()
}

func TestScoreAndKVSizing(t *testing.T) {
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, KVBudgetBytes: 1 << 20, PageSizeTokens: 16})
	seq := append(append([]int32{}, goldenPrompt...), goldenTokens...)
	lp, am, err := r.Score(seq)
	if err != nil {
		t.Fatal(err)
	}
	if len(lp) != len(seq)-1 || len(am) != len(seq)-1 {
		t.Fatalf("%d logprobs, %d argmax for %d tokens", len(lp), len(am), len(seq))
	}
	for k, want := range goldenTokens {
		if p := len(goldenPrompt) - 1 + k; am[p] != want || lp[p] > 0 {
			t.Errorf("position %d: argmax %d (want %d), logprob %g", p, am[p], want, lp[p])
		}
	}
	if _, _, err := r.Score([]int32{1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("one token: %v", err)
	}
	z, err := ModelKVSizing(tinyModel, KVDTypeF32, 1<<20, 16, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.Info()
	if err != nil {
		t.Fatal(err)
	}
	if z.BytesPerToken != info.KVBytesPerToken || z.CapacityTokens != uint64(info.PagesTotal)*16 ||
		z.MaxSessions != z.CapacityTokens/64 || z.KVDType != KVDTypeF32 {
		t.Errorf("sizing %+v against %+v", z, info)
	}
	if _, err := ModelKVSizing("/nonexistent/llmrt-model", KVDTypeAuto, 0, 0, 0, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing model: %v", err)
	}
}
