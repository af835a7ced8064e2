"""Runtime, Session and token streams.

llm_decode_step advances every session of a runtime at once and returns a result for each
session it touched. So that many sessions can be streamed together from Python threads, the
Runtime keeps a queue of step results per session: a stream that needs its session's next result
and finds the queue empty runs one step (one thread at a time; the others wait and usually find
their result queued when it ends) and distributes all of its results. The steps are batched by
the library; no result is lost whichever thread ran the step.
"""

import atexit
import collections
import contextlib
import ctypes
import dataclasses
import os
import threading
import weakref

from . import _abi
from . import callbacks
from . import errors
from .comm_id import CommId
from ._handle import Handle
from .tokenizer import Tokenizer, _int32_array

FINISH_REASONS = {
    _abi.LLM_FINISH_NONE: None,
    _abi.LLM_FINISH_STOP: "stop",
    _abi.LLM_FINISH_LENGTH: "length",
    _abi.LLM_FINISH_CANCELLED: "cancelled",
    _abi.LLM_FINISH_ERROR: "error",
}

SESSION_STATES = {
    _abi.LLM_SESSION_IDLE: "idle",
    _abi.LLM_SESSION_PREFILL: "prefill",
    _abi.LLM_SESSION_DECODING: "decoding",
    _abi.LLM_SESSION_FINISHED: "finished",
    _abi.LLM_SESSION_CANCELLED: "cancelled",
    _abi.LLM_SESSION_FAILED: "failed",
}

_BACKENDS = {"auto": _abi.LLM_BACKEND_AUTO, "cpu": _abi.LLM_BACKEND_CPU, "cuda": _abi.LLM_BACKEND_CUDA}
_KV_DTYPES = {"auto": _abi.LLM_KV_DTYPE_AUTO, "bf16": _abi.LLM_KV_DTYPE_BF16, "f32": _abi.LLM_KV_DTYPE_F32,
              "fp8": _abi.LLM_KV_DTYPE_FP8_E4M3, "fp8_e4m3": _abi.LLM_KV_DTYPE_FP8_E4M3,
              "fp8_tiled": _abi.LLM_KV_DTYPE_FP8_E4M3_TILED, "fp8_e4m3_tiled": _abi.LLM_KV_DTYPE_FP8_E4M3_TILED}
_KV_PRESSURE = {"fail": _abi.LLM_KV_PRESSURE_FAIL, "queue": _abi.LLM_KV_PRESSURE_QUEUE,
                "preempt": _abi.LLM_KV_PRESSURE_PREEMPT}
_ACTIVATIONS = {"exact": _abi.LLM_ACTIVATIONS_EXACT, "int8": _abi.LLM_ACTIVATIONS_INT8,
                "bf16": _abi.LLM_ACTIVATIONS_BF16, "fp8": _abi.LLM_ACTIVATIONS_FP8}
_WEIGHT_MEMORY = {"auto": _abi.LLM_WEIGHT_MEMORY_AUTO, "mapped": _abi.LLM_WEIGHT_MEMORY_MAPPED,
                  "huge_pages": _abi.LLM_WEIGHT_MEMORY_HUGE_PAGES}
_WEIGHTS = {"as_stored": _abi.LLM_WEIGHTS_AS_STORED, "int4_g32": _abi.LLM_WEIGHTS_INT4_G32,
            "int4_g128": _abi.LLM_WEIGHTS_INT4_G128}

# Chat turn ends besides the tokenizer's eos: Kimi's and GLM's (the ones the tokenizer has).
CHAT_STOP_TEXTS = ("<|im_end|>", "<|user|>", "<|observation|>", "<|endoftext|>")


def _choice(value, table, what):
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                       f"{what} {value!r} is not one of {sorted(table)}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # a raw LLM_* constant; the library validates it
    raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"{what} must be a str or an int, not {value!r}")


def _uint(value, what, bits=32):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2 ** bits:
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                   f"{what} must be an int in [0, 2^{bits}), not {value!r}")
    return value


def _float(value, what):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"{what} must be a number, not {value!r}") from None


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One session's outcome of one step."""
    session_id: int
    token: int                 # the sampled token, or -1 (prefill still running, error, cancel)
    finish_reason: object      # None while running, else "stop", "length", "cancelled", "error"
    status: errors.Status      # Status.OK, or why the session did not advance
    num_prefilled: int
    failed_page: int
    num_failed_pages: int


@dataclasses.dataclass(frozen=True)
class Token:
    """A streamed token and its text piece (whole UTF-8 characters; "" for special tokens)."""
    id: int
    text: object  # str, or None when the stream has no tokenizer


