package llmrt

/*
#include <stdint.h>
#include <stdlib.h>
#include "llmrt/llmrt.h"

// The Go side of the callbacks (tracker_export.go). user_data carries a runtime/cgo.Handle.
extern void llmrtGoTrackerAlloc(uintptr_t h, uint64_t session_id, uint32_t page, uint64_t tag);
extern void llmrtGoTrackerFree(uintptr_t h, uint64_t session_id, uint32_t page, uint64_t tag);
extern void llmrtGoTrackerShare(uintptr_t h, uint64_t from, uint64_t to, uint32_t page, uint64_t tag);
extern int32_t llmrtGoTrackerVerify(uintptr_t h, uint64_t session_id, uint32_t* pages, uint64_t* tags, size_t n);
extern void llmrtGoTrackerViolation(uintptr_t h, uint64_t session_id, uint32_t entry, uint32_t page,
                                    uint64_t expected_tag, uint64_t actual_tag);
extern void llmrtGoTrackerDestroy(uintptr_t h);

// Trampolines with the exact llm_kv_tracker signatures (const pointers, void* user data).
static void tr_alloc(void* u, uint64_t s, uint32_t p, uint64_t t) { llmrtGoTrackerAlloc((uintptr_t)u, s, p, t); }
static void tr_free(void* u, uint64_t s, uint32_t p, uint64_t t) { llmrtGoTrackerFree((uintptr_t)u, s, p, t); }
static void tr_share(void* u, uint64_t f, uint64_t to, uint32_t p, uint64_t t) {
  llmrtGoTrackerShare((uintptr_t)u, f, to, p, t);
}
static int32_t tr_verify(void* u, uint64_t s, const uint32_t* pages, const uint64_t* tags, size_t n) {
  return llmrtGoTrackerVerify((uintptr_t)u, s, (uint32_t*)pages, (uint64_t*)tags, n);
}
static void tr_violation(void* u, uint64_t s, uint32_t e, uint32_t p, uint64_t want, uint64_t got) {
  llmrtGoTrackerViolation((uintptr_t)u, s, e, p, want, got);
}
static void tr_destroy(void* u) { llmrtGoTrackerDestroy((uintptr_t)u); }

// llm_runtime_create_v2 with a tracker whose user data is the handle h. The library copies the
// tracker at creation and calls destroy(h) once when it no longer uses it, also on failure.
static llm_status llmrt_go_create_with_tracker(const char* dir, const llm_runtime_options* opts, uintptr_t h,
                                               llm_runtime** out, llm_error* err) {
  llm_kv_tracker t;
  llm_runtime_options o = *opts;
  t.struct_size = sizeof t;
  t.reserved0 = 0;
  t.user_data = (void*)h;
  t.on_alloc = tr_alloc;
  t.on_free = tr_free;
  t.on_share = tr_share;
  t.on_verify = tr_verify;
  t.on_violation = tr_violation;
  t.destroy = tr_destroy;
  o.tracker = &t;
  return llm_runtime_create_v2(dir, &o, out, err);
}

// llm_session_create with stop tokens: the pointer to the Go array is set here, in a C copy of
// the options, because cgo lets Go pass no memory that holds a Go pointer.
static llm_status llmrt_go_session_create(llm_runtime* rt, const llm_sampling_options* opts, const int32_t* stops,
                                          llm_session** out) {
  llm_sampling_options o = *opts;
  o.stop_tokens = stops;
  return llm_session_create(rt, &o, out);
}
*/
import "C"

import (
	"runtime/cgo"
	"sync/atomic"
)

// KVTracker observes the KV page life cycle of a runtime (llm_kv_tracker) and may veto a session
// before it runs. The calls come from the goroutine inside the llmrt call that caused the event
// (a step for alloc, share, verify and violation; a step, a cancel, a session's or the runtime's
// Close for free) while the runtime's lock is held: they must return quickly and must not call
// methods of the same runtime or its sessions. A panic in a callback is recovered (a panicking
// OnVerify vetoes the session). Embed NopTracker to implement only some of the methods.
type KVTracker interface {
	// OnAlloc: a page was handed to the session with a new tag.
	OnAlloc(sessionID uint64, page uint32, tag uint64)
	// OnFree: the session released its hold on the page. sessionID 0: an orphaned page
	// reclaimed after an integrity failure.
	OnFree(sessionID uint64, page uint32, tag uint64)
	// OnShare: toSession now shares a prefix page first computed by fromSession (0 if unknown).
	OnShare(fromSession, toSession uint64, page uint32, tag uint64)
	// OnVerify runs after the tag check of a session passed; false vetoes it (the session is
	// aborted with StatusKVIntegrity). The slices are valid only during the call.
	OnVerify(sessionID uint64, pages []uint32, tags []uint64) bool
	// OnViolation: entry of the session's page table maps page, expected expectedTag, found
	// actualTag (0: the page is free).
	OnViolation(sessionID uint64, entry, page uint32, expectedTag, actualTag uint64)
}

// NopTracker implements every KVTracker method as a no-op that lets sessions run.
type NopTracker struct{}

func (NopTracker) OnAlloc(uint64, uint32, uint64)                     {}
func (NopTracker) OnFree(uint64, uint32, uint64)                      {}
func (NopTracker) OnShare(uint64, uint64, uint32, uint64)             {}
func (NopTracker) OnVerify(uint64, []uint32, []uint64) bool           { return true }
func (NopTracker) OnViolation(uint64, uint32, uint32, uint64, uint64) {}

// trackerHandles counts the tracker handles the library still holds (tests check that the
// destroy hook releases each one exactly once).
var trackerHandles atomic.Int64

func createWithTracker(dir *C.char, opts *C.llm_runtime_options, h cgo.Handle, out **C.llm_runtime,
	e *C.llm_error) C.llm_status {
	return C.llmrt_go_create_with_tracker(dir, opts, C.uintptr_t(h), out, e)
}

func createSessionWithStops(rt *C.llm_runtime, opts *C.llm_sampling_options, stops *C.int32_t,
	out **C.llm_session) C.llm_status {
	return C.llmrt_go_session_create(rt, opts, stops, out)
}
