package llmrt

// #include <stdlib.h>
// #include "llmrt/llmrt.h"
import "C"

import (
	"context"
	"runtime/cgo"
	"strconv"
	"sync"
	"unsafe"
)

// RuntimeOptions configure a Runtime. The zero value gives the library's defaults.
type RuntimeOptions struct {
	Backend          Backend
	NumThreads       int     // CPU worker threads; 0 = one per core
	KVDType          KVDType // default BF16
	KVBudgetBytes    uint64  // bytes of the paged KV cache; 0 = 256 MiB
	PageSizeTokens   uint32  // tokens per KV page; 0 = 16
	MaxSessions      uint32  // live sessions at once; 0 = 256
	MaxTokensPerStep uint32  // token budget of one step; 0 = 512
	KVIntegrity      KVIntegrity
	KVPressure       KVPressure
	// Tracker receives the KV page events (and may veto a session); setting one turns
	// verification on. The runtime holds it until Close.
	Tracker KVTracker
	// DisablePrefixSharing turns off the sharing of full KV pages between equal prompt prefixes.
	DisablePrefixSharing bool
	PrefillWeights       WeightFormat
	DecodeWeights        WeightFormat
	// TensorParallel splits the model over this many in-process ranks; 0 or 1 = one rank.
	TensorParallel uint32
	// ExpertParallel partitions the routed experts whole among the ranks.
	ExpertParallel bool
	// WorldSize is the number of processes of a multi-process group (ranks joined through MPI);
	// 0 or 1 = this process alone. Rank is this process's rank in it (its MPI rank).
	WorldSize uint32
	Rank      uint32
	// CollectiveTimeoutMs is how long a rank waits for the others in a collective; 0 = 60000.
	CollectiveTimeoutMs uint32
	// CommID is the group's id (NewCommID on one process, the same bytes on every process). Every
	// rank checks it against rank 0's when it joins; nil: no check. Read only when WorldSize > 1;
	// the runtime copies it at creation.
	CommID *CommID
	// QuantizedActivations says how matmuls with quantized weights treat their activations.
	QuantizedActivations Activations
	// WeightMemory says where the CPU backend keeps the weights.
	WeightMemory WeightMemory
}

// Runtime is a loaded model with its KV cache and sessions (llm_runtime). All methods may be
// called from any goroutine.
type Runtime struct {
	ptr *C.llm_runtime
	dir string
	g   guard

	// stepMu serializes steps: the step itself and the filing of its results, so that a goroutine
	// waiting for its session's result re-checks its queue after every step.
	stepMu  sync.Mutex
	results []C.llm_step_result // reused by every step; guarded by stepMu
	steps   uint64              // steps run, and the most results one step returned (tests)
	widest  int

	tokMu     sync.Mutex          // serializes the loading of the tokenizer
	mu        sync.Mutex          // guards the fields below
	sessions  map[uint64]*Session // live sessions by id (ids are never reused; pointers may be)
	tokenizer *Tokenizer          // loaded on first use from dir; closed with the runtime
}