@dataclasses.dataclass(frozen=True)
class SessionInfo:
    state: str
    id: int
    num_tokens: int
    num_pending: int
    num_generated: int
    num_pages: int


def _info_dataclass(struct_cls):
    fields = [(name, str if isinstance(typ(), ctypes.Array) else int)
              for name, typ in struct_cls._fields_ if name != "struct_size" and not name.startswith("reserved")]
    return dataclasses.make_dataclass("RuntimeInfo", fields, frozen=True)


RuntimeInfo = _info_dataclass(_abi.llm_runtime_info)
RuntimeInfo.__doc__ = "llm_runtime_info: the model, the KV pool and the runtime's counters."


# Runtimes still open at exit are closed while the interpreter is whole: their tracker's
# destroy hook calls into Python.
_open_runtimes = weakref.WeakSet()


@atexit.register
def _close_open_runtimes():
    for rt in list(_open_runtimes):
        try:
            rt.close()
        except Exception:
            pass


class Runtime:
    """A loaded checkpoint and its KV pool (llm_runtime). Many sessions share it; their steps are
    batched. Close it (or use `with`) to release it: that closes its sessions too.

    Options are keyword arguments named as llm_runtime_options' fields; enums take names
    (kv_dtype="f32", backend="cpu", kv_pressure="queue", decode_weights="int4_g32") or the
    LLM_* numbers. tracker is an llmrt.KvTracker. tokenizer: a Tokenizer, a directory, False
    for none, or None (default) to load the model directory's when first needed.

    Multi-process ranks: world_size processes (joined through MPI), this one being `rank`;
    comm_id is the group's id (an llmrt.CommId, or its 136 serialized bytes), which every rank
    checks against rank 0's when it joins. It is read only when world_size > 1, and copied at
    creation.

    quantized_activations: "exact" (float32 activations, the reference), "int8" (activations
    rounded to int8 per 32 values, integer dot products with INT4 weights: faster on CPUs,
    slightly different numerics), "bf16" (activations of BF16-weight matmuls rounded to
    bfloat16, bf16 dot products; the MoE router stays float32) or "fp8" (activations of matmuls
    with FP8 block-scaled weights rounded to e4m3 codes, one float32 scale per row and 128
    columns, code products summed per block in float32 and scaled by both block scales: the FP8
    block-scaled GEMM; BF16 weights as under "bf16", INT4 and F32 weights unaffected).

    weight_memory: where the CPU backend keeps the weights: "mapped" (in place in the
    checkpoint's file mapping: no copy, pages shared between processes), "huge_pages" (copied at
    load into private memory advised for 2 MiB pages: faster decode) or "auto" (huge pages where
    the kernel offers transparent huge pages, else mapped). info().weight_memory says which is in
    effect (LLM_WEIGHT_MEMORY_*; DEVICE on a device backend)."""

    def __init__(self, model_dir, *, backend="auto", num_threads=0, kv_dtype="auto", kv_budget_bytes=0,
                 page_size_tokens=0, max_sessions=0, max_tokens_per_step=0, kv_integrity=False,
                 kv_pressure="fail", tracker=None, prefix_sharing=True, prefill_weights="as_stored",
                 decode_weights="as_stored", tensor_parallel=1, expert_parallel=False, world_size=1, rank=0,
                 collective_timeout_ms=0, comm_id=None, quantized_activations="exact", weight_memory="auto",
                 tokenizer=None):
        lib = _abi.lib()
        self.model_dir = os.fspath(model_dir)
        o = _abi.llm_runtime_options()
        lib.llm_runtime_options_init(ctypes.byref(o))
        o.backend = _choice(backend, _BACKENDS, "backend")
        o.num_threads = _uint(num_threads, "num_threads", 31)
        o.kv_dtype = _choice(kv_dtype, _KV_DTYPES, "kv_dtype")
        o.kv_budget_bytes = _uint(kv_budget_bytes, "kv_budget_bytes", 64)
        o.page_size_tokens = _uint(page_size_tokens, "page_size_tokens")
        o.max_sessions = _uint(max_sessions, "max_sessions")
        o.max_tokens_per_step = _uint(max_tokens_per_step, "max_tokens_per_step")
        if isinstance(kv_integrity, str):
            kv_integrity = _choice(kv_integrity, {"off": 0, "tags": 1}, "kv_integrity")
        o.kv_integrity = int(kv_integrity)
        o.kv_pressure = _choice(kv_pressure, _KV_PRESSURE, "kv_pressure")
        o.prefix_sharing = int(bool(prefix_sharing))
        o.prefill_weights = _choice(prefill_weights, _WEIGHTS, "prefill_weights")
        o.decode_weights = _choice(decode_weights, _WEIGHTS, "decode_weights")
        o.tensor_parallel = _uint(tensor_parallel, "tensor_parallel")
        o.expert_parallel = int(bool(expert_parallel))
        o.world_size = _uint(world_size, "world_size")
        o.rank = _uint(rank, "rank")
        o.collective_timeout_ms = _uint(collective_timeout_ms, "collective_timeout_ms")
        o.quantized_activations = _choice(quantized_activations, _ACTIVATIONS, "quantized_activations")
        o.weight_memory = _choice(weight_memory, _WEIGHT_MEMORY, "weight_memory")
        comm_id_struct = None  # referenced until llm_runtime_create_v2 returns; the library copies it
        if comm_id is not None:
            if not isinstance(comm_id, CommId):
                comm_id = CommId.from_bytes(comm_id)
            comm_id_struct = comm_id._struct()
            o.comm_id = ctypes.pointer(comm_id_struct)
        if tokenizer is not None and tokenizer is not False and not isinstance(tokenizer, (Tokenizer, str, os.PathLike)):
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT, "tokenizer must be a Tokenizer, a path, False or None")
        tracker_struct = None
        if tracker is not None:
            tracker_struct = callbacks.make_tracker_struct(tracker)  # released by its destroy hook
            o.tracker = ctypes.pointer(tracker_struct)
        out = ctypes.c_void_p()
        err = errors.new_error_struct()
        st = lib.llm_runtime_create_v2(errors.c_path(self.model_dir), ctypes.byref(o), ctypes.byref(out),
                                       ctypes.byref(err))
        if st != _abi.LLM_OK:
            raise errors.error_for(st, errors.message_of(err))
        self._h = Handle(out.value, "runtime", lib.llm_runtime_destroy)
        self._sessions = weakref.WeakValueDictionary()  # session id -> Session
        self._session_handles = weakref.WeakSet()
        self._queues = {}                                # session id -> deque of StepResult
        self._streaming = set()                          # ids of sessions a Stream consumes
        self._qlock = threading.Lock()
        # Ids of sessions collected by the garbage collector, whose queues go at the next
        # _queues_locked (Session.__del__ must not take _qlock: a collection can run on a thread
        # that holds it).
        self._collected = []
        self._step_lock = threading.Lock()
        self._capacity = 16
        self.steps_run = 0            # llm_decode_step calls made through this object
        self.max_results_per_step = 0  # the largest batch of results one step returned
        self._tokenizer_arg = tokenizer
        self._tokenizer = None
        self._tokenizer_lock = threading.Lock()
        self._owns_tokenizer = False
        _open_runtimes.add(self)

    # -- plumbing
    def _call(self, fn, *args, ok=(_abi.LLM_OK,)):
        ptr = self._h.acquire()
        try:
            st = fn(ptr, *args)
            if st not in ok:
                raise errors.from_handle(st, _abi.lib().llm_runtime_last_error, ptr)
            return st
        finally:
            self._h.release()

    # -- lifetime
    def close(self):
        """Destroys the runtime and every session still open in it (idempotent). Waits for calls
        in flight on it and its sessions (a step in progress) to return."""
        def close_children():
            for h in list(self._session_handles):
                h.close(destroy=False)  # llm_runtime_destroy destroys them
            with self._queues_locked():
                self._queues.clear()
                self._streaming.clear()
        if self._h.close(before_destroy=close_children):
            with self._tokenizer_lock:
                if self._owns_tokenizer and self._tokenizer is not None:
                    self._tokenizer.close()

    @property
    def closed(self):
        return self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- information
    def info(self):
        """llm_runtime_get_info as a RuntimeInfo."""
        s = _abi.llm_runtime_info()
        s.struct_size = ctypes.sizeof(s)
        self._call(_abi.lib().llm_runtime_get_info, ctypes.byref(s))
        values = {}
        for f in dataclasses.fields(RuntimeInfo):
            v = getattr(s, f.name)
            values[f.name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        return RuntimeInfo(**values)

    @property
    def tokenizer(self):
        """The Tokenizer of this runtime (by default the model directory's, loaded on first use).
        Raises NotFoundError when the directory has none."""
        with self._tokenizer_lock:
            if self._tokenizer is None:
                arg = self._tokenizer_arg
                if arg is False:
                    raise errors.binding_error(errors.Status.NOT_FOUND, "this Runtime was created with tokenizer=False")
                if isinstance(arg, Tokenizer):
                    self._tokenizer = arg
                else:
                    self._tokenizer = Tokenizer(self.model_dir if arg is None else arg)
                    self._owns_tokenizer = True
            return self._tokenizer

    def _tokenizer_or_none(self):
        try:
            return self.tokenizer
        except errors.NotFoundError:
            return None

    # -- sessions
    def session(self, *, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=0, seed=0, stop_tokens=(),
                keep_logits=True):
        """A new session (llm_session_create). max_tokens: new tokens per generation (0: until a
        stop token or the context ends); temperature 0 is greedy. keep_logits=False
        (LLM_SAMPLING_NO_LOGITS): the session does not keep its logits, so a step brings back
        only its sampled ids (on CUDA, vocab_size floats less per step over the bus); its tokens
        are the same, and its logits() raises InvalidStateError."""
        return Session(self, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                       max_tokens=max_tokens, seed=seed, stop_tokens=stop_tokens, keep_logits=keep_logits)

    def import_kv(self, blob, *, key=None, **sampling):
        """A session made from `Session.export_kv` of a runtime of the same model
        (llm_session_import_kv, or with `key` llm_session_import_kv_authenticated): it continues
        exactly where the exporter's stopped; `sampling` as for session(), the generator state
        from the blob. The header says what an import validates and may affect."""
        data = bytes(blob)
        keyb = None if key is None else bytes(key)
        lib = _abi.lib()

        def create(ptr, options, out):
            if keyb is None:
                return lib.llm_session_import_kv(ptr, data, len(data), options, out)
            return lib.llm_session_import_kv_authenticated(ptr, data, len(data), keyb, len(keyb), options, out)
        # An imported session is ready to decode: no step runs before its queue is registered (a
        # step on another thread would hand its first token to no one).
        with self._step_lock:
            return Session(self, _create=create, **sampling)

    # -- stepping
    def _decode_step(self):
        """One llm_decode_step_v2; returns the list of StepResult."""
        lib = _abi.lib()
        n = ctypes.c_size_t(0)
        size = ctypes.sizeof(_abi.llm_step_result)
        while True:
            cap = self._capacity
            buf = (_abi.llm_step_result * cap)()
            st = self._call(lib.llm_decode_step_v2, ctypes.cast(buf, ctypes.c_void_p), size, cap, ctypes.byref(n),
                            ok=(_abi.LLM_OK, _abi.LLM_ERR_BUFFER_TOO_SMALL))
            if st == _abi.LLM_OK:
                break
            # n holds the live sessions; leave room for some created meanwhile.
            self._capacity = max(cap * 2, n.value + 16)
        out = []
        for r in buf[:n.value]:
            try:
                status = errors.Status(r.status)
            except ValueError:
                status = r.status
            out.append(StepResult(r.session_id, r.token, FINISH_REASONS.get(r.finish_reason, "error"), status,
                                  r.num_prefilled, r.failed_page, r.num_failed_pages))
        self.steps_run += 1
        self.max_results_per_step = max(self.max_results_per_step, len(out))
        return out

    @contextlib.contextmanager
    def _queues_locked(self):
        """_qlock held, with the queues of collected sessions dropped."""
        with self._qlock:
            while self._collected:
                sid = self._collected.pop()
                self._queues.pop(sid, None)
                self._streaming.discard(sid)
            yield

    def _distribute(self, results):
        with self._queues_locked():
            for r in results:
                q = self._queues.get(r.session_id)
                if q is not None:  # None: the session was closed meanwhile
                    q.append(r)

    def step(self):
        """Runs one step (llm_decode_step) and returns the results for the sessions that no
        Stream is consuming: this step's and those that steps run by streams left for them.
        Results for sessions being streamed go to their streams. For hosts that drive the loop
        themselves; it may be called while other threads stream."""
        with self._step_lock:
            self._distribute(self._decode_step())
        out = []
        with self._queues_locked():
            for sid, q in self._queues.items():
                if sid not in self._streaming:
                    out.extend(q)
                    q.clear()
        return out

    def _next_result(self, session):
        """The next step result of `session` (blocking), or None when its generation ended
        without one more (it is idle, finished, failed or cancelled and nothing is queued)."""
        sid = session.id
        idle_steps = 0
        while True:
            with self._queues_locked():
                q = self._queues.get(sid)
                if q is None:
                    raise errors.binding_error(errors.Status.INVALID_STATE, "the session is closed")
                if q:
                    return q.popleft()
            with self._step_lock:
                # Another thread's step may have delivered ours while we waited for the lock.
                with self._queues_locked():
                    q = self._queues.get(sid)
                    if q:
                        return q.popleft()
                # Under the step lock no step is in flight and every result is distributed, so an
                # inactive session with an empty queue has nothing more coming.
                if session._state() not in (_abi.LLM_SESSION_PREFILL, _abi.LLM_SESSION_DECODING,
                                            _abi.LLM_SESSION_CANCELLED):
                    return None
                results = self._decode_step()
                self._distribute(results)
                if not any(r.session_id == sid for r in results) and \
                        session._state() == _abi.LLM_SESSION_CANCELLED:
                    return None  # its cancellation was reported earlier (to step())
                # A session with work always gets a result or lets another one run; a run of
                # empty steps would mean a library bug, which must not become a busy loop.
                idle_steps = 0 if results else idle_steps + 1
                if idle_steps >= 100:
                    raise errors.binding_error(
                        errors.Status.INTERNAL, f"session {sid} is {SESSION_STATES.get(session._state())} but "
                        f"{idle_steps} steps in a row ran nothing")

    # -- conveniences
    def generate(self, prompt, max_tokens=256, *, stop_tokens=(), **sampling):
        """Continues `prompt` (text, encoded without special tokens and without BOS, or a list
        of token ids) and returns the generated text. Stops at the tokenizer's eos, at
        stop_tokens, or after max_tokens."""
        with self.stream(prompt, max_tokens, stop_tokens=stop_tokens, **sampling) as s:
            return "".join(t.text for t in s if t.text)

    def stream(self, prompt, max_tokens=256, *, stop_tokens=(), **sampling):
        """As generate(), as a Stream of Token(id, text); the stream owns its session."""
        tok = self.tokenizer
        ids = tok.encode(prompt, parse_special=False) if isinstance(prompt, (str, bytes)) else list(prompt)
        stops = list(stop_tokens) + ([tok.eos_id] if tok.eos_id >= 0 else [])
        session = self.session(max_tokens=max_tokens, stop_tokens=stops, **sampling)
        return session.stream(ids, close_session=True)

    def chat_stop_tokens(self):
        """The tokenizer's eos and the family's end-of-turn special tokens it has."""
        tok = self.tokenizer
        stops = [tok.eos_id] if tok.eos_id >= 0 else []
        for text in CHAT_STOP_TEXTS:
            i = tok.special_id(text)
            if i is not None and i not in stops:
                stops.append(i)
        return stops

    def chat_stream(self, messages, max_tokens=256, *, stop_tokens=(), enable_thinking=False, **sampling):
        """The assistant's reply to `messages` ([{"role", "content"}, ...]) as a Stream: the
        messages are rendered with the family's chat template (generation prompt added) and
        encoded with special tokens; it stops at eos and the end-of-turn tokens."""
        tok = self.tokenizer
        text = tok.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=enable_thinking)
        ids = tok.encode(text, parse_special=True)
        session = self.session(max_tokens=max_tokens, stop_tokens=list(stop_tokens) + self.chat_stop_tokens(),
                               **sampling)
        return session.stream(ids, close_session=True)

    def chat(self, messages, max_tokens=256, **kwargs):
        """The assistant's reply to `messages` as text (see chat_stream)."""
        with self.chat_stream(messages, max_tokens, **kwargs) as s:
            return "".join(t.text for t in s if t.text)

    def score(self, tokens):
        """Teacher-forced scoring (llm_score): (logprobs, argmax) lists of len(tokens) - 1."""
        _, buf, n = _int32_array(tokens)
        m = max(0, n - 1)
        logprobs = (ctypes.c_float * max(1, m))()
        argmax = (ctypes.c_int32 * max(1, m))()
        self._call(_abi.lib().llm_score, buf, n, logprobs, argmax)
        return list(logprobs[:m]), list(argmax[:m])

    def _test_control(self, op, args):
        """llm_test_control: the header's explicitly unstable fault-injection hook, for tests of
        integrity checking. Never expose it to untrusted callers."""
        arr = (ctypes.c_int64 * max(1, len(args)))(*args)
        self._call(_abi.lib().llm_test_control, int(op), arr, len(args))


