package llmrt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func isStatus(err error, st Status) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == st
}

func TestMissingModelDirectory(t *testing.T) {
	dir := t.TempDir() + "/no-such-model"
	r, err := NewRuntime(dir, nil)
	if r != nil || err == nil {
		t.Fatalf("NewRuntime(%s) = %v, %v; want an error", dir, r, err)
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) is false", err)
	}
	if errors.Is(err, ErrFormat) || errors.Is(err, ErrClosed) {
		t.Errorf("%v matches another kind", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%T is not an *Error", err)
	}
	if e.Status != StatusNotFound || !strings.Contains(e.Message, dir) {
		t.Errorf("status %v message %q; want LLM_ERR_NOT_FOUND naming %s", e.Status, e.Message, dir)
	}
	if !strings.Contains(err.Error(), "LLM_ERR_NOT_FOUND") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Error() = %q", err.Error())
	}
	var st Status
	if !errors.As(err, &st) || st != StatusNotFound {
		t.Errorf("errors.As(Status) = %v", st)
	}

	_, err = NewTokenizer(dir)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), dir) {
		t.Errorf("NewTokenizer(%s): %v", dir, err)
	}
}

func TestCorruptModelIsFormatError(t *testing.T) {
	// A config.json that is not JSON: LLM_ERR_FORMAT naming the file.
	dir := t.TempDir()
	if err := writeFile(dir+"/config.json", "{ not json"); err != nil {
		t.Fatal(err)
	}
	_, err := NewRuntime(dir, nil)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("NewRuntime(corrupt config): %v", err)
	}
}

func TestOutOfRangeTokenOnSession(t *testing.T) {
	r := openRuntime(t, tinyModel, nil)
	s, err := r.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Append([]int32{1, 2, 256})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Append(256) with vocab 256: %v, want invalid argument", err)
	}
	var e *Error
	errors.As(err, &e)
	if !strings.Contains(e.Message, "256") {
		t.Errorf("message %q does not name the id", e.Message)
	}
	if err := s.Append([]int32{-3}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Append(-3): %v", err)
	}
	// Nothing was queued: the session is idle and has nothing to generate.
	info, err := s.Info()
	if err != nil || info.State != SessionIdle || info.NumPending != 0 {
		t.Errorf("after the failed appends: %+v, %v", info, err)
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "idle") {
		t.Errorf("Next on an idle session: %v", err)
	}
	// The session still works.
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
}

func TestBadOptions(t *testing.T) {
	_, err := NewRuntime(tinyModel, &RuntimeOptions{KVDType: 99})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "kv_dtype") {
		t.Errorf("kv_dtype 99: %v", err)
	}
	r := openRuntime(t, tinyModel, nil)
	_, err = r.NewSession(&SamplingOptions{Temperature: -1})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "temperature") {
		t.Errorf("temperature -1: %v", err)
	}
}

func TestClosedHandles(t *testing.T) {
	r, err := NewRuntime(tinyModel, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := r.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := s.Append(goldenPrompt); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrInvalidState) {
		t.Errorf("Append on a closed session: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// The runtime's Close closed s2; using it or the runtime is an error, closing it a no-op.
	if _, err := s2.Info(); !errors.Is(err, ErrClosed) {
		t.Errorf("Info on a session of a closed runtime: %v", err)
	}
	if err := s2.Close(); err != nil {
		t.Error(err)
	}
	if _, err := r.NewSession(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("NewSession on a closed runtime: %v", err)
	}
	if _, err := r.Step(); !errors.Is(err, ErrClosed) {
		t.Errorf("Step on a closed runtime: %v", err)
	}
	if _, err := r.Info(); !errors.Is(err, ErrClosed) {
		t.Errorf("Info on a closed runtime: %v", err)
	}

	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	d, err := tok.NewDetokenizer(true)
	if err != nil {
		t.Fatal(err)
	}
	tok.Close()
	tok.Close()
	if _, err := tok.Encode("x", false); !errors.Is(err, ErrClosed) {
		t.Errorf("Encode on a closed tokenizer: %v", err)
	}
	if _, err := d.Push(5); !errors.Is(err, ErrClosed) {
		t.Errorf("Push on a detokenizer of a closed tokenizer: %v", err)
	}
	d.Close()
}

func TestTokenizerErrorsCarryMessages(t *testing.T) {
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	_, err = tok.Decode([]int32{1, 99999}, false)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "99999") {
		t.Errorf("Decode(99999): %v", err)
	}
	if _, err := tok.SpecialID("<|no such token|>"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SpecialID(unknown): %v", err)
	}
	d, err := tok.NewDetokenizer(true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Push(-5); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "-5") {
		t.Errorf("Push(-5): %v", err)
	}
}

func TestNULBytesAreRefused(t *testing.T) {
	// A NUL would cut the string the library sees: "dir\x00/x" would load "dir".
	if _, err := NewRuntime(tinyModel+"\x00/elsewhere", nil); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("NewRuntime(dir with NUL): %v", err)
	}
	if _, err := NewTokenizer(kjvModel + "\x00"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NewTokenizer(dir with NUL): %v", err)
	}
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	if _, err := tok.SpecialID("<|im_end|>\x00"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("SpecialID(with NUL): %v", err)
	}
	_, err = tok.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "a"}, {Role: "user", Content: "b\x00c"}}, true, false)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "message 1") {
		t.Errorf("ApplyChatTemplate(content with NUL): %v", err)
	}
	// Encode takes lengths, not NUL-terminated text: a NUL is a character like any other.
	ids, err := tok.Encode("a\x00b", false)
	if err != nil {
		t.Fatal(err)
	}
	if back, _ := tok.Decode(ids, false); back != "a\x00b" {
		t.Errorf("round trip of a NUL: %q", back)
	}
}

func TestInvalidUTF8IsReplaced(t *testing.T) {
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	// Each invalid byte becomes U+FFFD (three bytes), so the ids may outnumber the input bytes.
	bad := strings.Repeat("\xff", 40)
	ids, err := tok.Encode(bad, false)
	if err != nil {
		t.Fatal(err)
	}
	back, err := tok.Decode(ids, false)
	if err != nil || back != strings.Repeat("\uFFFD", 40) {
		t.Errorf("Decode(Encode(40 invalid bytes)) = %q, %v", back, err)
	}
}