// NewRuntime loads the Hugging Face checkpoint in modelDir. opts may be nil for defaults.
func NewRuntime(modelDir string, opts *RuntimeOptions) (*Runtime, error) {
	if opts == nil {
		opts = &RuntimeOptions{}
	}
	var co C.llm_runtime_options
	C.llm_runtime_options_init(&co)
	co.backend = C.int32_t(opts.Backend)
	if opts.NumThreads < 0 || opts.NumThreads > 1<<20 {
		return nil, &Error{Op: "NewRuntime", Status: StatusInvalidArgument,
			Message: "RuntimeOptions.NumThreads " + strconv.Itoa(opts.NumThreads) + " is out of range"}
	}
	co.num_threads = C.int32_t(opts.NumThreads)
	co.kv_dtype = C.int32_t(opts.KVDType)
	co.kv_budget_bytes = C.uint64_t(opts.KVBudgetBytes)
	co.page_size_tokens = C.uint32_t(opts.PageSizeTokens)
	co.max_sessions = C.uint32_t(opts.MaxSessions)
	co.max_tokens_per_step = C.uint32_t(opts.MaxTokensPerStep)
	co.kv_integrity = C.int32_t(opts.KVIntegrity)
	co.kv_pressure = C.int32_t(opts.KVPressure)
	if opts.DisablePrefixSharing {
		co.prefix_sharing = 0
	}
	co.prefill_weights = C.int32_t(opts.PrefillWeights)
	co.decode_weights = C.int32_t(opts.DecodeWeights)
	co.tensor_parallel = C.uint32_t(opts.TensorParallel)
	if opts.ExpertParallel {
		co.expert_parallel = 1
	}
	co.world_size = C.uint32_t(opts.WorldSize)
	co.rank = C.uint32_t(opts.Rank)
	co.collective_timeout_ms = C.uint32_t(opts.CollectiveTimeoutMs)
	co.quantized_activations = C.int32_t(opts.QuantizedActivations)
	co.weight_memory = C.int32_t(opts.WeightMemory)
	if opts.CommID != nil {
		// cgo's rules forbid handing C a Go struct that points to Go memory: the id goes in C
		// memory, which lives until the creation call returns (the library copies it there).
		cid := (*C.llm_comm_id)(C.malloc(C.size_t(unsafe.Sizeof(C.llm_comm_id{}))))
		defer C.free(unsafe.Pointer(cid))
		*cid = opts.CommID.raw
		co.comm_id = cid
	}

	cdir, err := cstring("NewRuntime", "the model directory", modelDir)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cdir))
	e := newCError()
	var ptr *C.llm_runtime
	var st C.llm_status
	if opts.Tracker != nil {
		// The library owns the handle from here: its destroy hook deletes it, at Close or when
		// the creation fails.
		h := newTrackerHandle(opts.Tracker)
		st = createWithTracker(cdir, &co, h, &ptr, &e)
	} else {
		st = C.llm_runtime_create_v2(cdir, &co, &ptr, &e)
	}
	if st != C.LLM_OK {
		return nil, fromCError("llm_runtime_create", st, &e)
	}
	return &Runtime{ptr: ptr, dir: modelDir, sessions: make(map[uint64]*Session)}, nil
}

// newTrackerHandle is split out so tests can count the handles alive.
func newTrackerHandle(t KVTracker) cgo.Handle {
	trackerHandles.Add(1)
	return cgo.NewHandle(t)
}

// ModelDir is the directory the runtime was loaded from.
func (r *Runtime) ModelDir() string { return r.dir }

// Close destroys every session of the runtime and the runtime itself, after the calls in
// progress on them return. Later calls on the runtime or its sessions return ErrClosed. Close is
// idempotent; it must not be called from a KV tracker callback.
func (r *Runtime) Close() error {
	if !r.g.close() {
		return nil
	}
	r.mu.Lock()
	sessions := r.sessions
	r.sessions = nil
	tok := r.tokenizer
	r.tokenizer = nil
	r.mu.Unlock()
	for _, s := range sessions {
		// No call is in flight on any session (each enters the runtime first); the runtime's
		// destroy below releases their C handles.
		s.g.close()
		s.dropQueue()
	}
	C.llm_runtime_destroy(r.ptr)
	r.ptr = nil
	if tok != nil {
		tok.Close()
	}
	return nil
}

func (r *Runtime) enter(op string) error {
	if !r.g.enter() {
		return errClosed(op, "the runtime")
	}
	return nil
}

