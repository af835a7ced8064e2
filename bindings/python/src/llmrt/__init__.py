"""Python binding of llmrt, an embeddable inference runtime for the Kimi K2.x and GLM MoE model
families, over its C ABI (include/llmrt/llmrt.h) with ctypes.

    import llmrt
    with llmrt.Runtime("models/kimi-k2-kjv-tiny") as rt:
        print(rt.generate("In the beginning", max_tokens=24))
        for tok in rt.stream("And God said", max_tokens=16):
            print(tok.text, end="", flush=True)

The library is found through LLMRT_LIBRARY (a file), LLMRT_LIB_DIR (a directory holding
libllmrt.so.1), pkg-config (llmrt.pc, e.g. PKG_CONFIG_PATH=PREFIX/lib/pkgconfig), then the system
loader, on first use.
"""

from ._abi import LibraryNotFoundError, library_path
from .callbacks import KvTracker, set_log_callback
from .comm_id import CommId, comm_id_create
from .errors import (BufferTooSmallError, CancelledError, FormatError, InternalError, InvalidArgumentError,
                     InvalidStateError, IoError, KvExhaustedError, KvIntegrityError, LlmrtError, NotFoundError,
                     OutOfMemoryError, OutOfRangeError, Status, UnsupportedError)
from .runtime import KvSizing, Runtime, RuntimeInfo, Session, SessionInfo, StepResult, Stream, Token, kv_sizing
from .tokenizer import Detokenizer, Tokenizer, TokenizerInfo

__version__ = "0.1.0"


def version():
    """The loaded library's version string ("0.1.0")."""
    from . import _abi
    return _abi.lib().llm_version().decode()


__all__ = [
    "BufferTooSmallError", "CancelledError", "CommId", "Detokenizer", "FormatError", "InternalError",
    "InvalidArgumentError", "InvalidStateError", "IoError", "KvExhaustedError", "KvIntegrityError", "KvSizing",
    "KvTracker",
    "LibraryNotFoundError", "LlmrtError", "NotFoundError", "OutOfMemoryError", "OutOfRangeError", "Runtime",
    "RuntimeInfo", "Session", "SessionInfo", "Status", "StepResult", "Stream", "Token", "Tokenizer", "TokenizerInfo",
    "UnsupportedError", "comm_id_create", "kv_sizing", "library_path", "set_log_callback", "version",
]
