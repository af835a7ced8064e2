"""Exceptions: one class per llm_status, each carrying the status and the library's message."""

import ctypes
import enum
import os

from . import _abi


class Status(enum.IntEnum):
    """llm_status codes (stable, never renumbered)."""
    OK = _abi.LLM_OK
    INVALID_ARGUMENT = _abi.LLM_ERR_INVALID_ARGUMENT
    NOT_FOUND = _abi.LLM_ERR_NOT_FOUND
    IO = _abi.LLM_ERR_IO
    FORMAT = _abi.LLM_ERR_FORMAT
    UNSUPPORTED = _abi.LLM_ERR_UNSUPPORTED
    OUT_OF_MEMORY = _abi.LLM_ERR_OUT_OF_MEMORY
    KV_EXHAUSTED = _abi.LLM_ERR_KV_EXHAUSTED
    KV_INTEGRITY = _abi.LLM_ERR_KV_INTEGRITY
    CANCELLED = _abi.LLM_ERR_CANCELLED
    INVALID_STATE = _abi.LLM_ERR_INVALID_STATE
    OUT_OF_RANGE = _abi.LLM_ERR_OUT_OF_RANGE
    BUFFER_TOO_SMALL = _abi.LLM_ERR_BUFFER_TOO_SMALL
    INTERNAL = _abi.LLM_ERR_INTERNAL


class LlmrtError(Exception):
    """A failed llmrt call. `status` is the llm_status (a `Status` when known), `message` the
    library's text naming the thing at fault."""

    status = None

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass  # a code newer than this binding: keep the number
        self.status = status
        self.message = message
        name = status.name if isinstance(status, Status) else f"status {int(status)}"
        super().__init__(f"{name}: {message}" if message else name)


class InvalidArgumentError(LlmrtError, ValueError):
    pass


class NotFoundError(LlmrtError, LookupError):
    pass


class IoError(LlmrtError):
    pass


class FormatError(LlmrtError):
    pass


class UnsupportedError(LlmrtError):
    pass


class OutOfMemoryError(LlmrtError, MemoryError):
    pass


class KvExhaustedError(LlmrtError):
    pass


class KvIntegrityError(LlmrtError):
    """A session's KV pages failed verification; `failed_pages` lists them when known."""
    failed_pages = ()


class CancelledError(LlmrtError):
    pass


class InvalidStateError(LlmrtError):
    pass


class OutOfRangeError(LlmrtError):
    pass


class BufferTooSmallError(LlmrtError):
    pass


class InternalError(LlmrtError):
    pass


_BY_STATUS = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.NOT_FOUND: NotFoundError,
    Status.IO: IoError,
    Status.FORMAT: FormatError,
    Status.UNSUPPORTED: UnsupportedError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
    Status.KV_EXHAUSTED: KvExhaustedError,
    Status.KV_INTEGRITY: KvIntegrityError,
    Status.CANCELLED: CancelledError,
    Status.INVALID_STATE: InvalidStateError,
    Status.OUT_OF_RANGE: OutOfRangeError,
    Status.BUFFER_TOO_SMALL: BufferTooSmallError,
    Status.INTERNAL: InternalError,
}


def error_for(status, message):
    """The exception for `status` (LlmrtError itself for a code this binding does not know)."""
    try:
        cls = _BY_STATUS.get(Status(status), LlmrtError)
    except ValueError:
        cls = LlmrtError
    return cls(status, message)


def status_string(status):
    """The library's name for a status code ("LLM_ERR_FORMAT")."""
    return _abi.lib().llm_status_string(int(status)).decode()


def new_error_struct():
    e = _abi.llm_error()
    e.struct_size = ctypes.sizeof(_abi.llm_error)
    return e


def message_of(e):
    return e.message.decode("utf-8", "replace")


def from_handle(status, getter, handle):
    """The exception for a call on `handle` that returned `status`, with the message the handle
    recorded (getter: llm_runtime_last_error, llm_session_last_error, ...). The record is read
    through the handle, not the calling thread, as the header's "errors by handle" asks."""
    e = new_error_struct()
    message = ""
    if getter(handle, ctypes.byref(e)) == _abi.LLM_OK and e.status == status:
        message = message_of(e)
    if not message:
        # Another thread's failure on the same handle replaced the record meanwhile.
        message = f"{status_string(status)} (the message was replaced by a later failure on the same handle)"
    return error_for(status, message)


def c_path(path):
    """`path` (str, bytes or os.PathLike) as the bytes of a C string; a NUL in it, where C would
    end the string early and name another file, is an InvalidArgumentError."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise binding_error(Status.INVALID_ARGUMENT, f"path {path!r} contains a NUL character")
    return b


def binding_error(status, message):
    """An error found by the binding itself before any library call (closed handle, bad type)."""
    return error_for(status, message)