@dataclasses.dataclass(frozen=True)
class KvSizing:
    """llm_kv_sizing: the KV cache a runtime of that model, codec, budget and page size makes."""
    kv_dtype: str
    num_layers: int
    elements_per_token_layer: int
    bytes_per_token: int
    capacity_tokens: int
    max_sessions: int


def kv_sizing(model_dir, *, kv_dtype="auto", kv_budget_bytes=0, page_size_tokens=0, session_tokens=0,
              tensor_parallel=1):
    """Sizes the KV cache of the model in model_dir from its config.json alone
    (llm_model_kv_sizing_v2): bytes per token, the tokens kv_budget_bytes holds (per rank of
    tensor_parallel ranks) in whole pages, and with session_tokens how many such sessions fit."""
    out = _abi.llm_kv_sizing()
    out.struct_size = ctypes.sizeof(out)
    lib = _abi.lib()
    st = lib.llm_model_kv_sizing_v2(errors.c_path(model_dir), _choice(kv_dtype, _KV_DTYPES, "kv_dtype"),
                                    _uint(kv_budget_bytes, "kv_budget_bytes", 64),
                                    _uint(page_size_tokens, "page_size_tokens"), _uint(session_tokens, "session_tokens"),
                                    _uint(tensor_parallel, "tensor_parallel"), ctypes.byref(out))
    if st != _abi.LLM_OK:
        # A call without a handle: its record is the calling thread's (llm_last_error).
        raise errors.error_for(st, lib.llm_last_error().decode("utf-8", "replace"))
    names = {v: k for k, v in _KV_DTYPES.items()}
    return KvSizing(names.get(out.kv_dtype, str(out.kv_dtype)), out.num_layers, out.elements_per_token_layer,
                    out.bytes_per_token, out.capacity_tokens, out.max_sessions)


