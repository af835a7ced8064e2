package llmrt

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The repository's test fixtures and shipped models, from this package's directory.
func repoPath(rel string) string {
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		panic(err)
	}
	return p
}

var (
	tinyModel = repoPath("tests/data/tiny_kimi_k2_qlora_yarn")
	kjvModel  = repoPath("models/kimi-k2-kjv-tiny")
)

// The C test's golden greedy continuation of tiny_kimi_k2_qlora_yarn with an F32 KV cache
// (tests/abi/abi_test.c, from tests/data/tiny_kimi_k2_qlora_yarn.golden.json).
var (
	goldenPrompt = []int32{0, 17, 42, 99, 3, 250, 7}
	goldenTokens = []int32{178, 108, 252, 14, 31, 214, 39, 201, 165}
)

// What `llm-run --model models/kimi-k2-kjv-tiny --prompt "In the beginning" --max-tokens 24`
// prints after the prompt.
const kjvContinuation = " of the creation of the flesh is the end of the flesh.\nFor the end of this world are ye, which"

func openRuntime(t *testing.T, dir string, opts *RuntimeOptions) *Runtime {
	t.Helper()
	r, err := NewRuntime(dir, opts)
	if err != nil {
		t.Fatalf("NewRuntime(%s): %v", dir, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// streamIDs reads a session's generation to its end and returns the ids and the finish reason.
func streamIDs(t *testing.T, s *Session) ([]int32, FinishReason) {
	t.Helper()
	ts, err := s.Stream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	var ids []int32
	for ts.Next() {
		ids = append(ids, ts.Token().ID)
	}
	if err := ts.Err(); err != nil {
		t.Fatalf("stream of session %d: %v", s.ID(), err)
	}
	return ids, ts.FinishReason()
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }
