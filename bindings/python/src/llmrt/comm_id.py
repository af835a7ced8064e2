"""Group ids of multi-process ranks (llm_comm_id)."""

import ctypes
import struct

from . import _abi
from . import errors

_BACKEND_NAMES = {_abi.LLM_BACKEND_CPU: "cpu", _abi.LLM_BACKEND_CUDA: "cuda"}
_BACKEND_CODES = {"auto": _abi.LLM_BACKEND_AUTO, "cpu": _abi.LLM_BACKEND_CPU, "cuda": _abi.LLM_BACKEND_CUDA}


class CommId:
    """The id of a multi-process group of ranks (llm_comm_id). One process makes it with
    llmrt.comm_id_create, the host hands bytes(id) to every process of the group (a file, its own
    RPC...), each rebuilds it with CommId.from_bytes and passes it as Runtime(comm_id=...). Every
    rank checks it against rank 0's when it joins, so processes given different ids refuse to
    compute together.

    bytes(id) is the whole C struct, CommId.SIZE = 136 bytes, in its memory order (that of the
    host; little-endian on every platform llmrt builds for): the backend (int32), a reserved
    uint32 that is 0, then the 128 id bytes. It is byte for byte what a C host writes with
    fwrite(&id, sizeof id, 1, f), and the form the Rust and Go bindings use. The backend travels
    with the id because the library reads the id differently for CPU and CUDA ranks."""

    SIZE = ctypes.sizeof(_abi.llm_comm_id)
    __slots__ = ("_data",)

    def __init__(self, data):
        # Private: use comm_id_create or CommId.from_bytes, which check what they are given.
        self._data = bytes(data)

    @classmethod
    def from_bytes(cls, data):
        """The id of a serialized form (another process's bytes(id), or a C host's struct).
        InvalidArgumentError: a length other than 136, a backend other than CPU or CUDA, a
        reserved word other than 0. The library checks the id bytes when a runtime uses them."""
        try:
            data = bytes(data)
        except TypeError:
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                       f"a CommId is made from bytes, not {type(data).__name__}") from None
        if len(data) != cls.SIZE:
            raise errors.binding_error(
                errors.Status.INVALID_ARGUMENT,
                f"a serialized CommId is {cls.SIZE} bytes (backend, reserved, {_abi.LLM_COMM_ID_BYTES} id bytes), "
                f"not {len(data)}")
        backend, reserved = struct.unpack_from("=iI", data)
        if backend not in _BACKEND_NAMES:
            raise errors.binding_error(
                errors.Status.INVALID_ARGUMENT,
                f"the serialized CommId's backend is {backend}, not LLM_BACKEND_CPU ({_abi.LLM_BACKEND_CPU}) or "
                f"LLM_BACKEND_CUDA ({_abi.LLM_BACKEND_CUDA})")
        if reserved != 0:
            raise errors.binding_error(
                errors.Status.INVALID_ARGUMENT,
                f"the serialized CommId's reserved word (bytes 4..8) is {reserved:#x}, not 0")
        return cls(data)

    @property
    def backend(self):
        """"cpu" or "cuda": the backend the id was made for."""
        return _BACKEND_NAMES[struct.unpack_from("=i", self._data)[0]]

    @property
    def id_bytes(self):
        """The 128 opaque bytes (CPU: the MPI group tag; CUDA: NCCL's ncclUniqueId)."""
        return self._data[8:]

    def __bytes__(self):
        return self._data

    def __eq__(self, other):
        return isinstance(other, CommId) and other._data == self._data

    def __hash__(self):
        return hash(self._data)

    def __repr__(self):
        # The leading bytes tell ids apart; all 128 would drown a log line.
        return f"CommId(backend={self.backend!r}, id_bytes={self.id_bytes[:24].hex()}..)"

    def _struct(self):
        """A new llm_comm_id holding the id, for llm_runtime_options.comm_id."""
        return _abi.llm_comm_id.from_buffer_copy(self._data)


def comm_id_create(backend):
    """A new group id for ranks on `backend`: "cpu" (ranks joined through MPI; a random tag) or
    "cuda" (NCCL's unique id; UnsupportedError where NCCL cannot be loaded; make it on the host of
    rank 0), or the LLM_BACKEND_* number. "auto" or another value: InvalidArgumentError."""
    if isinstance(backend, str):
        code = _BACKEND_CODES.get(backend.lower())
        if code is None:
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                       f"backend {backend!r} is not one of {sorted(_BACKEND_CODES)}")
    elif isinstance(backend, int) and not isinstance(backend, bool) and -2 ** 31 <= backend < 2 ** 31:
        code = backend  # a raw LLM_BACKEND_* number; the library validates it
    else:
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                   f"backend must be a str or an int32, not {backend!r}")
    lib = _abi.lib()
    out = _abi.llm_comm_id()
    st = lib.llm_comm_id_create(code, ctypes.byref(out))
    if st != _abi.LLM_OK:
        # No handle records this call's error; ctypes calls stay on this thread, whose message
        # llm_last_error returns.
        raise errors.error_for(st, lib.llm_last_error().decode("utf-8", "replace"))
    return CommId(bytes(out))
