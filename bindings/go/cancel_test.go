package llmrt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// pagesReleased checks that no session holds KV pages.
func pagesReleased(t *testing.T, r *Runtime) {
	t.Helper()
	info, err := r.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.PagesFree != info.PagesTotal {
		t.Errorf("%d of %d KV pages free", info.PagesFree, info.PagesTotal)
	}
}

func TestContextCancelsStreamFromAnotherGoroutine(t *testing.T) {
	r := openRuntime(t, kjvModel, nil)
	tok, err := r.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("In the beginning", false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.NewSession(nil) // no length limit: only the cancel ends it early
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(ids); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts, err := s.Stream(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()

	// After the fifth token another goroutine cancels the context; the stream's watcher cancels
	// the session; the next step reports it. No step runs in between, so exactly five tokens.
	cancelled := make(chan struct{})
	go func(after <-chan struct{}) {
		<-after
		cancel()
		for {
			if info, err := s.Info(); err == nil && info.State == SessionCancelled {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(cancelled)
	}(cancelled)
	n := 0
	var text string
	for ts.Next() {
		n++
		text += ts.Token().Text
		if n == 5 {
			cancelled <- struct{}{}
			<-cancelled
		}
	}
	if n != 5 {
		t.Errorf("%d tokens, want 5", n)
	}
	if ts.FinishReason() != FinishCancelled {
		t.Errorf("finish %v, want cancelled", ts.FinishReason())
	}
	if !errors.Is(ts.Err(), context.Canceled) {
		t.Errorf("Err() = %v, want context.Canceled", ts.Err())
	}
	if want := kjvContinuation[:len(text)]; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	info, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.State != SessionCancelled || info.NumPages != 0 {
		t.Errorf("session %+v after the cancel", info)
	}
	pagesReleased(t, r)
}

func TestSessionCancelWhileStreaming(t *testing.T) {
	// Cancel from another goroutine at an arbitrary moment: the stream ends with the cancelled
	// finish reason (no error: it was not its context), and the pages are back.
	r := openRuntime(t, kjvModel, nil)
	s, err := r.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append([]int32{1, 2, 3, 4, 5}); err != nil {
		t.Fatal(err)
	}
	ts, err := s.Stream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-first
		time.Sleep(2 * time.Millisecond)
		if err := s.Cancel(); err != nil {
			t.Error(err)
		}
	}()
	n := 0
	for ts.Next() {
		if n++; n == 1 {
			close(first)
		}
	}
	wg.Wait()
	if ts.Err() != nil || ts.FinishReason() != FinishCancelled {
		t.Errorf("after %d tokens: finish %v, err %v; want cancelled, nil", n, ts.FinishReason(), ts.Err())
	}
	// The context holds 1024 positions; the cancel came long before the end.
	if n >= 1000 {
		t.Errorf("%d tokens: the cancel did not stop the generation", n)
	}
	pagesReleased(t, r)
}

func TestGenerateWithDoneContext(t *testing.T) {
	r := openRuntime(t, kjvModel, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g, err := r.Generate(ctx, "In the beginning", SamplingOptions{MaxNewTokens: 24})
	if !errors.Is(err, context.Canceled) || g.Finish != FinishCancelled || len(g.Tokens) != 0 {
		t.Errorf("Generate(done ctx) = %+v, %v", g, err)
	}
	pagesReleased(t, r)
	if info, _ := r.Info(); info.NumSessions != 0 {
		t.Errorf("%d sessions left", info.NumSessions)
	}
}

func TestDeadlineStopsGenerate(t *testing.T) {
	// A deadline in the middle of a long generation: Generate returns the text so far.
	r := openRuntime(t, kjvModel, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	g, err := r.Generate(ctx, "In the beginning", SamplingOptions{})
	if g.Finish == FinishLength {
		t.Skipf("the whole context (%d tokens) was generated before the deadline", len(g.Tokens))
	}
	if !errors.Is(err, context.DeadlineExceeded) || g.Finish != FinishCancelled {
		t.Errorf("Generate past the deadline: finish %v, %v", g.Finish, err)
	}
	pagesReleased(t, r)
}

func TestClosingStreamEarlyCancels(t *testing.T) {
	r := openRuntime(t, kjvModel, nil)
	ts, err := r.GenerateStream(context.Background(), "In the beginning", SamplingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3 && ts.Next(); i++ {
	}
	s := ts.Session()
	ts.Close()
	ts.Close()
	if ts.Next() {
		t.Error("Next after Close")
	}
	if ts.FinishReason() != FinishCancelled {
		t.Errorf("finish %v", ts.FinishReason())
	}
	// The stream owned its session and closed it.
	if _, err := s.Info(); !errors.Is(err, ErrClosed) {
		t.Errorf("session after the stream's Close: %v", err)
	}
	pagesReleased(t, r)
}

// A step failure from which the session could go on later (its prompt finds no free KV page
// under the fail policy) ends the stream with the library's message for the session, and the
// stream cancels the generation rather than leave it running with no reader.
func TestStreamEndingOnAStepFailureCancelsTheGeneration(t *testing.T) {
	// Two pages of 16 positions (3 layers of 48 float32 values a position).
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, KVBudgetBytes: 2 * 16 * 3 * 48 * 4})
	s, err := r.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(3 + i)
	}
	if err := s.Append(prompt); err != nil {
		t.Fatal(err)
	}
	ts, err := s.Stream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Next() {
		t.Fatal("a token from a prompt that does not fit")
	}
	var le *Error
	if !errors.As(ts.Err(), &le) || le.Status != StatusKVExhausted {
		t.Fatalf("stream error %v", ts.Err())
	}
	if !strings.Contains(le.Message, "needs KV pages for 40 positions") {
		t.Errorf("message %q is not the library's", le.Message)
	}
	if ts.FinishReason() != FinishError {
		t.Errorf("finish %v", ts.FinishReason())
	}
	info, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.State != SessionCancelled || info.NumPages != 0 {
		t.Errorf("session after the stream: %+v", info)
	}
}
