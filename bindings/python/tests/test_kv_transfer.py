"""KV transfer (export, import, authenticated) and KV sizing."""

import pytest

import llmrt
from conftest import GOLDEN_IDS, GOLDEN_PROMPT, TINY


def test_export_import_continues_with_the_same_tokens():
    # Prefill and three tokens in one runtime, the rest in another: the golden continuation.
    with llmrt.Runtime(TINY, kv_dtype="f32") as prefill, llmrt.Runtime(TINY, kv_dtype="f32") as decode:
        with prefill.session(max_tokens=9) as s:
            stream = s.stream(GOLDEN_PROMPT, text=False)
            first = [next(stream).id for _ in range(3)]
            blob = s.export_kv()
            stream.close()
        assert first == GOLDEN_IDS[:3]
        assert isinstance(blob, bytes) and len(blob) > 0
        with decode.import_kv(blob, max_tokens=9) as moved:
            rest = [t.id for t in moved.stream(text=False)]
        assert first + rest == GOLDEN_IDS


def test_authenticated_transfer_needs_the_same_key():
    key = b"k" * 32
    with llmrt.Runtime(TINY, kv_dtype="f32") as a, llmrt.Runtime(TINY, kv_dtype="f32") as b:
        with a.session(max_tokens=2) as s:
            list(s.stream(GOLDEN_PROMPT, text=False))
            blob = s.export_kv(key=key)
            plain = s.export_kv()
        with b.import_kv(blob, key=key) as moved:
            assert moved.info().num_tokens == len(GOLDEN_PROMPT) + 1
        with pytest.raises(llmrt.FormatError):
            b.import_kv(blob, key=b"x" * 32)
        with pytest.raises(llmrt.InvalidArgumentError):
            b.import_kv(blob)  # an authenticated blob through the plain import
        with pytest.raises(llmrt.FormatError):
            b.import_kv(plain[:-5])  # truncated
        assert b.info().pages_free == b.info().pages_total


def test_kv_sizing_matches_the_runtime():
    z = llmrt.kv_sizing(TINY, kv_dtype="f32", kv_budget_bytes=1 << 20, page_size_tokens=16, session_tokens=64)
    assert z.kv_dtype == "f32"
    with llmrt.Runtime(TINY, kv_dtype="f32", kv_budget_bytes=1 << 20, page_size_tokens=16) as rt:
        info = rt.info()
        assert z.bytes_per_token == info.kv_bytes_per_token
        assert z.capacity_tokens == info.pages_total * 16
    assert z.max_sessions == z.capacity_tokens // 64
    with pytest.raises(llmrt.NotFoundError):
        llmrt.kv_sizing("/nonexistent/llmrt-model")
