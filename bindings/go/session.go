package llmrt

// #include "llmrt/llmrt.h"
import "C"

import (
	"context"
	"math"
	"strconv"
	"unsafe"
)

// SamplingOptions configure a session's sampler (llm_sampling_options). The zero value is greedy
// decoding without a length limit.
type SamplingOptions struct {
	Temperature  float32 // 0 = greedy
	TopK         int32   // 0 = off
	TopP         float32 // 0 or 1 = off
	MinP         float32 // 0 = off
	MaxNewTokens uint32  // per generation; 0 = until a stop token or the context ends
	Seed         uint64  // equal seeds give equal samples
	StopTokens   []int32 // copied at creation

	// NoLogits makes a session that does not keep its logits (LLM_SAMPLING_NO_LOGITS): a step
	// brings back only its sampled ids (on the CUDA backend, vocab_size floats less per session
	// and step over the bus) and its tokens are the same, but Session.Logits fails with an
	// ErrInvalidState error.
	NoLogits bool
}

// samplingNoLogits is LLM_SAMPLING_NO_LOGITS, the llm_sampling_options.flags bit of NoLogits.
const samplingNoLogits = 0x1

// Session is one conversation in a runtime (llm_session). It cannot outlive its runtime: the
// runtime's Close closes it. All methods may be called from any goroutine.
type Session struct {
	rt  *Runtime
	ptr *C.llm_session
	id  uint64
	g   guard

	// Guarded by rt.mu: the step results filed for this session and not read yet, and whether a
	// reader (Next) ever asked for them (then Runtime.Step files them too).
	queue  []StepResult
	reader bool
}

// NewSession creates an empty session. opts may be nil for greedy decoding with no limit.
func (r *Runtime) NewSession(opts *SamplingOptions) (*Session, error) {
	if err := r.enter("Runtime.NewSession"); err != nil {
		return nil, err
	}
	defer r.g.leave()
	so, stops, err := samplingOptionsOf("Runtime.NewSession", opts)
	if err != nil {
		return nil, err
	}
	var ptr *C.llm_session
	var st C.llm_status
	if len(stops) > 0 {
		// The stop tokens are copied at creation; the Go array only lives through the call, so
		// the pointer to it is set in C (cgo forbids passing Go memory holding a Go pointer).
		st = createSessionWithStops(r.ptr, &so, &stops[0], &ptr)
	} else {
		st = C.llm_session_create(r.ptr, &so, &ptr)
	}
	if st != C.LLM_OK {
		return nil, runtimeError("llm_session_create", st, r.ptr)
	}
	return r.adoptSession(ptr)
}

// samplingOptionsOf is opts as llm_sampling_options, with its stop tokens as a C-typed array
// (the caller sets the options' pointer to it in C).
func samplingOptionsOf(op string, opts *SamplingOptions) (C.llm_sampling_options, []C.int32_t, error) {
	var so C.llm_sampling_options
	C.llm_sampling_options_init(&so)
	var stops []C.int32_t
	if opts != nil {
		so.temperature = C.float(opts.Temperature)
		so.top_k = C.int32_t(opts.TopK)
		if opts.TopP != 0 {
			so.top_p = C.float(opts.TopP)
		}
		so.min_p = C.float(opts.MinP)
		so.max_new_tokens = C.uint32_t(opts.MaxNewTokens)
		so.seed = C.uint64_t(opts.Seed)
		if opts.NoLogits {
			so.flags |= samplingNoLogits
		}
		if len(opts.StopTokens) > math.MaxUint32 {
			return so, nil, &Error{Op: op, Status: StatusInvalidArgument, Message: "too many stop tokens"}
		}
		if len(opts.StopTokens) > 0 {
			stops = make([]C.int32_t, len(opts.StopTokens))
			for i, t := range opts.StopTokens {
				stops[i] = C.int32_t(t)
			}
			so.num_stop_tokens = C.uint32_t(len(stops))
		}
	}
	return so, stops, nil
}

// adoptSession wraps a session the library made and registers it with the runtime.
func (r *Runtime) adoptSession(ptr *C.llm_session) (*Session, error) {
	var info C.llm_session_info
	info.struct_size = C.uint32_t(unsafe.Sizeof(info))
	if st := C.llm_session_get_info(ptr, &info); st != C.LLM_OK {
		err := sessionError("llm_session_get_info", st, ptr)
		C.llm_session_destroy(ptr)
		return nil, err
	}
	s := &Session{rt: r, ptr: ptr, id: uint64(info.id)}
	r.mu.Lock()
	r.sessions[s.id] = s
	r.mu.Unlock()
	return s, nil
}

