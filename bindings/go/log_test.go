package llmrt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLogHandler(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	err := SetLogHandler(func(level LogLevel, msg string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, msg)
	}, LogWarning)
	if err != nil {
		t.Fatal(err)
	}
	if logHandles.Load() != 1 {
		t.Errorf("%d log handles, want 1", logHandles.Load())
	}
	// The shipped model's config omits scoring_func: loading it logs a warning naming the file,
	// once per directory and process, so the model is loaded from a directory of this test.
	dir := t.TempDir()
	for _, name := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(kjvModel, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRuntime(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	mu.Lock()
	found := false
	for _, l := range lines {
		found = found || strings.Contains(l, dir) && strings.Contains(l, "scoring_func")
	}
	mu.Unlock()
	if !found {
		t.Errorf("no scoring_func warning among %q", lines)
	}
	// A bad level fails and keeps the handler; replacing it releases the old one.
	if err := SetLogHandler(func(LogLevel, string) {}, 7); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "min_level") {
		t.Errorf("level 7: %v", err)
	}
	if logHandles.Load() != 1 {
		t.Errorf("%d log handles after a failed set, want 1", logHandles.Load())
	}
	if err := SetLogHandler(nil, LogInfo); err != nil {
		t.Fatal(err)
	}
	if logHandles.Load() != 0 {
		t.Errorf("%d log handles after restoring stderr, want 0", logHandles.Load())
	}
}