class Session:
    """One conversation in a Runtime (llm_session). It keeps its runtime alive; closing the
    runtime closes it. Sampling options are fixed at creation (see Runtime.session)."""

    def __init__(self, runtime, *, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=0, seed=0,
                 stop_tokens=(), keep_logits=True, _create=None):
        # _create(runtime_ptr, options_ref, out_ref) -> status: how the library makes the session
        # (llm_session_create; Runtime.import_kv passes an import).
        lib = _abi.lib()
        if not isinstance(runtime, Runtime):
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT, "runtime must be an llmrt.Runtime")
        o = _abi.llm_sampling_options()
        lib.llm_sampling_options_init(ctypes.byref(o))
        o.temperature = _float(temperature, "temperature")
        o.top_k = _uint(top_k, "top_k", 31)
        o.top_p = _float(top_p, "top_p")
        o.min_p = _float(min_p, "min_p")
        o.max_new_tokens = _uint(max_tokens, "max_tokens")
        o.seed = _uint(seed, "seed", 64)
        if not isinstance(keep_logits, bool):
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                       f"keep_logits must be True or False, not {keep_logits!r}")
        o.flags = 0 if keep_logits else _abi.LLM_SAMPLING_NO_LOGITS
        stops, stop_buf, n_stops = _int32_array(stop_tokens, "stop_tokens")
        o.stop_tokens = stop_buf  # copied by the library at creation
        o.num_stop_tokens = n_stops
        self.runtime = runtime
        out = ctypes.c_void_p()
        parent = runtime._h
        ptr = parent.acquire()
        try:
            if _create is None:
                st = lib.llm_session_create(ptr, ctypes.byref(o), ctypes.byref(out))
            else:
                st = _create(ptr, ctypes.byref(o), ctypes.byref(out))
            if st != _abi.LLM_OK:
                raise errors.from_handle(st, lib.llm_runtime_last_error, ptr)
            self._h = Handle(out.value, "session", lib.llm_session_destroy, parent=parent)
            info = self._raw_info()
            self.id = info.id
            # Registered while the runtime cannot be closed, so its close() sees this session.
            runtime._session_handles.add(self._h)
            with runtime._queues_locked():
                runtime._queues[self.id] = collections.deque()
            runtime._sessions[self.id] = self
        finally:
            parent.release()

    # -- plumbing
    def _call(self, fn, *args, ok=(_abi.LLM_OK,)):
        ptr = self._h.acquire()
        try:
            st = fn(ptr, *args)
            if st not in ok:
                raise errors.from_handle(st, _abi.lib().llm_session_last_error, ptr)
            return st
        finally:
            self._h.release()

    def _raw_info(self):
        s = _abi.llm_session_info()
        s.struct_size = ctypes.sizeof(s)
        self._call(_abi.lib().llm_session_get_info, ctypes.byref(s))
        return s

    def _state(self):
        return self._raw_info().state

    # -- lifetime
    def close(self):
        """Destroys the session and returns its KV pages (idempotent)."""
        self._forget()
        self._h.close()

    def _forget(self):
        rt = self.runtime
        with rt._queues_locked():
            rt._queues.pop(self.id, None)
            rt._streaming.discard(self.id)

    @property
    def closed(self):
        return self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        # The handle destroys itself when collected; the runtime drops the queue it keeps for us
        # the next time it takes its queue lock (not here: this thread may hold it already).
        rt = getattr(self, "runtime", None)
        if rt is not None and hasattr(self, "id"):
            rt._collected.append(self.id)

    # -- API
    def append(self, tokens):
        """Queues tokens for the next steps (a prompt, or a new turn after a finished one)."""
        _, buf, n = _int32_array(tokens)
        self._call(_abi.lib().llm_session_append_tokens, buf, n)

    def cancel(self):
        """Stops the generation at once from any thread: a stream of this session ends with
        finish reason "cancelled" and the session's KV pages are released."""
        self._call(_abi.lib().llm_session_cancel)

    def export_kv(self, *, key=None):
        """The session serialized for Runtime.import_kv (llm_session_export_kv, or with `key`, 16
        to 1024 bytes, llm_session_export_kv_authenticated), as bytes. Call it between steps."""
        lib = _abi.lib()
        keyb = None if key is None else bytes(key)
        buf = None
        while True:
            size = ctypes.c_size_t(0)
            cap = 0 if buf is None else len(buf)
            if keyb is None:
                st = self._call(lib.llm_session_export_kv, buf, cap, ctypes.byref(size),
                                ok=(_abi.LLM_OK, _abi.LLM_ERR_BUFFER_TOO_SMALL))
            else:
                st = self._call(lib.llm_session_export_kv_authenticated, keyb, len(keyb), buf, cap, ctypes.byref(size),
                                ok=(_abi.LLM_OK, _abi.LLM_ERR_BUFFER_TOO_SMALL))
            if st == _abi.LLM_OK:
                return buf.raw[:size.value] if buf is not None else b""
            buf = ctypes.create_string_buffer(size.value)  # (grown by a step meanwhile: asked again)

    def info(self):
        s = self._raw_info()
        return SessionInfo(SESSION_STATES.get(s.state, str(s.state)), s.id, s.num_tokens, s.num_pending,
                           s.num_generated, s.num_pages)

    def logits(self):
        """Float32 logits of the most recent sampled position (vocab_size values). Raises
        InvalidStateError before the first sampled position, and always for a session created
        with keep_logits=False."""
        n = ctypes.c_size_t(0)
        self._call(_abi.lib().llm_session_get_logits, None, 0, ctypes.byref(n),
                   ok=(_abi.LLM_OK, _abi.LLM_ERR_BUFFER_TOO_SMALL))
        out = (ctypes.c_float * max(1, n.value))()
        self._call(_abi.lib().llm_session_get_logits, out, n.value, ctypes.byref(n))
        return list(out[:n.value])

    def failed_pages(self):
        """Pages that failed KV verification (after a KvIntegrityError)."""
        n = ctypes.c_size_t(0)
        self._call(_abi.lib().llm_session_get_failed_pages, None, 0, ctypes.byref(n))
        out = (ctypes.c_uint32 * max(1, n.value))()
        self._call(_abi.lib().llm_session_get_failed_pages, out, n.value, ctypes.byref(n))
        return list(out[:n.value])

    def stream(self, tokens=None, *, text=None, close_session=False):
        """Appends `tokens` (if any) and streams the generation: a Stream of Token(id, text).
        text: True decodes through the runtime's tokenizer (skip_special), False yields text
        None, None (default) decodes when the runtime has a tokenizer. close_session: the stream
        closes the session when it is closed."""
        return Stream(self, tokens, text, close_session)

    def generate(self, tokens=None):
        """Appends `tokens` and returns the ids generated until the generation finishes."""
        with self.stream(tokens, text=False) as s:
            return [t.id for t in s]


