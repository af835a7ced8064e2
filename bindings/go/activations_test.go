package llmrt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The INT8 activation policy reaches the library: an unknown value is refused naming the field,
// and INT8 over INT4 experts decodes the golden prompt's full length.
func TestQuantizedActivationsOption(t *testing.T) {
	if _, err := NewRuntime(tinyModel, &RuntimeOptions{QuantizedActivations: 7}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "quantized_activations") {
		t.Fatalf("QuantizedActivations 7: %v", err)
	}
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, PrefillWeights: WeightsINT4G32,
		DecodeWeights: WeightsINT4G32, QuantizedActivations: ActivationsINT8})
	defer r.Close()
	if n := generatedCount(t, r); n != len(goldenTokens) {
		t.Fatalf("%d tokens, want %d", n, len(goldenTokens))
	}
}

// The FP8 activation policy reaches the library: a runtime with it opens the BF16 and the FP8
// block-scaled tiny checkpoints and decodes the golden prompt's full length on each.
func TestFP8ActivationsOption(t *testing.T) {
	for _, dir := range []string{tinyModel, repoPath("tests/data/tiny_kimi_k2_fp8")} {
		r := openRuntime(t, dir, &RuntimeOptions{KVDType: KVDTypeF32, QuantizedActivations: ActivationsFP8})
		n := generatedCount(t, r)
		r.Close()
		if n != len(goldenTokens) {
			t.Fatalf("%s: %d tokens, want %d", dir, n, len(goldenTokens))
		}
	}
}

// generatedCount decodes the golden prompt greedily for len(goldenTokens) tokens in a new
// session of r and returns how many tokens came out.
func generatedCount(t *testing.T, r *Runtime) int {
	t.Helper()
	s, err := r.NewSession(&SamplingOptions{MaxNewTokens: uint32(len(goldenTokens))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < len(goldenTokens) {
		res, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Err(); err != nil {
			t.Fatalf("step: %v", err)
		}
		if res.Token != TokenNone {
			n++
		}
		if res.Finish != FinishNone {
			break
		}
	}
	return n
}

// The BF16 activation policy reaches the library: the BF16 model's logits after the golden
// prompt differ from EXACT's, by little, and the greedy token is the golden one.
func TestBF16ActivationsOption(t *testing.T) {
	logits := func(a Activations) []float32 {
		r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, QuantizedActivations: a})
		defer r.Close()
		s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Append(goldenPrompt); err != nil {
			t.Fatal(err)
		}
		res, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Err(); err != nil || res.Token != goldenTokens[0] {
			t.Fatalf("activations %d: token %d (%v), want %d", a, res.Token, err, goldenTokens[0])
		}
		l, err := s.Logits()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	exact, bf16 := logits(ActivationsExact), logits(ActivationsBF16)
	worst := float32(0)
	for i := range exact {
		d := exact[i] - bf16[i]
		if d < 0 {
			d = -d
		}
		if d > worst {
			worst = d
		}
	}
	if !(worst > 0 && worst < 0.5) {
		t.Fatalf("max |logit difference| %g, want in (0, 0.5)", worst)
	}
}

// Where the CPU backend keeps the weights: an unknown value is refused naming the field; the
// file mapping and the huge-page copy report themselves and give the same tokens and the same
// logits, bit for bit.
func TestWeightMemoryOption(t *testing.T) {
	if _, err := NewRuntime(tinyModel, &RuntimeOptions{WeightMemory: 9}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "weight_memory") {
		t.Fatalf("WeightMemory 9: %v", err)
	}
	var tokens [2][]int32
	var logits [2][]float32
	for i, m := range []WeightMemory{WeightMemoryMapped, WeightMemoryHugePages} {
		r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, WeightMemory: m})
		info, err := r.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.WeightMemory != m {
			t.Fatalf("asked for %d, info says %d", m, info.WeightMemory)
		}
		s, err := r.NewSession(&SamplingOptions{MaxNewTokens: uint32(len(goldenTokens))})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(goldenPrompt); err != nil {
			t.Fatal(err)
		}
		for {
			res, err := s.Next(context.Background())
			if err != nil || res.Err() != nil {
				t.Fatalf("step: %v %v", err, res.Err())
			}
			if res.Token != TokenNone {
				tokens[i] = append(tokens[i], res.Token)
			}
			if res.Finish != FinishNone {
				break
			}
		}
		if logits[i], err = s.Logits(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r.Close()
	}
	if len(tokens[0]) != len(goldenTokens) || len(tokens[0]) != len(tokens[1]) || len(logits[0]) != len(logits[1]) {
		t.Fatalf("tokens %v and %v, %d and %d logits", tokens[0], tokens[1], len(logits[0]), len(logits[1]))
	}
	for i := range tokens[0] {
		if tokens[0][i] != tokens[1][i] {
			t.Fatalf("tokens %v mapped, %v from huge pages", tokens[0], tokens[1])
		}
	}
	for i := range logits[0] {
		if logits[0][i] != logits[1][i] {
			t.Fatalf("logit %d: %v mapped, %v from huge pages", i, logits[0][i], logits[1][i])
		}
	}
}
