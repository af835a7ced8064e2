"""The C ABI of include/llmrt/llmrt.h, declared by hand for ctypes, and the library loader.

Everything here mirrors the header: constants, structs field by field (the header promises no
implicit padding, so ctypes lays them out identically on LP64), and one prototype per function.
tests/test_abi_layout.py checks every constant and struct against bindings/abi_manifest.txt,
which the C build produces from the header itself.

ctypes.CDLL releases the GIL for the duration of every foreign call, so calls from several
Python threads run in parallel inside the library; callbacks re-acquire it.
"""

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading

# ---- constants ---------------------------------------------------------------------------------
# The binding was written against this header version; the library must have the same ABI major
# (its SONAME) and at least this version (for the _v2 functions).
LLMRT_ABI_VERSION_MAJOR = 1
LLMRT_VERSION_MAJOR = 0
LLMRT_VERSION_MINOR = 1
LLMRT_VERSION_PATCH = 0

LLM_OK = 0
LLM_ERR_INVALID_ARGUMENT = 1
LLM_ERR_NOT_FOUND = 2
LLM_ERR_IO = 3
LLM_ERR_FORMAT = 4
LLM_ERR_UNSUPPORTED = 5
LLM_ERR_OUT_OF_MEMORY = 6
LLM_ERR_KV_EXHAUSTED = 7
LLM_ERR_KV_INTEGRITY = 8
LLM_ERR_CANCELLED = 9
LLM_ERR_INVALID_STATE = 10
LLM_ERR_OUT_OF_RANGE = 11
LLM_ERR_BUFFER_TOO_SMALL = 12
LLM_ERR_INTERNAL = 13

LLM_ERROR_MESSAGE_CAPACITY = 1024

LLM_LOG_DEBUG = 0
LLM_LOG_INFO = 1
LLM_LOG_WARNING = 2
LLM_LOG_ERROR = 3
LLM_LOG_OFF = 4

LLM_BACKEND_AUTO = 0
LLM_BACKEND_CPU = 1
LLM_BACKEND_CUDA = 2

LLM_KV_DTYPE_AUTO = 0
LLM_KV_DTYPE_BF16 = 1
LLM_KV_DTYPE_F32 = 2
LLM_KV_DTYPE_FP8_E4M3 = 3
LLM_KV_DTYPE_FP8_E4M3_TILED = 4

LLM_KV_INTEGRITY_OFF = 0
LLM_KV_INTEGRITY_TAGS = 1

LLM_KV_PRESSURE_FAIL = 0
LLM_KV_PRESSURE_QUEUE = 1
LLM_KV_PRESSURE_PREEMPT = 2

LLM_COMM_ID_BYTES = 128

LLM_WEIGHTS_AS_STORED = 0
LLM_WEIGHTS_INT4_G32 = 1
LLM_WEIGHTS_INT4_G128 = 2

LLM_ACTIVATIONS_EXACT = 0
LLM_ACTIVATIONS_INT8 = 1
LLM_ACTIVATIONS_BF16 = 2
LLM_ACTIVATIONS_FP8 = 3

LLM_WEIGHT_MEMORY_AUTO = 0
LLM_WEIGHT_MEMORY_MAPPED = 1
LLM_WEIGHT_MEMORY_HUGE_PAGES = 2
LLM_WEIGHT_MEMORY_DEVICE = 3

LLM_KV_SCALE_NONE = 0
LLM_KV_SCALE_CHECKPOINT = 1
LLM_KV_SCALE_CALIBRATED = 2
LLM_KV_SCALE_PER_TILE = 3

LLM_SESSION_IDLE = 0
LLM_SESSION_PREFILL = 1
LLM_SESSION_DECODING = 2
LLM_SESSION_FINISHED = 3
LLM_SESSION_CANCELLED = 4
LLM_SESSION_FAILED = 5

LLM_FINISH_NONE = 0
LLM_FINISH_STOP = 1
LLM_FINISH_LENGTH = 2
LLM_FINISH_CANCELLED = 3
LLM_FINISH_ERROR = 4

LLM_TOKEN_NONE = -1

LLM_TOKENIZER_KIMI = 1
LLM_TOKENIZER_GLM = 2

LLM_CONVERT_INT4 = 0
LLM_CONVERT_FP8_BLOCK = 1

LLM_SAMPLING_NO_LOGITS = 0x1

LLM_TESTCTL_KV_FREE_MAPPED_PAGE = 1
LLM_TESTCTL_KV_CORRUPT_ENTRY = 2
LLM_TESTCTL_KV_SWAP_PAGES = 3
LLM_TESTCTL_RANK_FAIL_NEXT_PASS = 4

# Every constant above, by its header name (the layout test compares them with the manifest).
CONSTANTS = {name: value for name, value in globals().items()
             if name.startswith(("LLM_", "LLMRT_")) and isinstance(value, int)}