// ID is the session's id, unique within its runtime and increasing in creation order.
func (s *Session) ID() uint64 { return s.id }

// Runtime is the runtime the session belongs to.
func (s *Session) Runtime() *Runtime { return s.rt }

// enter registers a call on the session (and its runtime); leave must follow.
func (s *Session) enter(op string) error {
	if !s.rt.g.enter() {
		return errClosed(op, "the runtime")
	}
	if !s.g.enter() {
		s.rt.g.leave()
		return errClosed(op, "session "+strconv.FormatUint(s.id, 10))
	}
	return nil
}

func (s *Session) leave() {
	s.g.leave()
	s.rt.g.leave()
}

// Close destroys the session and returns its KV pages, after the calls in progress on it
// return. It is idempotent, and a no-op once the runtime is closed.
func (s *Session) Close() error {
	if !s.rt.g.enter() {
		return nil // the runtime's Close destroyed the session
	}
	defer s.rt.g.leave()
	if !s.g.close() {
		return nil
	}
	C.llm_session_destroy(s.ptr)
	s.rt.mu.Lock()
	if s.rt.sessions != nil {
		delete(s.rt.sessions, s.id)
	}
	s.rt.mu.Unlock()
	s.dropQueue()
	return nil
}

func (s *Session) dropQueue() {
	s.rt.mu.Lock()
	s.queue = nil
	s.rt.mu.Unlock()
}

// Append queues tokens for the next steps: a prompt, or the next turn after a finished
// generation. Every id must be below the model's vocabulary size (else ErrInvalidArgument and
// nothing is queued).
func (s *Session) Append(tokens []int32) error {
	if err := s.enter("Session.Append"); err != nil {
		return err
	}
	defer s.leave()
	if len(tokens) == 0 {
		return nil
	}
	// int32 and C.int32_t have the same layout; the slice holds no Go pointers.
	st := C.llm_session_append_tokens(s.ptr, (*C.int32_t)(unsafe.Pointer(&tokens[0])), C.size_t(len(tokens)))
	if st != C.LLM_OK {
		return sessionError("llm_session_append_tokens", st, s.ptr)
	}
	return nil
}

// stepError is the error of a step result in which the session did not advance, with the message
// the library recorded for it on the session (llm_session_last_error), when that record is still
// the step's.
func (s *Session) stepError(res StepResult) error {
	fallback := res.Err()
	if err := s.enter("Session.stepError"); err != nil {
		return fallback
	}
	defer s.leave()
	e := newCError()
	if C.llm_session_last_error(s.ptr, &e) != C.LLM_OK || Status(e.status) != res.Status {
		return fallback
	}
	msg := C.GoString(&e.message[0])
	if msg == "" {
		return fallback
	}
	return &Error{Op: "llm_decode_step", Status: res.Status, Message: msg}
}

// Cancel stops the session's generation at once and releases its KV pages; the next step reports
// it with FinishCancelled. It may be called from any goroutine while another one reads the
// session's tokens.
func (s *Session) Cancel() error {
	if err := s.enter("Session.Cancel"); err != nil {
		return err
	}
	defer s.leave()
	if st := C.llm_session_cancel(s.ptr); st != C.LLM_OK {
		return sessionError("llm_session_cancel", st, s.ptr)
	}
	return nil
}

// SessionInfo describes a session (llm_session_info).
type SessionInfo struct {
	State        SessionState
	ID           uint64
	NumTokens    uint32 // tokens in the context (processed into the KV cache)
	NumPending   uint32 // tokens queued and not yet processed
	NumGenerated uint32 // tokens generated in the current generation
	NumPages     uint32 // KV pages held
}

// Info returns the session's state and counters.
func (s *Session) Info() (SessionInfo, error) {
	if err := s.enter("Session.Info"); err != nil {
		return SessionInfo{}, err
	}
	defer s.leave()
	return s.infoLocked()
}

func (s *Session) infoLocked() (SessionInfo, error) {
	var ci C.llm_session_info
	ci.struct_size = C.uint32_t(unsafe.Sizeof(ci))
	if st := C.llm_session_get_info(s.ptr, &ci); st != C.LLM_OK {
		return SessionInfo{}, sessionError("llm_session_get_info", st, s.ptr)
	}
	return SessionInfo{
		State:        SessionState(ci.state),
		ID:           uint64(ci.id),
		NumTokens:    uint32(ci.num_tokens),
		NumPending:   uint32(ci.num_pending),
		NumGenerated: uint32(ci.num_generated),
		NumPages:     uint32(ci.num_pages),
	}, nil
}

