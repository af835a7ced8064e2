"""Group ids (llmrt.comm_id_create, llm_comm_id) and the runtime option that carries one. No MPI
process is started: every runtime case here fails, or ignores the id, before ranks would meet."""

import ctypes
import struct

import pytest

import llmrt
from llmrt import _abi
from conftest import GOLDEN_IDS, GOLDEN_PROMPT, TINY


def two_ranks(comm_id):
    """Rank 0 of a two-process group on the tiny model."""
    return llmrt.Runtime(TINY, kv_dtype="f32", world_size=2, rank=0, collective_timeout_ms=2000, comm_id=comm_id)


def forged_cpu_id():
    data = bytearray(bytes(llmrt.comm_id_create("cpu")))
    data[8] ^= 1  # the first id byte
    return llmrt.CommId.from_bytes(data)


def test_cpu_ids_are_distinct_and_round_trip():
    a = llmrt.comm_id_create("cpu")
    b = llmrt.comm_id_create(_abi.LLM_BACKEND_CPU)
    assert a.backend == "cpu" and b.backend == "cpu"
    assert a != b and a.id_bytes != b.id_bytes, "two ids of different groups are equal"
    assert any(a.id_bytes) and len(a.id_bytes) == 128
    # The serialized form is the C struct: backend, reserved 0, then the 128 id bytes.
    data = bytes(a)
    assert len(data) == llmrt.CommId.SIZE == ctypes.sizeof(_abi.llm_comm_id) == 136
    assert struct.unpack_from("=iI", data) == (_abi.LLM_BACKEND_CPU, 0)
    assert data[8:] == a.id_bytes
    back = llmrt.CommId.from_bytes(data)
    assert back == a and hash(back) == hash(a) and bytes(back) == data
    assert "cpu" in repr(a) and a.id_bytes[:4].hex() in repr(a)


@pytest.mark.parametrize("length", [0, 128, 135, 137])
def test_wrong_lengths_are_refused(length):
    data = (bytes(llmrt.comm_id_create("cpu")) * 2)[:length]
    with pytest.raises(llmrt.InvalidArgumentError, match=f"136 bytes .* not {length}$") as e:
        llmrt.CommId.from_bytes(data)
    assert e.value.status == llmrt.Status.INVALID_ARGUMENT


def test_bad_backend_or_reserved_bytes_are_refused():
    data = bytearray(bytes(llmrt.comm_id_create("cpu")))
    data[0:4] = struct.pack("=i", _abi.LLM_BACKEND_AUTO)
    with pytest.raises(llmrt.InvalidArgumentError, match="backend is 0"):
        llmrt.CommId.from_bytes(data)
    data = bytearray(bytes(llmrt.comm_id_create("cpu")))
    data[4] = 1
    with pytest.raises(llmrt.InvalidArgumentError, match="reserved"):
        llmrt.CommId.from_bytes(data)
    with pytest.raises(llmrt.InvalidArgumentError, match="from bytes"):
        llmrt.CommId.from_bytes(3.5)


@pytest.mark.parametrize("backend", ["auto", _abi.LLM_BACKEND_AUTO, 77, -1])
def test_bad_backends_are_invalid_argument(backend):
    with pytest.raises(llmrt.InvalidArgumentError, match="backend") as e:
        llmrt.comm_id_create(backend)
    assert e.value.status == _abi.LLM_ERR_INVALID_ARGUMENT


def test_binding_refuses_what_it_cannot_pass():
    with pytest.raises(llmrt.InvalidArgumentError, match="'tpu' is not one of"):
        llmrt.comm_id_create("tpu")
    with pytest.raises(llmrt.InvalidArgumentError, match="int32"):
        llmrt.comm_id_create(2 ** 40)
    with pytest.raises(llmrt.InvalidArgumentError, match="136 bytes"):
        llmrt.Runtime(TINY, world_size=2, comm_id=b"short")
    # NULL, which the Python API cannot pass: the raw call.
    assert _abi.lib().llm_comm_id_create(_abi.LLM_BACKEND_CPU, None) == _abi.LLM_ERR_INVALID_ARGUMENT


def test_a_cuda_id_is_refused_by_multi_process_ranks():
    # NCCL's unique id where libnccl.so.2 loads (it needs no GPU); elsewhere UnsupportedError
    # naming NCCL, and the runtime's refusal is checked with a CUDA-kind id made from bytes.
    try:
        cuda = llmrt.comm_id_create("cuda")
        assert cuda.backend == "cuda"
    except llmrt.UnsupportedError as e:
        assert e.status == _abi.LLM_ERR_UNSUPPORTED and "NCCL" in str(e)
        cuda = llmrt.CommId.from_bytes(struct.pack("=iI", _abi.LLM_BACKEND_CUDA, 0) + bytes(128))
    with pytest.raises(llmrt.UnsupportedError, match="comm_id was made for CUDA ranks") as e:
        two_ranks(cuda)
    assert e.value.status == _abi.LLM_ERR_UNSUPPORTED


def test_a_forged_cpu_id_is_refused_before_joining():
    forged = forged_cpu_id()
    with pytest.raises(llmrt.InvalidArgumentError, match=r"not a CPU \(MPI\) group id"):
        two_ranks(forged)
    # The same bytes, not wrapped in a CommId.
    with pytest.raises(llmrt.InvalidArgumentError, match=r"not a CPU \(MPI\) group id"):
        two_ranks(bytes(forged))


def test_one_process_ignores_the_id():
    with llmrt.Runtime(TINY, kv_dtype="f32", tensor_parallel=2, comm_id=forged_cpu_id()) as rt:
        with rt.session(max_tokens=len(GOLDEN_IDS)) as s:
            assert s.generate(GOLDEN_PROMPT) == GOLDEN_IDS