# ---- structs -----------------------------------------------------------------------------------
c_status = ctypes.c_int32


class llm_error(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("status", c_status),
        ("message", ctypes.c_char * LLM_ERROR_MESSAGE_CAPACITY),
    ]


ON_ALLOC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64)
ON_FREE = ON_ALLOC
ON_SHARE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                            ctypes.c_uint64)
ON_VERIFY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint32),
                             ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)
ON_VIOLATION = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                                ctypes.c_uint64, ctypes.c_uint64)
DESTROY_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p)


class llm_kv_tracker(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("user_data", ctypes.c_void_p),
        ("on_alloc", ON_ALLOC),
        ("on_free", ON_FREE),
        ("on_share", ON_SHARE),
        ("on_verify", ON_VERIFY),
        ("on_violation", ON_VIOLATION),
        ("destroy", DESTROY_FN),
    ]


class llm_comm_id(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("bytes", ctypes.c_uint8 * LLM_COMM_ID_BYTES),
    ]


class llm_runtime_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("kv_budget_bytes", ctypes.c_uint64),
        ("page_size_tokens", ctypes.c_uint32),
        ("max_sessions", ctypes.c_uint32),
        ("max_tokens_per_step", ctypes.c_uint32),
        ("weight_memory", ctypes.c_int32),
        ("kv_integrity", ctypes.c_int32),
        ("kv_pressure", ctypes.c_int32),
        ("tracker", ctypes.POINTER(llm_kv_tracker)),
        ("prefix_sharing", ctypes.c_int32),
        ("reserved1", ctypes.c_uint32),
        ("prefill_weights", ctypes.c_int32),
        ("decode_weights", ctypes.c_int32),
        ("tensor_parallel", ctypes.c_uint32),
        ("expert_parallel", ctypes.c_int32),
        ("world_size", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("collective_timeout_ms", ctypes.c_uint32),
        ("reserved_parallel", ctypes.c_uint32),
        ("comm_id", ctypes.POINTER(llm_comm_id)),
        ("quantized_activations", ctypes.c_int32),
        ("reserved_activations", ctypes.c_uint32),
    ]


class llm_runtime_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("architecture", ctypes.c_char * 64),
        ("model_type", ctypes.c_char * 32),
        ("backend", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("vocab_size", ctypes.c_uint32),
        ("num_layers", ctypes.c_uint32),
        ("weight_memory", ctypes.c_int32),
        ("num_parameters", ctypes.c_uint64),
        ("weight_bytes", ctypes.c_uint64),
        ("kv_bytes_per_token", ctypes.c_uint64),
        ("kv_capacity_tokens", ctypes.c_uint64),
        ("page_size_tokens", ctypes.c_uint32),
        ("pages_total", ctypes.c_uint32),
        ("pages_free", ctypes.c_uint32),
        ("num_sessions", ctypes.c_uint32),
        ("max_position_embeddings", ctypes.c_uint32),
        ("pages_shared", ctypes.c_uint32),
        ("prefix_lookup_tokens", ctypes.c_uint64),
        ("prefix_hit_tokens", ctypes.c_uint64),
        ("integrity_violations", ctypes.c_uint64),
        ("preemptions", ctypes.c_uint64),
        ("integrity_check_ns", ctypes.c_uint64),
        ("weight_bytes_f32", ctypes.c_uint64),
        ("weight_bytes_bf16", ctypes.c_uint64),
        ("weight_bytes_fp8", ctypes.c_uint64),
        ("weight_bytes_int4", ctypes.c_uint64),
        ("prefill_weights", ctypes.c_int32),
        ("decode_weights", ctypes.c_int32),
        ("kv_scale_source", ctypes.c_int32),
        ("reserved2", ctypes.c_uint32),
        ("workspace_bytes", ctypes.c_uint64),
        ("tensor_parallel", ctypes.c_uint32),
        ("expert_parallel", ctypes.c_int32),
        ("rank_weight_bytes", ctypes.c_uint64),
        ("rank_kv_capacity_tokens", ctypes.c_uint64),
        ("collective_ns", ctypes.c_uint64),
    ]


class llm_kv_sizing(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kv_dtype", ctypes.c_int32),
        ("num_layers", ctypes.c_uint32),
        ("elements_per_token_layer", ctypes.c_uint32),
        ("bytes_per_token", ctypes.c_uint64),
        ("capacity_tokens", ctypes.c_uint64),
        ("max_sessions", ctypes.c_uint64),
    ]


class llm_convert_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("target", ctypes.c_int32),
        ("fp8_block", ctypes.c_uint32),
        ("int4_group", ctypes.c_uint32),
        ("int4_all_linears", ctypes.c_int32),
        ("reserved0", ctypes.c_uint32),
        ("max_shard_bytes", ctypes.c_uint64),
    ]


