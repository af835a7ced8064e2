"""Cancelling a generation from another thread: the stream ends "cancelled", pages come back."""

import threading
import time

import llmrt
from conftest import KJV_PROMPT


def pages_in_use(rt):
    info = rt.info()
    return info.pages_total - info.pages_free


def test_cancel_mid_generation_from_another_thread(kjv):
    tok = kjv.tokenizer
    got_tokens = threading.Event()
    cancelled = threading.Event()
    out = {}
    with kjv.session(max_tokens=0) as s:  # no limit: runs until cancelled or the context ends

        def consume():
            stream = s.stream(tok.encode(KJV_PROMPT))
            ids = []
            for t in stream:
                ids.append(t.id)
                if len(ids) == 5:
                    out["pages_while_running"] = pages_in_use(kjv)
                    got_tokens.set()
                    cancelled.wait(30)
            out["ids"] = ids
            out["reason"] = stream.finish_reason

        consumer = threading.Thread(target=consume)
        consumer.start()
        assert got_tokens.wait(30)
        s.cancel()  # from this thread, while the consumer is inside its generation
        cancelled.set()
        consumer.join(30)
        assert not consumer.is_alive()
        assert out["reason"] == "cancelled"
        assert len(out["ids"]) == 5  # nothing after the cancel
        assert out["pages_while_running"] > 0
        assert pages_in_use(kjv) == 0  # released at cancel, before the session is closed
        assert s.info().state == "cancelled" and s.info().num_pages == 0


def test_cancel_free_running_stream(kjv):
    """A cancel that lands whenever it lands, while the consumer keeps stepping."""
    tok = kjv.tokenizer
    out = {}
    started = threading.Event()
    with kjv.session(max_tokens=0) as s:

        def consume():
            stream = s.stream(tok.encode(KJV_PROMPT))
            n = 0
            for _ in stream:
                n += 1
                started.set()
            out["n"], out["reason"] = n, stream.finish_reason

        consumer = threading.Thread(target=consume)
        consumer.start()
        assert started.wait(30)
        time.sleep(0.02)
        s.cancel()
        consumer.join(30)
        assert not consumer.is_alive()
        assert out["reason"] == "cancelled"
        max_new = kjv.info().max_position_embeddings - len(tok.encode(KJV_PROMPT))
        assert 1 <= out["n"] < max_new
        assert pages_in_use(kjv) == 0


def test_cancel_before_the_first_step(kjv):
    with kjv.session(max_tokens=8) as s:
        s.append(kjv.tokenizer.encode(KJV_PROMPT))
        s.cancel()
        stream = s.stream()
        assert list(stream) == [] and stream.finish_reason == "cancelled"
    assert pages_in_use(kjv) == 0


def test_closing_a_stream_early_cancels_its_generation(kjv):
    with kjv.session(max_tokens=0) as s:
        with s.stream(kjv.tokenizer.encode(KJV_PROMPT)) as stream:
            for i, _ in enumerate(stream):
                if i == 3:
                    break
        assert stream.finish_reason == "cancelled"
        assert s.info().state == "cancelled"
        assert pages_in_use(kjv) == 0
    # The cancel's report is consumed by the next step; the runtime runs on.
    kjv.step()
    assert kjv.generate(KJV_PROMPT, max_tokens=4)


def test_cancel_one_of_many(kjv):
    """A cancelled session ends alone; the others finish with their full output."""
    tok = kjv.tokenizer
    prompt = tok.encode(KJV_PROMPT)
    alone = kjv.session(max_tokens=12).generate(prompt)
    sessions = [kjv.session(max_tokens=12) for _ in range(3)]
    streams = [s.stream(prompt) for s in sessions]
    results = [[] for _ in streams]
    for i in range(12):
        for k, st in enumerate(streams):
            if k == 1 and i == 4:
                sessions[1].cancel()
            t = next(st, None)
            if t is not None:
                results[k].append(t.id)
    assert results[0] == alone and results[2] == alone
    # Tokens computed before the cancel (stream 0's step made the fifth) are still delivered.
    assert results[1] == alone[:5] and streams[1].finish_reason == "cancelled"
    for s in sessions:
        s.close()