// RuntimeInfo describes a loaded runtime (llm_runtime_info).
type RuntimeInfo struct {
	Architecture          string // "DeepseekV3ForCausalLM"
	ModelType             string // config.json model_type
	Backend               Backend
	KVDType               KVDType
	VocabSize             uint32
	NumLayers             uint32
	WeightMemory          WeightMemory // WeightMemoryMapped, WeightMemoryHugePages (CPU) or WeightMemoryDevice
	NumParameters         uint64
	WeightBytes           uint64
	KVBytesPerToken       uint64
	KVCapacityTokens      uint64
	PageSizeTokens        uint32
	PagesTotal            uint32
	PagesFree             uint32
	NumSessions           uint32
	MaxPositionEmbeddings uint32
	PagesShared           uint32
	PrefixLookupTokens    uint64
	PrefixHitTokens       uint64
	IntegrityViolations   uint64
	Preemptions           uint64
	IntegrityCheckNs      uint64
	WeightBytesF32        uint64
	WeightBytesBF16       uint64
	WeightBytesFP8        uint64
	WeightBytesINT4       uint64
	PrefillWeights        WeightFormat
	DecodeWeights         WeightFormat
	KVScaleSource         KVScaleSource
	WorkspaceBytes        uint64
}

// Info returns the runtime's model, cache and counters.
func (r *Runtime) Info() (RuntimeInfo, error) {
	if err := r.enter("Runtime.Info"); err != nil {
		return RuntimeInfo{}, err
	}
	defer r.g.leave()
	var ci C.llm_runtime_info
	ci.struct_size = C.uint32_t(unsafe.Sizeof(ci))
	if st := C.llm_runtime_get_info(r.ptr, &ci); st != C.LLM_OK {
		return RuntimeInfo{}, runtimeError("llm_runtime_get_info", st, r.ptr)
	}
	return RuntimeInfo{
		Architecture:          C.GoString(&ci.architecture[0]),
		ModelType:             C.GoString(&ci.model_type[0]),
		Backend:               Backend(ci.backend),
		KVDType:               KVDType(ci.kv_dtype),
		VocabSize:             uint32(ci.vocab_size),
		NumLayers:             uint32(ci.num_layers),
		WeightMemory:          WeightMemory(ci.weight_memory),
		NumParameters:         uint64(ci.num_parameters),
		WeightBytes:           uint64(ci.weight_bytes),
		KVBytesPerToken:       uint64(ci.kv_bytes_per_token),
		KVCapacityTokens:      uint64(ci.kv_capacity_tokens),
		PageSizeTokens:        uint32(ci.page_size_tokens),
		PagesTotal:            uint32(ci.pages_total),
		PagesFree:             uint32(ci.pages_free),
		NumSessions:           uint32(ci.num_sessions),
		MaxPositionEmbeddings: uint32(ci.max_position_embeddings),
		PagesShared:           uint32(ci.pages_shared),
		PrefixLookupTokens:    uint64(ci.prefix_lookup_tokens),
		PrefixHitTokens:       uint64(ci.prefix_hit_tokens),
		IntegrityViolations:   uint64(ci.integrity_violations),
		Preemptions:           uint64(ci.preemptions),
		IntegrityCheckNs:      uint64(ci.integrity_check_ns),
		WeightBytesF32:        uint64(ci.weight_bytes_f32),
		WeightBytesBF16:       uint64(ci.weight_bytes_bf16),
		WeightBytesFP8:        uint64(ci.weight_bytes_fp8),
		WeightBytesINT4:       uint64(ci.weight_bytes_int4),
		PrefillWeights:        WeightFormat(ci.prefill_weights),
		DecodeWeights:         WeightFormat(ci.decode_weights),
		KVScaleSource:         KVScaleSource(ci.kv_scale_source),
		WorkspaceBytes:        uint64(ci.workspace_bytes),
	}, nil
}

// StepResult is what one step did for one session (llm_step_result).
type StepResult struct {
	Session        *Session // nil when the session is not (or no longer) known to this binding
	SessionID      uint64
	Token          int32 // the sampled token, or TokenNone (prefill still running, an error)
	Finish         FinishReason
	Status         Status // StatusOK, or why the session did not advance
	NumPrefilled   uint32 // prompt tokens processed for the session in this step
	FailedPage     int32  // StatusKVIntegrity: the first page that failed, else -1
	NumFailedPages uint32
}