class llm_sampling_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("max_new_tokens", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("stop_tokens", ctypes.POINTER(ctypes.c_int32)),
        ("num_stop_tokens", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class llm_session_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("state", ctypes.c_int32),
        ("id", ctypes.c_uint64),
        ("num_tokens", ctypes.c_uint32),
        ("num_pending", ctypes.c_uint32),
        ("num_generated", ctypes.c_uint32),
        ("num_pages", ctypes.c_uint32),
    ]


class llm_step_result(ctypes.Structure):
    _fields_ = [
        ("session", ctypes.c_void_p),
        ("session_id", ctypes.c_uint64),
        ("token", ctypes.c_int32),
        ("finish_reason", ctypes.c_int32),
        ("status", c_status),
        ("num_prefilled", ctypes.c_uint32),
        ("failed_page", ctypes.c_int32),
        ("num_failed_pages", ctypes.c_uint32),
        ("reserved", ctypes.c_uint64),
    ]


class llm_tokenizer_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("family", ctypes.c_int32),
        ("vocab_size", ctypes.c_uint32),
        ("bos_id", ctypes.c_int32),
        ("eos_id", ctypes.c_int32),
    ]


class llm_chat_message(ctypes.Structure):
    _fields_ = [
        ("role", ctypes.c_char_p),
        ("content", ctypes.c_char_p),
    ]


# Every struct the binding declares, by its header name (checked against the manifest).
STRUCTS = {cls.__name__: cls for cls in (
    llm_error, llm_kv_tracker, llm_comm_id, llm_runtime_options, llm_runtime_info, llm_kv_sizing, llm_convert_options,
    llm_sampling_options, llm_session_info, llm_step_result, llm_tokenizer_info, llm_chat_message)}

# ---- functions ---------------------------------------------------------------------------------
_P = ctypes.POINTER
_vp = ctypes.c_void_p  # every opaque handle
_sz = ctypes.c_size_t

# name: (restype, argtypes)
PROTOTYPES = {
    "llm_version": (ctypes.c_char_p, []),
    "llm_version_number": (ctypes.c_uint32, []),
    "llm_status_string": (ctypes.c_char_p, [c_status]),
    "llm_last_error": (ctypes.c_char_p, []),
    "llm_set_log_callback_v2": (c_status, [LOG_FN, _vp, ctypes.c_int32, DESTROY_FN]),
    "llm_comm_id_create": (c_status, [ctypes.c_int32, _P(llm_comm_id)]),
    "llm_runtime_options_init": (None, [_P(llm_runtime_options)]),
    "llm_runtime_create_v2": (c_status, [ctypes.c_char_p, _P(llm_runtime_options), _P(_vp), _P(llm_error)]),
    "llm_runtime_last_error": (c_status, [_vp, _P(llm_error)]),
    "llm_runtime_destroy": (None, [_vp]),
    "llm_runtime_get_info": (c_status, [_vp, _P(llm_runtime_info)]),
    "llm_model_kv_sizing": (c_status, [ctypes.c_char_p, ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint32,
                                       ctypes.c_uint32, _P(llm_kv_sizing)]),
    "llm_model_kv_sizing_v2": (c_status, [ctypes.c_char_p, ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint32,
                                          ctypes.c_uint32, ctypes.c_uint32, _P(llm_kv_sizing)]),
    "llm_sampling_options_init": (None, [_P(llm_sampling_options)]),
    "llm_session_create": (c_status, [_vp, _P(llm_sampling_options), _P(_vp)]),
    "llm_session_destroy": (None, [_vp]),
    "llm_session_append_tokens": (c_status, [_vp, _P(ctypes.c_int32), _sz]),
    "llm_session_cancel": (c_status, [_vp]),
    "llm_session_get_info": (c_status, [_vp, _P(llm_session_info)]),
    "llm_session_last_error": (c_status, [_vp, _P(llm_error)]),
    "llm_session_get_logits": (c_status, [_vp, _P(ctypes.c_float), _sz, _P(_sz)]),
    "llm_session_get_failed_pages": (c_status, [_vp, _P(ctypes.c_uint32), _sz, _P(_sz)]),
    "llm_decode_step_v2": (c_status, [_vp, _vp, _sz, _sz, _P(_sz)]),
    "llm_score": (c_status, [_vp, _P(ctypes.c_int32), _sz, _P(ctypes.c_float), _P(ctypes.c_int32)]),
    "llm_session_export_kv": (c_status, [_vp, _vp, _sz, _P(_sz)]),
    "llm_session_import_kv": (c_status, [_vp, _vp, _sz, _P(llm_sampling_options), _P(_vp)]),
    "llm_session_export_kv_authenticated": (c_status, [_vp, _vp, _sz, _vp, _sz, _P(_sz)]),
    "llm_session_import_kv_authenticated": (c_status, [_vp, _vp, _sz, _vp, _sz, _P(llm_sampling_options),
                                                       _P(_vp)]),
    "llm_tokenizer_create_v2": (c_status, [ctypes.c_char_p, _P(_vp), _P(llm_error)]),
    "llm_tokenizer_last_error": (c_status, [_vp, _P(llm_error)]),
    "llm_detokenizer_last_error": (c_status, [_vp, _P(llm_error)]),
    "llm_tokenizer_destroy": (None, [_vp]),
    "llm_tokenizer_get_info": (c_status, [_vp, _P(llm_tokenizer_info)]),
    "llm_tokenize": (c_status, [_vp, ctypes.c_char_p, _sz, ctypes.c_int32, _P(ctypes.c_int32), _sz, _P(_sz)]),
    "llm_detokenize": (c_status, [_vp, _P(ctypes.c_int32), _sz, ctypes.c_int32, ctypes.c_char_p, _sz, _P(_sz)]),
    "llm_tokenizer_special_id": (c_status, [_vp, ctypes.c_char_p, _P(ctypes.c_int32)]),
    "llm_detokenizer_create": (c_status, [_vp, ctypes.c_int32, _P(_vp)]),
    "llm_detokenizer_destroy": (None, [_vp]),
    "llm_detokenizer_push": (c_status, [_vp, ctypes.c_int32, ctypes.c_char_p, _sz, _P(_sz)]),
    "llm_detokenizer_flush": (c_status, [_vp, ctypes.c_char_p, _sz, _P(_sz)]),
    "llm_chat_apply_template": (c_status, [_vp, _P(llm_chat_message), _sz, ctypes.c_int32, ctypes.c_int32,
                                           ctypes.c_char_p, _sz, _P(_sz)]),
    "llm_test_control": (c_status, [_vp, ctypes.c_int32, _P(ctypes.c_int64), _sz]),
}


