package llmrt

// #include "llmrt/llmrt.h"
import "C"

import (
	"strconv"
	"unsafe"
)

// Status is an llm_status code. It implements error, so that the sentinels below can be matched
// with errors.Is against any *Error of the same status.
type Status int32

// The llm_status codes; they are stable and never renumbered.
const (
	StatusOK              Status = 0
	StatusInvalidArgument Status = 1  // NULL pointer, bad option value, bad token id
	StatusNotFound        Status = 2  // missing directory, file or tensor
	StatusIO              Status = 3  // a file could not be opened, mapped or read
	StatusFormat          Status = 4  // corrupt, truncated or inconsistent checkpoint data
	StatusUnsupported     Status = 5  // unknown architecture, dtype or feature
	StatusOutOfMemory     Status = 6  // host or device allocation failed
	StatusKVExhausted     Status = 7  // no free KV page for a session's next tokens
	StatusKVIntegrity     Status = 8  // a session's KV pages failed verification
	StatusCancelled       Status = 9  // the session was cancelled
	StatusInvalidState    Status = 10 // the call is not valid in the object's current state
	StatusOutOfRange      Status = 11 // a position, length or limit was exceeded
	StatusBufferTooSmall  Status = 12 // an output buffer was too small
	StatusInternal        Status = 13 // a bug in llmrt; the message says where
)

// Sentinel kinds for errors.Is: errors.Is(err, llmrt.ErrNotFound) holds for every *Error whose
// Status is StatusNotFound.
var (
	ErrInvalidArgument error = StatusInvalidArgument
	ErrNotFound        error = StatusNotFound
	ErrIO              error = StatusIO
	ErrFormat          error = StatusFormat
	ErrUnsupported     error = StatusUnsupported
	ErrOutOfMemory     error = StatusOutOfMemory
	ErrKVExhausted     error = StatusKVExhausted
	ErrKVIntegrity     error = StatusKVIntegrity
	ErrCancelled       error = StatusCancelled
	ErrInvalidState    error = StatusInvalidState
	ErrOutOfRange      error = StatusOutOfRange
	ErrBufferTooSmall  error = StatusBufferTooSmall
	ErrInternal        error = StatusInternal
	// ErrClosed matches the errors of calls on a handle after its Close (or its runtime's). They
	// carry StatusInvalidState, so errors.Is(err, ErrInvalidState) holds for them too.
	ErrClosed error = closedError{}
)

// statusNames are the header's names of the codes (what llm_status_string returns); the ABI test
// checks every name and value against the header's manifest.
var statusNames = [...]string{
	StatusOK:              "LLM_OK",
	StatusInvalidArgument: "LLM_ERR_INVALID_ARGUMENT",
	StatusNotFound:        "LLM_ERR_NOT_FOUND",
	StatusIO:              "LLM_ERR_IO",
	StatusFormat:          "LLM_ERR_FORMAT",
	StatusUnsupported:     "LLM_ERR_UNSUPPORTED",
	StatusOutOfMemory:     "LLM_ERR_OUT_OF_MEMORY",
	StatusKVExhausted:     "LLM_ERR_KV_EXHAUSTED",
	StatusKVIntegrity:     "LLM_ERR_KV_INTEGRITY",
	StatusCancelled:       "LLM_ERR_CANCELLED",
	StatusInvalidState:    "LLM_ERR_INVALID_STATE",
	StatusOutOfRange:      "LLM_ERR_OUT_OF_RANGE",
	StatusBufferTooSmall:  "LLM_ERR_BUFFER_TOO_SMALL",
	StatusInternal:        "LLM_ERR_INTERNAL",
}

// String returns the header's name of the code ("LLM_ERR_NOT_FOUND").
func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "llm_status(" + strconv.Itoa(int(s)) + ")"
}

// Error makes a Status usable as a sentinel error.
func (s Status) Error() string { return "llmrt: " + s.String() }

// Error is a failed llmrt call: the status and the library's message, which names the thing at
// fault (a file, a tensor, an argument).
type Error struct {
	Op      string // the C function or binding method that failed, e.g. "llm_runtime_create"
	Status  Status
	Message string
	closed  bool // a call on a closed handle (matches ErrClosed)
}

func (e *Error) Error() string {
	msg := "llmrt: " + e.Op + ": " + e.Status.String()
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns the Status, so that errors.Is(err, ErrNotFound) and errors.As(err, &status) work.
func (e *Error) Unwrap() error { return e.Status }

// Is reports ErrClosed for the errors of calls on closed handles.
func (e *Error) Is(target error) bool {
	_, closed := target.(closedError)
	return closed && e.closed
}

type closedError struct{}

func (closedError) Error() string { return "llmrt: handle is closed" }

func errClosed(op, what string) error {
	return &Error{Op: op, Status: StatusInvalidState, Message: what + " is closed", closed: true}
}

// fromCError builds the error of a failed call from the llm_error the library filled (by a
// create_v2 function or a *_last_error function). The status returned by the call is
// authoritative: when the record holds another failure (another goroutine failed a call on the
// same handle at the same moment), the message is left out rather than mismatched.
func fromCError(op string, st C.llm_status, e *C.llm_error) error {
	err := &Error{Op: op, Status: Status(st)}
	if e != nil && e.status == st {
		err.Message = C.GoString(&e.message[0])
	}
	return err
}

func newCError() C.llm_error {
	var e C.llm_error
	e.struct_size = C.uint32_t(unsafe.Sizeof(e))
	return e
}

// The per-handle records, read right after the failed call; see "errors by handle" in the header.

func runtimeError(op string, st C.llm_status, rt *C.llm_runtime) error {
	e := newCError()
	C.llm_runtime_last_error(rt, &e)
	return fromCError(op, st, &e)
}

func sessionError(op string, st C.llm_status, s *C.llm_session) error {
	e := newCError()
	C.llm_session_last_error(s, &e)
	return fromCError(op, st, &e)
}

func tokenizerError(op string, st C.llm_status, t *C.llm_tokenizer) error {
	e := newCError()
	C.llm_tokenizer_last_error(t, &e)
	return fromCError(op, st, &e)
}

func detokenizerError(op string, st C.llm_status, d *C.llm_detokenizer) error {
	e := newCError()
	C.llm_detokenizer_last_error(d, &e)
	return fromCError(op, st, &e)
}
