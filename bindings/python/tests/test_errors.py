"""Errors carry the status (a named kind) and the library's message; misuse never crashes."""

import threading

import pytest

import llmrt
from conftest import GOLDEN_PROMPT, KJV, TINY


def test_missing_model_directory():
    with pytest.raises(llmrt.NotFoundError) as ei:
        llmrt.Runtime("/nonexistent/llmrt-model")
    e = ei.value
    assert isinstance(e, llmrt.LlmrtError)
    assert e.status == llmrt.Status.NOT_FOUND and e.status == 2
    assert "/nonexistent/llmrt-model" in e.message
    assert str(e).startswith("NOT_FOUND: ")


def test_missing_tokenizer_directory():
    with pytest.raises(llmrt.NotFoundError) as ei:
        llmrt.Tokenizer("/nonexistent/llmrt-tokenizer")
    assert "/nonexistent/llmrt-tokenizer" in ei.value.message
    with pytest.raises(llmrt.NotFoundError):
        llmrt.Tokenizer(TINY)  # a checkpoint without tokenizer files


def test_runtime_without_tokenizer(tiny):
    with pytest.raises(llmrt.NotFoundError):
        tiny.generate("text")
    with tiny.session(max_tokens=2) as s:
        assert [t.text for t in s.stream(GOLDEN_PROMPT)] == [None, None]  # text=None: ids only
        with pytest.raises(llmrt.NotFoundError):
            s.stream([1], text=True)


def test_out_of_range_token_on_session(tiny):
    vocab = tiny.info().vocab_size
    with tiny.session() as s:
        with pytest.raises(llmrt.InvalidArgumentError) as ei:
            s.append([1, vocab + 5, 2])
        assert ei.value.status == llmrt.Status.INVALID_ARGUMENT
        assert str(vocab + 5) in ei.value.message, ei.value.message
        assert s.info().num_pending == 0  # nothing was queued
        with pytest.raises(llmrt.InvalidArgumentError):
            s.append([-3])


def test_token_ids_outside_int32_are_refused_before_the_call(tiny):
    with tiny.session() as s:
        for bad in ([1 << 40], [-(1 << 31) - 1], ["7"], "abc", [1.5]):
            with pytest.raises(llmrt.InvalidArgumentError):
                s.append(bad)


