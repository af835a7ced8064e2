package llmrt

// The callbacks the library calls, through the trampolines of tracker.go and log.go. A file with
// //export may only declare in its preamble, so they all live here.

// #include <stdint.h>
// #include <stddef.h>
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

func trackerOf(h C.uintptr_t) KVTracker { return cgo.Handle(h).Value().(KVTracker) }

// A panic must not unwind through the library's frames; it is dropped here.
func swallowPanic() { recover() }

//export llmrtGoTrackerAlloc
func llmrtGoTrackerAlloc(h C.uintptr_t, session C.uint64_t, page C.uint32_t, tag C.uint64_t) {
	defer swallowPanic()
	trackerOf(h).OnAlloc(uint64(session), uint32(page), uint64(tag))
}

//export llmrtGoTrackerFree
func llmrtGoTrackerFree(h C.uintptr_t, session C.uint64_t, page C.uint32_t, tag C.uint64_t) {
	defer swallowPanic()
	trackerOf(h).OnFree(uint64(session), uint32(page), uint64(tag))
}

//export llmrtGoTrackerShare
func llmrtGoTrackerShare(h C.uintptr_t, from, to C.uint64_t, page C.uint32_t, tag C.uint64_t) {
	defer swallowPanic()
	trackerOf(h).OnShare(uint64(from), uint64(to), uint32(page), uint64(tag))
}

//export llmrtGoTrackerVerify
func llmrtGoTrackerVerify(h C.uintptr_t, session C.uint64_t, pages *C.uint32_t, tags *C.uint64_t, n C.size_t) (veto C.int32_t) {
	veto = 1 // a panicking tracker vetoes: it could not vouch for the pages
	defer swallowPanic()
	var p []uint32
	var t []uint64
	if n > 0 {
		p = unsafe.Slice((*uint32)(unsafe.Pointer(pages)), int(n))
		t = unsafe.Slice((*uint64)(unsafe.Pointer(tags)), int(n))
	}
	if trackerOf(h).OnVerify(uint64(session), p, t) {
		return 0
	}
	return 1
}

//export llmrtGoTrackerViolation
func llmrtGoTrackerViolation(h C.uintptr_t, session C.uint64_t, entry, page C.uint32_t, expected, actual C.uint64_t) {
	defer swallowPanic()
	trackerOf(h).OnViolation(uint64(session), uint32(entry), uint32(page), uint64(expected), uint64(actual))
}

//export llmrtGoTrackerDestroy
func llmrtGoTrackerDestroy(h C.uintptr_t) {
	cgo.Handle(h).Delete()
	trackerHandles.Add(-1)
}

//export llmrtGoLog
func llmrtGoLog(h C.uintptr_t, level C.int32_t, message *C.char) {
	defer swallowPanic()
	cgo.Handle(h).Value().(LogFunc)(LogLevel(level), C.GoString(message))
}

//export llmrtGoLogDestroy
func llmrtGoLogDestroy(h C.uintptr_t) {
	cgo.Handle(h).Delete()
	logHandles.Add(-1)
}
