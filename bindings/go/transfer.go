package llmrt

/*
#include <stdlib.h>
#include <string.h>
#include "llmrt/llmrt.h"

// An import with the session's stop tokens set in C (cgo forbids Go memory holding a Go pointer).
static llm_status llmrt_go_import(llm_runtime* rt, const void* data, size_t size, const void* key, size_t key_len,
                                  const llm_sampling_options* opts, const int32_t* stops, llm_session** out) {
  llm_sampling_options o = *opts;
  o.stop_tokens = stops;
  return key != NULL ? llm_session_import_kv_authenticated(rt, data, size, key, key_len, &o, out)
                     : llm_session_import_kv(rt, data, size, &o, out);
}

// llm_model_kv_sizing_v2 has no handle to record its error: the thread-local message is copied
// here, in the same cgo call and therefore on the same OS thread.
static llm_status llmrt_go_kv_sizing(const char* dir, int32_t dtype, uint64_t budget, uint32_t page, uint32_t session,
                                     uint32_t tp, llm_kv_sizing* out, char* msg, size_t cap) {
  llm_status st = llm_model_kv_sizing_v2(dir, dtype, budget, page, session, tp, out);
  if (st != LLM_OK && cap > 0) {
    strncpy(msg, llm_last_error(), cap - 1);
    msg[cap - 1] = '\0';
  }
  return st;
}
*/
import "C"

import (
	"unsafe"
)

// ExportKV serializes the session for Runtime.ImportKV into a runtime of the same model
// (llm_session_export_kv; with a key of 16 to 1024 bytes, llm_session_export_kv_authenticated).
// Call it between steps; a step on another goroutine that grows the session meanwhile makes it
// ask again.
func (s *Session) ExportKV(key []byte) ([]byte, error) {
	if key != nil && len(key) == 0 {
		return nil, &Error{Op: "Session.ExportKV", Status: StatusInvalidArgument, Message: "an empty key (16 to 1024 bytes)"}
	}
	if err := s.enter("Session.ExportKV"); err != nil {
		return nil, err
	}
	defer s.leave()
	var buf []byte
	for {
		var size C.size_t
		var p unsafe.Pointer
		if len(buf) > 0 {
			p = unsafe.Pointer(&buf[0])
		}
		var st C.llm_status
		if key == nil {
			st = C.llm_session_export_kv(s.ptr, p, C.size_t(len(buf)), &size)
		} else {
			st = C.llm_session_export_kv_authenticated(s.ptr, unsafe.Pointer(&key[0]), C.size_t(len(key)), p,
				C.size_t(len(buf)), &size)
		}
		if st == C.LLM_OK {
			return buf[:int(size)], nil
		}
		if st != C.LLM_ERR_BUFFER_TOO_SMALL || int(size) <= len(buf) {
			return nil, sessionError("llm_session_export_kv", st, s.ptr)
		}
		buf = make([]byte, int(size))
	}
}

// ImportKV creates a session from Session.ExportKV of a runtime of the same model
// (llm_session_import_kv; with the exporter's key, llm_session_import_kv_authenticated). It
// continues exactly where the exporter's stopped, sampling with opts (nil: defaults) from the
// exported generator state. The header says what an import validates and may affect.
func (r *Runtime) ImportKV(blob, key []byte, opts *SamplingOptions) (*Session, error) {
	const op = "Runtime.ImportKV"
	if len(blob) == 0 {
		return nil, &Error{Op: op, Status: StatusInvalidArgument, Message: "an empty export"}
	}
	if key != nil && len(key) == 0 {
		return nil, &Error{Op: op, Status: StatusInvalidArgument, Message: "an empty key (16 to 1024 bytes)"}
	}
	if err := r.enter(op); err != nil {
		return nil, err
	}
	defer r.g.leave()
	so, stops, err := samplingOptionsOf(op, opts)
	if err != nil {
		return nil, err
	}
	var stopPtr *C.int32_t
	if len(stops) > 0 {
		stopPtr = &stops[0]
	}
	var keyPtr unsafe.Pointer
	if key != nil {
		keyPtr = unsafe.Pointer(&key[0])
	}
	// An imported session is ready to decode: it is registered before any step can report it (a
	// step on another goroutine in between would hand its first token to no one).
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	var ptr *C.llm_session
	if st := C.llmrt_go_import(r.ptr, unsafe.Pointer(&blob[0]), C.size_t(len(blob)), keyPtr, C.size_t(len(key)), &so,
		stopPtr, &ptr); st != C.LLM_OK {
		return nil, runtimeError("llm_session_import_kv", st, r.ptr)
	}
	return r.adoptSession(ptr)
}