def test_error_read_on_another_thread_is_the_handles(tiny):
    """The message comes from the handle, so it is right whichever thread reads it."""
    errors = []
    with tiny.session() as s:
        def fail():
            try:
                s.append([1 << 30])
            except llmrt.LlmrtError as e:
                errors.append(e)
        threads = [threading.Thread(target=fail) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(errors) == 4
    assert all(e.status == llmrt.Status.INVALID_ARGUMENT and str(1 << 30) in e.message for e in errors)


def test_bad_options():
    with pytest.raises(llmrt.InvalidArgumentError, match="kv_dtype"):
        llmrt.Runtime(KJV, kv_dtype="f16")
    with pytest.raises(llmrt.InvalidArgumentError, match="max_sessions"):
        llmrt.Runtime(KJV, max_sessions=-1)
    with pytest.raises(llmrt.LlmrtError) as ei:
        llmrt.Runtime(KJV, kv_dtype=99)  # passed through; the library rejects it
    assert ei.value.status == llmrt.Status.INVALID_ARGUMENT and ei.value.message


def test_session_limit_is_out_of_range():
    with llmrt.Runtime(TINY, max_sessions=2) as rt:
        a, b = rt.session(), rt.session()
        with pytest.raises(llmrt.OutOfRangeError) as ei:
            rt.session()
        assert ei.value.message
        a.close()
        rt.session().close()  # a slot is free again
        b.close()


def test_use_after_close_is_an_error_not_a_crash():
    rt = llmrt.Runtime(TINY)
    s = rt.session()
    tok = None
    rt.close()
    rt.close()  # idempotent
    assert rt.closed and s.closed  # closing the runtime closed its session
    for call in (lambda: s.append([1]), s.info, s.cancel, rt.info, rt.step, rt.session):
        with pytest.raises(llmrt.InvalidStateError, match="closed"):
            call()
    s.close()
    tok = llmrt.Tokenizer(KJV)
    d = tok.detokenizer()
    tok.close()
    assert d.closed  # closed with its tokenizer
    with pytest.raises(llmrt.InvalidStateError):
        tok.encode("x")
    with pytest.raises(llmrt.InvalidStateError):
        d.push(1)


def test_append_after_cancel_is_invalid_state(tiny):
    with tiny.session() as s:
        s.cancel()
        with pytest.raises(llmrt.InvalidStateError) as ei:
            s.append([1])
        assert ei.value.message


def test_one_open_stream_per_session(tiny):
    with tiny.session(max_tokens=3) as s:
        first = s.stream(GOLDEN_PROMPT, text=False)
        with pytest.raises(llmrt.InvalidStateError):
            s.stream(text=False)
        assert len(list(first)) == 3


def test_status_strings():
    assert llmrt.errors.status_string(llmrt.Status.FORMAT) == "LLM_ERR_FORMAT"
    e = llmrt.errors.error_for(99, "from the future")
    assert type(e) is llmrt.LlmrtError and e.status == 99


def test_kv_exhausted_fails_that_session_in_its_stream():
    # Two pages of 4 tokens: a 7-token prompt fits, its ninth generated token does not.
    page_bytes = 4 * llmrt.Runtime(TINY, kv_dtype="f32").info().kv_bytes_per_token
    with llmrt.Runtime(TINY, kv_dtype="f32", page_size_tokens=4, kv_budget_bytes=2 * page_bytes) as rt:
        assert rt.info().pages_total == 2
        with rt.session(max_tokens=9) as s:
            stream = s.stream(GOLDEN_PROMPT, text=False)
            got = []
            with pytest.raises(llmrt.KvExhaustedError) as ei:
                for t in stream:
                    got.append(t.id)
            assert got == [178, 108]  # positions 0..8 fill both pages
            assert ei.value.status == llmrt.Status.KV_EXHAUSTED
            # The library's message for the session (its error record).
            assert f"session {s.id} needs KV pages" in ei.value.message and "0 of 2 pages are free" in ei.value.message
            # The stream ended before the generation did: the generation is cancelled, as closing
            # the stream would, rather than left running with no reader.
            assert s.info().state == "cancelled" and s.info().num_pages == 0
            assert rt.info().pages_free == 2


def test_paths_and_special_names_with_a_nul_are_refused():
    # C would end the string at the NUL and open another directory (or find another token).
    with pytest.raises(llmrt.InvalidArgumentError):
        llmrt.Runtime(str(TINY) + "\0/does/not/exist")
    with pytest.raises(llmrt.InvalidArgumentError):
        llmrt.Tokenizer(str(KJV) + "\0/does/not/exist")
    tok = llmrt.Tokenizer(KJV)
    assert tok.special_id("<|im_end|>") is not None
    with pytest.raises(llmrt.InvalidArgumentError):
        tok.special_id("<|im_end|>\0garbage")


def test_a_prompt_that_never_fits_ends_its_stream_with_the_message_and_cancels():
    # Two pages of 16 positions: a 40-token prompt finds no free page under the fail policy.
    page_bytes = 16 * llmrt.Runtime(TINY, kv_dtype="f32").info().kv_bytes_per_token
    with llmrt.Runtime(TINY, kv_dtype="f32", kv_budget_bytes=2 * page_bytes) as rt:
        with rt.session(max_tokens=2) as s:
            with pytest.raises(llmrt.KvExhaustedError) as ei:
                list(s.stream(list(range(3, 43))))
            assert "needs KV pages for 40 positions" in ei.value.message
            info = s.info()
            assert info.state == "cancelled" and info.num_pages == 0
