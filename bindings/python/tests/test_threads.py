"""Many sessions streamed together from Python threads, each getting exactly its solo tokens.

ctypes releases the GIL during foreign calls, so the threads really run in parallel; the
Runtime's per-session result queues mean whichever thread runs a step, no result is lost."""

import threading

import llmrt
from conftest import KJV, TINY

PROMPTS = ["In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the",
           "And it came to pass", "For God so loved", "Then said Jesus", "Behold, I"]
# Different lengths, so sessions finish at different steps while others still run.
LENGTHS = [24, 17, 30, 9, 21, 14, 27, 12]
SAMPLING = [dict(), dict(temperature=0.8, seed=7), dict(), dict(temperature=1.0, top_p=0.9, seed=3),
            dict(), dict(temperature=0.7, top_k=20, seed=11), dict(), dict(temperature=0.9, min_p=0.05, seed=5)]


def solo_runs(rt):
    tok = rt.tokenizer
    out = []
    for p, n, smp in zip(PROMPTS, LENGTHS, SAMPLING):
        with rt.session(max_tokens=n, **smp) as s:
            out.append(s.generate(tok.encode(p)))
    return out


def run_threads(rt, n_threads, body):
    barrier = threading.Barrier(n_threads)
    errors = []

    def wrap(i):
        try:
            barrier.wait(30)
            body(i)
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def test_eight_threads_match_solo():
    with llmrt.Runtime(KJV) as rt:
        tok = rt.tokenizer
        alone = solo_runs(rt)
        assert all(len(a) == n for a, n in zip(alone, LENGTHS))
        steps_before = rt.steps_run
        got = [None] * len(PROMPTS)
        texts = [None] * len(PROMPTS)

        def body(i):
            with rt.session(max_tokens=LENGTHS[i], **SAMPLING[i]) as s:
                stream = s.stream(tok.encode(PROMPTS[i]))
                toks = list(stream)
                assert stream.finish_reason == "length"
                got[i] = [t.id for t in toks]
                texts[i] = "".join(t.text for t in toks)

        run_threads(rt, len(PROMPTS), body)
        assert got == alone
        assert texts == [tok.decode(a, skip_special=True) for a in alone]
        # The sessions were batched: some step returned results for several of them, and the
        # whole run took fewer steps than the sessions would one after another.
        assert rt.max_results_per_step >= 2
        assert rt.steps_run - steps_before < sum(LENGTHS)
        info = rt.info()
        assert info.pages_free == info.pages_total and info.num_sessions == 0


def test_threads_with_a_host_driven_session():
    """Streams in threads while the main thread drives another session with Runtime.step()."""
    with llmrt.Runtime(KJV) as rt:
        tok = rt.tokenizer
        alone = solo_runs(rt)
        host_alone = rt.session(max_tokens=40).generate(tok.encode("And the earth"))
        got = [None] * 4
        host = rt.session(max_tokens=40)
        host.append(tok.encode("And the earth"))
        go = threading.Event()

        def body(i):
            go.wait(30)
            with rt.session(max_tokens=LENGTHS[i], **SAMPLING[i]) as s:
                got[i] = [t.id for t in s.stream(tok.encode(PROMPTS[i]))]

        threads = [threading.Thread(target=body, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        go.set()
        host_ids, reason = [], None
        while reason is None:
            for r in rt.step():  # only the host's session: the others belong to their streams
                assert r.session_id == host.id and r.status == llmrt.Status.OK
                if r.token >= 0:
                    host_ids.append(r.token)
                reason = r.finish_reason
        for t in threads:
            t.join(120)
        assert host_ids == host_alone and reason == "length"
        assert got == alone[:4]
        host.close()


def test_sessions_churned_while_others_stream():
    with llmrt.Runtime(KJV, max_sessions=64) as rt:
        tok = rt.tokenizer
        alone = solo_runs(rt)
        got = [None] * 4
        stop = threading.Event()

        def streamer(i):
            with rt.session(max_tokens=LENGTHS[i], **SAMPLING[i]) as s:
                got[i] = [t.id for t in s.stream(tok.encode(PROMPTS[i]))]

        def churner(i):
            n = 0
            while not stop.is_set() and n < 200:
                s = rt.session(max_tokens=2)
                if n % 3 == 0:
                    s.append(tok.encode("Amen"))
                if n % 2 == 0:
                    s.cancel()
                s.close()
                n += 1

        def run_all(i):
            if i >= 4:
                churner(i)
                return
            streamer(i)
            if all(g is not None for g in got):
                stop.set()

        run_threads(rt, 6, run_all)
        assert got == alone[:4]
        info = rt.info()
        assert info.pages_free == info.pages_total and info.num_sessions == 0


def test_closing_the_runtime_ends_streams_in_other_threads():
    rt = llmrt.Runtime(KJV)
    tok = rt.tokenizer
    started = threading.Barrier(5)
    outcomes = []

    def body(i):
        s = rt.session(max_tokens=0)
        n = 0
        try:
            for _ in s.stream(tok.encode(PROMPTS[i])):
                n += 1
                if n == 2:
                    started.wait(30)
            outcomes.append(("ended", n))
        except llmrt.InvalidStateError as e:
            outcomes.append(("closed", str(e)))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait(30)
    rt.close()  # waits for the step in flight, then every stream's next call fails cleanly
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(outcomes) == 4 and all(kind == "closed" for kind, _ in outcomes), outcomes


def test_a_session_collected_while_this_thread_holds_the_queue_lock():
    # A garbage collection can run anywhere, also inside the runtime's own locked sections: the
    # collected session's queue is dropped later, not under a lock this thread already holds.
    import gc
    with llmrt.Runtime(TINY, kv_dtype="f32") as rt:
        s = rt.session(max_tokens=1)
        sid = s.id
        s.cycle = s  # only the collector frees it
        del s
        with rt._qlock:
            gc.collect()
        assert sid in rt._queues  # still there: dropped at the next locked section
        rt.step()
        assert sid not in rt._queues