// Score returns, for each position i < len(tokens)-1, the log-probability of tokens[i+1] given
// tokens[:i+1] and the most likely token there (llm_score: teacher forcing, outside the
// sessions, with pages of its own released before it returns).
func (r *Runtime) Score(tokens []int32) (logprobs []float32, argmax []int32, err error) {
	if len(tokens) < 2 {
		return nil, nil, &Error{Op: "Runtime.Score", Status: StatusInvalidArgument, Message: "scoring needs at least two tokens"}
	}
	if err := r.enter("Runtime.Score"); err != nil {
		return nil, nil, err
	}
	defer r.g.leave()
	logprobs = make([]float32, len(tokens)-1)
	argmax = make([]int32, len(tokens)-1)
	if st := C.llm_score(r.ptr, (*C.int32_t)(unsafe.Pointer(&tokens[0])), C.size_t(len(tokens)),
		(*C.float)(unsafe.Pointer(&logprobs[0])), (*C.int32_t)(unsafe.Pointer(&argmax[0]))); st != C.LLM_OK {
		return nil, nil, runtimeError("llm_score", st, r.ptr)
	}
	return logprobs, argmax, nil
}

// KVSizing is llm_kv_sizing: the KV cache a runtime of a model, codec, budget and page size makes.
type KVSizing struct {
	KVDType               KVDType // the codec sized (auto resolved)
	NumLayers             uint32
	ElementsPerTokenLayer uint32
	BytesPerToken         uint64 // over all layers
	CapacityTokens        uint64 // tokens the budget holds, in whole pages
	MaxSessions           uint64 // sessions of sessionTokens each that fit; 0 if not asked
}

// ModelKVSizing sizes the KV cache of the model in modelDir from its config.json alone
// (llm_model_kv_sizing_v2), for one rank of tensorParallel ranks (0 or 1: one). pageSizeTokens
// 0 is the runtime default; sessionTokens 0 skips the session count.
func ModelKVSizing(modelDir string, dtype KVDType, budgetBytes uint64, pageSizeTokens, sessionTokens,
	tensorParallel uint32) (KVSizing, error) {
	cdir, err := cstring("ModelKVSizing", "the model directory", modelDir)
	if err != nil {
		return KVSizing{}, err
	}
	defer C.free(unsafe.Pointer(cdir))
	var out C.llm_kv_sizing
	out.struct_size = C.uint32_t(unsafe.Sizeof(out))
	var msg [errorMessageCapacity]C.char
	if st := C.llmrt_go_kv_sizing(cdir, C.int32_t(dtype), C.uint64_t(budgetBytes), C.uint32_t(pageSizeTokens),
		C.uint32_t(sessionTokens), C.uint32_t(tensorParallel), &out, &msg[0], C.size_t(len(msg))); st != C.LLM_OK {
		return KVSizing{}, &Error{Op: "llm_model_kv_sizing_v2", Status: Status(st), Message: C.GoString(&msg[0])}
	}
	return KVSizing{KVDType: KVDType(out.kv_dtype), NumLayers: uint32(out.num_layers),
		ElementsPerTokenLayer: uint32(out.elements_per_token_layer), BytesPerToken: uint64(out.bytes_per_token),
		CapacityTokens: uint64(out.capacity_tokens), MaxSessions: uint64(out.max_sessions)}, nil
}