// Err is nil when the session advanced, else an *Error with the result's status.
func (r StepResult) Err() error {
	if r.Status == StatusOK {
		return nil
	}
	msg := "session " + strconv.FormatUint(r.SessionID, 10) + " did not advance in this step"
	if r.Status == StatusKVIntegrity {
		msg = "session " + strconv.FormatUint(r.SessionID, 10) + ": " +
			strconv.FormatUint(uint64(r.NumFailedPages), 10) + " KV page(s) failed verification, the first page " +
			strconv.Itoa(int(r.FailedPage))
	}
	return &Error{Op: "llm_decode_step", Status: r.Status, Message: msg}
}

// Step runs one scheduler iteration (llm_decode_step_v2) for a host that drives the loop itself,
// and returns one result per session that ran or changed state. Results of sessions whose tokens
// are also read with Session.Next or a TokenStream are filed for them as well; otherwise a host
// uses either Step or the per-session readers on one runtime, not both.
func (r *Runtime) Step() ([]StepResult, error) {
	if err := r.enter("Runtime.Step"); err != nil {
		return nil, err
	}
	defer r.g.leave()
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	return r.stepLocked(false)
}

// stepLocked runs one step and files the results in the sessions' queues: every session's when
// queueAll (a step run for a reader), else only those of sessions that have a reader. REQUIRES:
// stepMu held and the runtime entered.
func (r *Runtime) stepLocked(queueAll bool) ([]StepResult, error) {
	if len(r.results) == 0 {
		r.results = make([]C.llm_step_result, 16)
	}
	var n C.size_t
	for {
		st := C.llm_decode_step_v2(r.ptr, unsafe.Pointer(&r.results[0]),
			C.size_t(unsafe.Sizeof(r.results[0])), C.size_t(len(r.results)), &n)
		if st == C.LLM_ERR_BUFFER_TOO_SMALL && int(n) > len(r.results) {
			// More live sessions than results: nothing ran; retry with room for all of them
			// and for a few created meanwhile.
			r.results = make([]C.llm_step_result, int(n)+int(n)/2+8)
			continue
		}
		if st != C.LLM_OK {
			return nil, runtimeError("llm_decode_step_v2", st, r.ptr)
		}
		break
	}
	out := make([]StepResult, int(n))
	r.mu.Lock()
	for i := range out {
		c := &r.results[i]
		res := StepResult{
			SessionID:      uint64(c.session_id),
			Token:          int32(c.token),
			Finish:         FinishReason(c.finish_reason),
			Status:         Status(c.status),
			NumPrefilled:   uint32(c.num_prefilled),
			FailedPage:     int32(c.failed_page),
			NumFailedPages: uint32(c.num_failed_pages),
		}
		if s := r.sessions[res.SessionID]; s != nil {
			res.Session = s
			if queueAll || s.reader {
				s.queue = append(s.queue, res)
			}
		}
		out[i] = res
	}
	r.steps++
	if int(n) > r.widest {
		r.widest = int(n)
	}
	r.mu.Unlock()
	return out, nil
}

// Tokenizer returns the tokenizer of the runtime's model directory, loaded on first use and
// closed with the runtime (do not Close it yourself).
func (r *Runtime) Tokenizer() (*Tokenizer, error) {
	if err := r.enter("Runtime.Tokenizer"); err != nil {
		return nil, err
	}
	defer r.g.leave()
	// tokMu, not mu: loading takes a while, and steps file their results under mu.
	r.tokMu.Lock()
	defer r.tokMu.Unlock()
	r.mu.Lock()
	t := r.tokenizer
	r.mu.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := NewTokenizer(r.dir)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.tokenizer = t
	r.mu.Unlock()
	return t, nil
}

