package llmrt

import (
	"context"
	"sync"
	"testing"
)

var concurrentPrompts = []string{
	"In the beginning",
	"And the LORD said unto Moses,",
	"Blessed are the meek:",
	"The LORD is my shepherd;",
	"And it came to pass, when",
	"For God so loved the world,",
	"Then said Jesus unto them,",
	"And Abraham",
}

// samplingFor gives half the sessions greedy decoding and half seeded sampling, so that both
// the argmax and the per-session random streams are checked against the solo runs.
func samplingFor(i int) SamplingOptions {
	o := SamplingOptions{MaxNewTokens: 20 + uint32(i)}
	if i%2 == 1 {
		o.Temperature = 0.8
		o.TopK = 40
		o.Seed = uint64(1000 + i)
	}
	return o
}

type streamed struct {
	ids    []int32
	text   string
	finish FinishReason
}

func TestManySessionsFromManyGoroutines(t *testing.T) {
	// Alone: each prompt in its own generation, one after the other.
	solo := make([]streamed, len(concurrentPrompts))
	{
		r := openRuntime(t, kjvModel, nil)
		for i, p := range concurrentPrompts {
			g, err := r.Generate(context.Background(), p, samplingFor(i))
			if err != nil {
				t.Fatal(err)
			}
			solo[i] = streamed{g.Tokens, g.Text, g.Finish}
		}
		if r.widest != 1 {
			t.Fatalf("solo runs had steps with %d results", r.widest)
		}
	}

	// Together: eight sessions, each read by its own goroutine; the steps one goroutine runs
	// advance the others' sessions, whose results wait in their queues.
	r := openRuntime(t, kjvModel, nil)
	tok, err := r.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := tok.Info()
	streams := make([]*TokenStream, len(concurrentPrompts))
	for i, p := range concurrentPrompts {
		ids, err := tok.Encode(p, false)
		if err != nil {
			t.Fatal(err)
		}
		o := samplingFor(i)
		o.StopTokens = []int32{info.EOS}
		s, err := r.NewSession(&o)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Append(ids); err != nil {
			t.Fatal(err)
		}
		if streams[i], err = s.Stream(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	together := make([]streamed, len(concurrentPrompts))
	errs := make([]error, len(concurrentPrompts))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ts := streams[i]
			defer ts.Close()
			<-start
			var out streamed
			for ts.Next() {
				out.ids = append(out.ids, ts.Token().ID)
				out.text += ts.Token().Text
			}
			out.finish = ts.FinishReason()
			together[i], errs[i] = out, ts.Err()
		}(i)
	}
	close(start)
	wg.Wait()
	for i := range concurrentPrompts {
		if errs[i] != nil {
			t.Errorf("session %d: %v", i, errs[i])
			continue
		}
		if !equalIDs(together[i].ids, solo[i].ids) || together[i].text != solo[i].text || together[i].finish != solo[i].finish {
			t.Errorf("session %d together: %v %q (%v)\nalone: %v %q (%v)", i, together[i].ids, together[i].text,
				together[i].finish, solo[i].ids, solo[i].text, solo[i].finish)
		}
		if len(together[i].ids) == 0 {
			t.Errorf("session %d generated nothing", i)
		}
	}
	// All eight prompts were queued before the first step, so that step ran them all at once.
	if r.widest != len(concurrentPrompts) {
		t.Errorf("the widest step had %d results, want %d", r.widest, len(concurrentPrompts))
	}
	t.Logf("%d steps for %d sessions", r.steps, len(concurrentPrompts))
}

func TestSessionsCreatedWhileOthersStream(t *testing.T) {
	// Sessions come and go while other goroutines stream: every one gets its solo tokens, and a
	// session created between two steps loses none of its results.
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	const workers, rounds = 6, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < rounds; k++ {
				s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 9})
				if err != nil {
					errs <- err
					return
				}
				if err := s.Append(goldenPrompt); err != nil {
					errs <- err
					return
				}
				ts, err := s.Stream(context.Background(), nil)
				if err != nil {
					errs <- err
					return
				}
				var ids []int32
				for ts.Next() {
					ids = append(ids, ts.Token().ID)
				}
				if ts.Err() != nil {
					errs <- ts.Err()
				} else if !equalIDs(ids, goldenTokens) {
					errs <- &Error{Op: "test", Message: "wrong tokens"}
				}
				ts.Close()
				s.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	pagesReleased(t, r)
}

func TestRuntimeCloseWhileStreaming(t *testing.T) {
	// Closing the runtime while goroutines stream ends their streams with ErrClosed (or their
	// normal finish), never a use of a destroyed handle.
	r, err := NewRuntime(kjvModel, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts, err := r.GenerateStream(context.Background(), "In the beginning", SamplingOptions{})
			if err != nil {
				started <- struct{}{}
				return
			}
			n := 0
			for ts.Next() {
				if n++; n == 2 {
					started <- struct{}{}
				}
			}
			if ts.Err() != nil && !isClosed(ts.Err()) {
				t.Errorf("stream ended with %v", ts.Err())
			}
			ts.Close()
		}()
	}
	for i := 0; i < 4; i++ {
		<-started
	}
	r.Close()
	wg.Wait()
}

func isClosed(err error) bool {
	e, ok := err.(*Error)
	return ok && e.closed
}