class LibraryNotFoundError(OSError):
    """libllmrt could not be found or loaded, or is not an ABI this binding speaks."""


def _pkg_config_libdir():
    exe = shutil.which("pkg-config")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "llmrt"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = out.stdout.strip()
    return libdir if out.returncode == 0 and libdir else None


def _candidates():
    """(where it came from, path or name) in the documented search order."""
    names = (f"libllmrt.so.{LLMRT_ABI_VERSION_MAJOR}", "libllmrt.so")
    explicit = os.environ.get("LLMRT_LIBRARY")
    if explicit:
        # An explicit file is the only candidate: silently loading another copy would hide a typo.
        return [("LLMRT_LIBRARY", explicit)]
    found = []
    lib_dir = os.environ.get("LLMRT_LIB_DIR")
    if lib_dir:
        found += [("LLMRT_LIB_DIR", os.path.join(lib_dir, n)) for n in names]
    pc_dir = _pkg_config_libdir()
    if pc_dir:
        found += [("pkg-config", os.path.join(pc_dir, n)) for n in names]
    system = ctypes.util.find_library("llmrt")
    found += [("system loader", n) for n in names + ((system,) if system else ())]
    return found


def _load():
    tried = []
    for origin, path in _candidates():
        if origin != "system loader" and not os.path.exists(path):
            tried.append(f"{path} ({origin}: no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({origin}: {e})")
            continue
        _declare(lib, path)
        return lib, path
    raise LibraryNotFoundError(
        "libllmrt not found; set LLMRT_LIBRARY to the library file, LLMRT_LIB_DIR to its directory, or "
        "PKG_CONFIG_PATH to the directory holding llmrt.pc. Tried: " + "; ".join(tried))


def _declare(lib, path):
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryNotFoundError(f"{path} has no {name}: it is older than llmrt "
                                       f"{LLMRT_VERSION_MAJOR}.{LLMRT_VERSION_MINOR}.{LLMRT_VERSION_PATCH}") from None
        fn.restype = restype
        fn.argtypes = argtypes
    number = lib.llm_version_number()
    need = LLMRT_VERSION_MAJOR * 1000000 + LLMRT_VERSION_MINOR * 1000 + LLMRT_VERSION_PATCH
    if number // 1000000 != LLMRT_VERSION_MAJOR or number < need:
        raise LibraryNotFoundError(f"{path} is llmrt {lib.llm_version().decode()}; this binding needs "
                                   f"{LLMRT_VERSION_MAJOR}.{LLMRT_VERSION_MINOR}.x with x >= {LLMRT_VERSION_PATCH}")


_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def lib():
    """The loaded library (loaded on first use, so that importing llmrt never fails)."""
    global _lib, _lib_path
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                loaded, path = _load()
                _lib_path = path
                _lib = loaded
    return _lib


def library_path():
    lib()
    return _lib_path
