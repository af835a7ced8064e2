package llmrt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// countingTracker records the page events and can veto one session.
type countingTracker struct {
	mu                              sync.Mutex
	allocs, frees, shares, verifies int
	held                            map[uint32]int // page -> holders, from alloc/share/free
	vetoSession                     uint64
	panicOnAlloc                    bool
}

func (c *countingTracker) OnAlloc(session uint64, page uint32, tag uint64) {
	c.mu.Lock()
	c.allocs++
	c.held[page]++
	panicking := c.panicOnAlloc
	c.mu.Unlock()
	if panicking {
		panic("tracker bug")
	}
}

func (c *countingTracker) OnFree(session uint64, page uint32, tag uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frees++
	c.held[page]--
}

func (c *countingTracker) OnShare(from, to uint64, page uint32, tag uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shares++
	c.held[page]++
}

func (c *countingTracker) OnVerify(session uint64, pages []uint32, tags []uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.verifies++
	if len(pages) != len(tags) {
		panic("pages and tags differ in length")
	}
	return session != c.vetoSession
}

func (c *countingTracker) OnViolation(session uint64, entry, page uint32, expected, actual uint64) {}

func TestTrackerCallbacksAndDestroy(t *testing.T) {
	before := trackerHandles.Load()
	tr := &countingTracker{held: map[uint32]int{}}
	r, err := NewRuntime(kjvModel, &RuntimeOptions{Tracker: tr})
	if err != nil {
		t.Fatal(err)
	}
	if trackerHandles.Load() != before+1 {
		t.Fatalf("%d tracker handles, want %d", trackerHandles.Load(), before+1)
	}
	// Two sessions with the same long prompt: the second shares the first's full pages.
	prompt := strings.Repeat("And God said, Let there be light: and there was light. ", 6)
	g1, err := r.Generate(context.Background(), prompt, SamplingOptions{MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := r.Tokenizer()
	ids, _ := tok.Encode(prompt, false)
	// One session computes the prompt's pages and keeps them while a second one starts on them.
	hold, _ := r.NewSession(&SamplingOptions{MaxNewTokens: 8})
	defer hold.Close()
	hold.Append(ids)
	if res, err := hold.Next(context.Background()); err != nil || res.Token == TokenNone {
		t.Fatalf("first step of the holder: %+v, %v", res, err)
	}
	s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	s.Append(ids)
	got, _ := streamIDs(t, s)
	if !equalIDs(got, g1.Tokens) {
		t.Errorf("tracked sessions: %v vs %v", got, g1.Tokens)
	}
	tr.mu.Lock()
	if tr.allocs == 0 || tr.verifies == 0 || tr.shares == 0 || tr.frees == 0 {
		t.Errorf("allocs %d, verifies %d, shares %d, frees %d; want all > 0", tr.allocs, tr.verifies, tr.shares, tr.frees)
	}
	tr.mu.Unlock()

	// A veto aborts that session alone, with StatusKVIntegrity on its stream.
	victim, _ := r.NewSession(&SamplingOptions{MaxNewTokens: 8})
	other, _ := r.NewSession(&SamplingOptions{MaxNewTokens: 8})
	tr.mu.Lock()
	tr.vetoSession = victim.ID()
	tr.mu.Unlock()
	victim.Append(goldenPrompt)
	other.Append(ids)
	streamIDs(t, other)
	vs, _ := victim.Stream(context.Background(), nil)
	for vs.Next() {
	}
	if !errors.Is(vs.Err(), ErrKVIntegrity) || vs.FinishReason() != FinishError {
		t.Errorf("vetoed session: finish %v, %v", vs.FinishReason(), vs.Err())
	}
	vs.Close()

	r.Close()
	// Every page a session held was freed, and the destroy hook released the handle.
	tr.mu.Lock()
	for page, n := range tr.held {
		if n != 0 {
			t.Errorf("page %d: %d holders after Close", page, n)
		}
	}
	tr.mu.Unlock()
	if trackerHandles.Load() != before {
		t.Errorf("%d tracker handles after Close, want %d", trackerHandles.Load(), before)
	}
}

func TestTrackerReleasedWhenCreationFails(t *testing.T) {
	before := trackerHandles.Load()
	_, err := NewRuntime(t.TempDir(), &RuntimeOptions{Tracker: NopTracker{}})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("NewRuntime(empty dir): %v", err)
	}
	if trackerHandles.Load() != before {
		t.Errorf("%d tracker handles after a failed creation, want %d", trackerHandles.Load(), before)
	}
}

func TestPanickingTrackerDoesNotCrash(t *testing.T) {
	tr := &countingTracker{held: map[uint32]int{}, panicOnAlloc: true}
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, Tracker: tr})
	s, _ := r.NewSession(&SamplingOptions{MaxNewTokens: 9})
	s.Append(goldenPrompt)
	ids, _ := streamIDs(t, s)
	if !equalIDs(ids, goldenTokens) {
		t.Errorf("tokens %v with a panicking OnAlloc", ids)
	}
}
