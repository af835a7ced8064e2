package llmrt

/*
#include <stdint.h>
#include <string.h>
#include "llmrt/llmrt.h"

extern void llmrtGoLog(uintptr_t h, int32_t level, char* message);
extern void llmrtGoLogDestroy(uintptr_t h);

static void log_fn(void* u, llm_log_level level, const char* message) {
  llmrtGoLog((uintptr_t)u, level, (char*)message);
}
static void log_destroy(void* u) { llmrtGoLogDestroy((uintptr_t)u); }

// llm_set_log_callback_v2 with the handle h as user data (h 0: back to stderr). The call has no
// handle to record its error, so the thread-local message is copied here, in the same cgo call
// and therefore on the same OS thread.
static llm_status llmrt_go_set_log(uintptr_t h, llm_log_level min_level, char* msg, size_t cap) {
  llm_status st = llm_set_log_callback_v2(h ? log_fn : NULL, (void*)h, min_level, h ? log_destroy : NULL);
  if (st != LLM_OK && cap > 0) {
    strncpy(msg, llm_last_error(), cap - 1);
    msg[cap - 1] = '\0';
  }
  return st;
}
*/
import "C"

import (
	"runtime/cgo"
	"sync/atomic"
)

// LogFunc receives one library log line (no trailing newline).
type LogFunc func(level LogLevel, message string)

// logHandles counts the log handlers the library still holds (tests).
var logHandles atomic.Int64

// SetLogHandler routes the library's log lines at or above minLevel to fn, process-wide; fn nil
// restores the default (stderr). The library releases the previous handler once no call of it
// is in progress. fn may be called from any goroutine that calls into llmrt, one call at a time.
func SetLogHandler(fn LogFunc, minLevel LogLevel) error {
	var h cgo.Handle
	if fn != nil {
		h = cgo.NewHandle(fn)
		logHandles.Add(1)
	}
	var msg [errorMessageCapacity]C.char
	if st := C.llmrt_go_set_log(C.uintptr_t(h), C.llm_log_level(minLevel), &msg[0], C.size_t(len(msg))); st != C.LLM_OK {
		if h != 0 {
			// On failure the library keeps nothing and calls no destroy hook.
			h.Delete()
			logHandles.Add(-1)
		}
		return &Error{Op: "llm_set_log_callback_v2", Status: Status(st), Message: C.GoString(&msg[0])}
	}
	return nil
}
