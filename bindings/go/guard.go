package llmrt

import "sync"

// guard keeps a C handle alive while calls on it are in flight: a call enters (fails once the
// handle is closing), the C call runs, the call leaves; close refuses new calls, waits for the
// ones in flight and then lets its caller destroy the handle. This turns the header's REQUIRES
// ("no call uses a handle during or after its destroy") into an error for a Go caller instead
// of a use after free. Entering twice from one goroutine is fine (it is a count, not a lock).
type guard struct {
	mu       sync.Mutex
	idle     sync.Cond // signalled when inflight drops to 0 while closing
	inflight int
	closing  bool
}

// enter registers a call; false when the handle is closing or closed.
func (g *guard) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.inflight++
	return true
}

func (g *guard) leave() {
	g.mu.Lock()
	g.inflight--
	if g.inflight == 0 && g.closing && g.idle.L != nil {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

// close marks the handle closing and waits until no call is in flight. It returns false when an
// earlier close already did (the caller then destroys nothing).
func (g *guard) close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.closing = true
	if g.idle.L == nil {
		g.idle.L = &g.mu
	}
	for g.inflight > 0 {
		g.idle.Wait()
	}
	return true
}

// closed reports whether close has begun.
func (g *guard) closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing
}