// Generation is the outcome of Generate or Chat.
type Generation struct {
	Text   string  // the generated text (special tokens left out)
	Tokens []int32 // the generated ids, a stop token included
	Finish FinishReason
}

// Generate continues prompt (encoded without special tokens and without BOS) in a new session
// and returns the whole continuation. Generation stops at the tokenizer's eos, at opts'
// StopTokens, after opts.MaxNewTokens, or when ctx is done (then with the text so far, finish
// reason FinishCancelled and ctx's error).
func (r *Runtime) Generate(ctx context.Context, prompt string, opts SamplingOptions) (Generation, error) {
	ts, err := r.GenerateStream(ctx, prompt, opts)
	if err != nil {
		return Generation{}, err
	}
	return collect(ts)
}

// Chat renders messages in the model's chat format (with the assistant turn opener), generates
// the assistant's reply in a new session and returns it. Generation also stops at the family's
// end-of-turn tokens (<|im_end|> for Kimi; <|user|>, <|observation|>, <|endoftext|> for GLM).
func (r *Runtime) Chat(ctx context.Context, messages []ChatMessage, opts SamplingOptions) (Generation, error) {
	ts, err := r.ChatStream(ctx, messages, opts)
	if err != nil {
		return Generation{}, err
	}
	return collect(ts)
}

func collect(ts *TokenStream) (Generation, error) {
	defer ts.Close()
	var g Generation
	var text []byte
	for ts.Next() {
		t := ts.Token()
		if t.ID != TokenNone {
			g.Tokens = append(g.Tokens, t.ID)
		}
		text = append(text, t.Text...)
	}
	g.Text = string(text)
	g.Finish = ts.FinishReason()
	return g, ts.Err()
}

// GenerateStream is Generate token by token: the stream owns its session and closes it at the end.
func (r *Runtime) GenerateStream(ctx context.Context, prompt string, opts SamplingOptions) (*TokenStream, error) {
	tok, err := r.Tokenizer()
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(prompt, false)
	if err != nil {
		return nil, err
	}
	return r.streamIDs(ctx, tok, ids, opts, nil)
}

// ChatStream is Chat token by token: the stream owns its session and closes it at the end.
func (r *Runtime) ChatStream(ctx context.Context, messages []ChatMessage, opts SamplingOptions) (*TokenStream, error) {
	tok, err := r.Tokenizer()
	if err != nil {
		return nil, err
	}
	text, err := tok.ApplyChatTemplate(messages, true, false)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		return nil, err
	}
	return r.streamIDs(ctx, tok, ids, opts, chatStopTokens)
}

// The family's end-of-turn special tokens; those the tokenizer has become stop tokens of a chat.
var chatStopTokens = []string{"<|im_end|>", "<|user|>", "<|observation|>", "<|endoftext|>"}

func (r *Runtime) streamIDs(ctx context.Context, tok *Tokenizer, ids []int32, opts SamplingOptions,
	specials []string) (*TokenStream, error) {
	if len(ids) == 0 {
		return nil, &Error{Op: "Runtime.Generate", Status: StatusInvalidArgument, Message: "the prompt encodes to no tokens"}
	}
	info, err := tok.Info()
	if err != nil {
		return nil, err
	}
	stops := append([]int32(nil), opts.StopTokens...)
	if info.EOS >= 0 {
		stops = append(stops, info.EOS)
	}
	for _, name := range specials {
		if id, err := tok.SpecialID(name); err == nil {
			stops = append(stops, id)
		}
	}
	opts.StopTokens = stops
	s, err := r.NewSession(&opts)
	if err != nil {
		return nil, err
	}
	if err := s.Append(ids); err != nil {
		s.Close()
		return nil, err
	}
	ts, err := s.stream(ctx, tok, true)
	if err != nil {
		s.Close()
		return nil, err
	}
	return ts, nil
}