class Stream:
    """An iterator of Token(id, text) for one generation of a session. Many streams of one
    runtime may be iterated from different threads at once; their steps are batched.

    When it ends, `finish_reason` is "stop", "length" or "cancelled" (None while running). A
    session that fails raises its error (KvExhaustedError, KvIntegrityError, ...) from next().
    Closing a stream before its end (close(), leaving a `with` block, or breaking out of a for
    loop over it and dropping it) cancels the generation. A stream is used by one thread."""

    def __init__(self, session, tokens, text, close_session):
        self.session = session
        self.finish_reason = None
        self.tokens = []
        self._close_session = close_session
        self._done = True  # until it is set up: a half-made stream must not cancel anything
        self._detok = None
        rt = session.runtime
        detok = None
        if text is None or text:
            tok = rt._tokenizer_or_none() if text is None else rt.tokenizer
            if tok is not None:
                detok = tok.detokenizer(skip_special=True)
        self._detok = detok
        # Mark the session as streamed before its tokens are queued, so a step run by any thread
        # from now on keeps its results for this stream.
        with rt._queues_locked():
            if session.id in rt._streaming:
                if detok is not None:
                    detok.close()
                raise errors.binding_error(errors.Status.INVALID_STATE, "the session already has an open stream")
            rt._streaming.add(session.id)
        try:
            if tokens is not None:
                session.append(tokens)
        except BaseException:
            if detok is not None:
                detok.close()
            self._release()
            raise
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        rt = self.session.runtime
        while True:
            try:
                r = rt._next_result(self.session)
            except BaseException:
                self._end(None)
                raise
            if r is None:  # nothing more will come (for example cancelled before any step)
                info = self.session._state() if not self.session.closed else None
                self._end("cancelled" if info == _abi.LLM_SESSION_CANCELLED else None)
                tail = self._flush()
                if tail:
                    return Token(_abi.LLM_TOKEN_NONE, tail)
                raise StopIteration
            if r.finish_reason == "cancelled":
                self._end("cancelled")
                tail = self._flush()
                if tail:
                    return Token(_abi.LLM_TOKEN_NONE, tail)
                raise StopIteration
            if r.status != errors.Status.OK:
                message = self._failure_message(r)
                if r.finish_reason is None:
                    # The session did not advance but could on a later step (KV pages exhausted,
                    # a failed pass): the stream ends here, so the generation is cancelled rather
                    # than left running with no reader.
                    try:
                        self.session.cancel()
                    except errors.LlmrtError:
                        pass
                self._end("error")
                e = errors.error_for(r.status, message)
                if isinstance(e, errors.KvIntegrityError):
                    try:
                        e.failed_pages = tuple(self.session.failed_pages())
                    except errors.LlmrtError:
                        pass
                raise e
            if r.token == _abi.LLM_TOKEN_NONE:
                if r.finish_reason is not None:
                    self._end(r.finish_reason)
                    raise StopIteration
                continue  # prefill still running
            self.tokens.append(r.token)
            piece = self._detok.push(r.token) if self._detok is not None else None
            if r.finish_reason is not None:
                self._end(r.finish_reason)
                tail = self._flush()
                if tail:
                    piece += tail
            return Token(r.token, piece)

    def _failure_message(self, r):
        # llm_step_result carries the status only: the library's message for the session is in its
        # error record (llm_session_last_error), while no later failure replaced it.
        if not self.session.closed:
            rec = errors.new_error_struct()
            try:
                ptr = self.session._h.acquire()
            except errors.LlmrtError:
                ptr = None
            if ptr is not None:
                try:
                    if (_abi.lib().llm_session_last_error(ptr, ctypes.byref(rec)) == _abi.LLM_OK
                            and rec.status == r.status and errors.message_of(rec)):
                        return errors.message_of(rec)
                finally:
                    self.session._h.release()
        msg = f"session {r.session_id} did not advance in step: {errors.status_string(r.status)}"
        if r.status == errors.Status.KV_INTEGRITY and r.failed_page >= 0:
            msg += f" (first failed page {r.failed_page}, {r.num_failed_pages} failed)"
        if r.status == errors.Status.KV_EXHAUSTED:
            try:
                info = self.session.runtime.info()
                msg += f" ({info.pages_free} of {info.pages_total} KV pages free)"
            except errors.LlmrtError:
                pass
        return msg

    def _flush(self):
        if self._detok is None:
            return None
        try:
            return self._detok.flush()
        finally:
            self._detok.close()

    def _end(self, reason):
        self._done = True
        self.finish_reason = reason
        self._release()

    def _release(self):
        rt = self.session.runtime
        with rt._queues_locked():
            rt._streaming.discard(self.session.id)
            q = rt._queues.get(self.session.id)
            # Leftovers (none in a normal end) would be stale for the next stream of the session.
            if q is not None and self.finish_reason is not None:
                q.clear()
        if self._close_session:
            self.session.close()

    @property
    def text(self):
        """The text of the tokens streamed so far (skip_special), if the stream decodes text."""
        tok = self._detok._tokenizer if self._detok is not None else None
        if tok is None:
            tok = self.session.runtime._tokenizer_or_none()
        return tok.decode(self.tokens, skip_special=True) if tok is not None else None

    def close(self):
        """Ends the stream; before its end this cancels the generation."""
        if self._done:
            return
        try:
            if not self.session.closed:
                self.session.cancel()
        except errors.LlmrtError:
            pass  # already finished or failed: nothing to cancel
        self._done = True
        self.finish_reason = "cancelled"
        if self._detok is not None:
            self._detok.close()
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if not getattr(self, "_done", True):
            try:
                self.close()
            except Exception:
                pass