// Logits returns the logits of the session's most recent sampled position (vocab_size values).
// It returns an ErrInvalidState error before the first sampled position, and always for a
// session created with SamplingOptions.NoLogits.
func (s *Session) Logits() ([]float32, error) {
	if err := s.enter("Session.Logits"); err != nil {
		return nil, err
	}
	defer s.leave()
	var n C.size_t
	st := C.llm_session_get_logits(s.ptr, nil, 0, &n)
	if st != C.LLM_ERR_BUFFER_TOO_SMALL && st != C.LLM_OK {
		return nil, sessionError("llm_session_get_logits", st, s.ptr)
	}
	out := make([]float32, int(n))
	if len(out) == 0 {
		return out, nil
	}
	st = C.llm_session_get_logits(s.ptr, (*C.float)(unsafe.Pointer(&out[0])), C.size_t(len(out)), &n)
	if st != C.LLM_OK {
		return nil, sessionError("llm_session_get_logits", st, s.ptr)
	}
	return out[:int(n)], nil
}

// Next returns the session's next step result, running steps of the runtime (which advance
// every session, their results filed for them) until one is there. Many goroutines may call
// Next on their sessions at once: one steps while the others wait, then each takes its result.
// It returns an ErrInvalidState error when the session has no generation in progress (nothing
// queued, or its finish was already read), and ctx's error when ctx is done before a step.
func (s *Session) Next(ctx context.Context) (StepResult, error) {
	r := s.rt
	if err := r.enter("Session.Next"); err != nil {
		return StepResult{}, err
	}
	defer r.g.leave()
	r.mu.Lock()
	s.reader = true
	r.mu.Unlock()
	steppedCancelled := false
	for {
		if res, ok := s.pop(); ok {
			return res, nil
		}
		if err := ctx.Err(); err != nil {
			return StepResult{}, err
		}
		res, ok, err := s.stepFor(&steppedCancelled)
		if err != nil || ok {
			return res, err
		}
	}
}

func (s *Session) pop() (StepResult, bool) {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if len(s.queue) == 0 {
		return StepResult{}, false
	}
	res := s.queue[0]
	s.queue[0] = StepResult{}
	s.queue = s.queue[1:]
	if len(s.queue) == 0 {
		s.queue = nil // let the backing array go
	}
	return res, true
}

// stepFor runs one step on behalf of s unless another goroutine's step already filed a result
// for it or no step can produce one.
func (s *Session) stepFor(steppedCancelled *bool) (StepResult, bool, error) {
	r := s.rt
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	if res, ok := s.pop(); ok {
		return res, true, nil
	}
	if r.g.closed() {
		return StepResult{}, false, errClosed("Session.Next", "the runtime")
	}
	if err := s.enter("Session.Next"); err != nil {
		return StepResult{}, false, err
	}
	info, err := s.infoLocked()
	s.leave()
	if err != nil {
		return StepResult{}, false, err
	}
	switch info.State {
	case SessionPrefill, SessionDecoding:
	case SessionCancelled:
		// A cancelled session is reported by the first step after the cancel; steps are
		// serialized by stepMu, so if that one did not file it, it was read elsewhere.
		if *steppedCancelled {
			return StepResult{}, false, &Error{Op: "Session.Next", Status: StatusInvalidState,
				Message: "session " + strconv.FormatUint(s.id, 10) + " was cancelled and its finish was already read"}
		}
		*steppedCancelled = true
	default:
		return StepResult{}, false, &Error{Op: "Session.Next", Status: StatusInvalidState,
			Message: "session " + strconv.FormatUint(s.id, 10) + " has no generation in progress (state " +
				info.State.String() + ")"}
	}
	if _, err := r.stepLocked(true); err != nil {
		return StepResult{}, false, err
	}
	return StepResult{}, false, nil
}

func (st SessionState) String() string {
	switch st {
	case SessionIdle:
		return "idle"
	case SessionPrefill:
		return "prefill"
	case SessionDecoding:
		return "decoding"
	case SessionFinished:
		return "finished"
	case SessionCancelled:
		return "cancelled"
	case SessionFailed:
		return "failed"
	}
	return "SessionState(" + strconv.Itoa(int(st)) + ")"
}
