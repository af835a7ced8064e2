"""The KV tracker as a Python object: events, veto, violations, and its destroy hook."""

import gc
import threading
import weakref

import pytest

import llmrt
from llmrt import _abi, callbacks
from conftest import GOLDEN_IDS, GOLDEN_PROMPT, KJV, KJV_PROMPT, TINY


class Recorder(llmrt.KvTracker):
    def __init__(self, veto=()):
        self.lock = threading.Lock()
        self.held = {}  # (session, page) -> tag
        self.allocs = self.frees = self.verifies = 0
        self.violations = []
        self.veto = set(veto)
        self.destroyed = 0

    def on_alloc(self, session_id, page, tag):
        with self.lock:
            assert (session_id, page) not in self.held
            self.held[(session_id, page)] = tag
            self.allocs += 1

    def on_free(self, session_id, page, tag):
        with self.lock:
            self.frees += 1
            if session_id:
                assert self.held.pop((session_id, page)) == tag

    def on_verify(self, session_id, pages, tags):
        with self.lock:
            self.verifies += 1
            assert len(pages) == len(tags)
            for p, t in zip(pages, tags):
                assert self.held.get((session_id, p)) == t
        return session_id not in self.veto

    def on_violation(self, session_id, entry, page, expected_tag, actual_tag):
        with self.lock:
            self.violations.append((session_id, entry, page))

    def on_destroy(self):
        self.destroyed += 1


def test_events_follow_the_page_life_cycle_and_destroy_runs_once():
    t = Recorder()
    ref = weakref.ref(t)
    rt = llmrt.Runtime(TINY, kv_dtype="f32", page_size_tokens=4, tracker=t)
    del t
    gc.collect()
    t = ref()
    assert t is not None and callbacks.registered(t)  # the runtime keeps it alive
    with rt.session(max_tokens=len(GOLDEN_IDS)) as s:
        assert s.generate(GOLDEN_PROMPT) == GOLDEN_IDS  # verification changes no token
        assert t.allocs == 4 and t.verifies > 0  # 7 + 9 - 1 positions in pages of 4
    assert t.frees == t.allocs and not t.held
    assert t.destroyed == 0
    rt.close()
    assert t.destroyed == 1 and not callbacks.registered(t)
    rt.close()
    assert t.destroyed == 1
    del t
    gc.collect()
    assert ref() is None  # released once the library let go of it


def test_destroy_runs_when_creation_fails():
    t = Recorder()
    with pytest.raises(llmrt.NotFoundError):
        llmrt.Runtime("/nonexistent/llmrt-model", tracker=t)
    assert t.destroyed == 1 and not callbacks.registered(t)


def test_one_tracker_for_two_runtimes():
    t = Recorder()
    a = llmrt.Runtime(TINY, tracker=t)
    b = llmrt.Runtime(TINY, tracker=t)
    a.close()
    assert t.destroyed == 1 and callbacks.registered(t)
    b.close()
    assert t.destroyed == 2 and not callbacks.registered(t)


def test_only_overridden_events_are_installed():
    class VerifyOnly(llmrt.KvTracker):
        def on_verify(self, session_id, pages, tags):
            return True

    s = callbacks.make_tracker_struct(VerifyOnly())
    try:
        assert s.on_verify and s.destroy
        assert not s.on_alloc and not s.on_free and not s.on_share and not s.on_violation
    finally:
        callbacks._on_tracker_destroy(s.user_data)  # what the library would do


def test_veto_fails_that_session_alone():
    t = Recorder()
    with llmrt.Runtime(KJV, tracker=t) as rt:
        tok = rt.tokenizer
        alone = rt.session(max_tokens=10).generate(tok.encode(KJV_PROMPT))
        a = rt.session(max_tokens=10)
        b = rt.session(max_tokens=10)
        t.veto.add(b.id)
        sa, sb = a.stream(tok.encode(KJV_PROMPT)), b.stream(tok.encode(KJV_PROMPT))
        with pytest.raises(llmrt.KvIntegrityError) as ei:
            next(sb)
        assert ei.value.status == llmrt.Status.KV_INTEGRITY and str(b.id) in ei.value.message
        assert b.info().state == "failed" and b.info().num_pages == 0
        assert [x.id for x in sa] == alone
        assert rt.info().integrity_violations == 1


def test_injected_fault_is_reported_with_its_page():
    t = Recorder()
    with llmrt.Runtime(TINY, kv_dtype="f32", page_size_tokens=4, tracker=t) as rt:
        victim = rt.session(max_tokens=len(GOLDEN_IDS))
        other = rt.session(max_tokens=len(GOLDEN_IDS))
        sv, so = victim.stream(GOLDEN_PROMPT, text=False), other.stream(GOLDEN_PROMPT, text=False)
        got = [next(sv).id, next(sv).id]
        rt._test_control(_abi.LLM_TESTCTL_KV_FREE_MAPPED_PAGE, [victim.id, 1])
        with pytest.raises(llmrt.KvIntegrityError) as ei:
            for x in sv:
                got.append(x.id)
        assert got == GOLDEN_IDS[:2]  # stopped before another token
        assert len(ei.value.failed_pages) == 1 and ei.value.failed_pages == tuple(victim.failed_pages())
        assert t.violations and t.violations[0][0] == victim.id
        assert [x.id for x in so] == GOLDEN_IDS  # the other session is untouched
        victim.close()
        other.close()
        info = rt.info()
        assert info.pages_free == info.pages_total


def test_callbacks_may_not_call_into_the_runtime(capfd):
    class Reentrant(llmrt.KvTracker):
        def __init__(self):
            self.errors = []
            self.rt = None

        def on_alloc(self, session_id, page, tag):
            try:
                self.rt.info()  # would deadlock on the runtime's lock
            except llmrt.InvalidStateError as e:
                self.errors.append(e)

        def on_verify(self, session_id, pages, tags):
            raise RuntimeError("a broken tracker")  # printed; vetoes the session

    t = Reentrant()
    with llmrt.Runtime(TINY, tracker=t) as rt:
        t.rt = rt
        with rt.session(max_tokens=3) as s:
            with pytest.raises(llmrt.KvIntegrityError):
                s.generate(GOLDEN_PROMPT)
    assert t.errors and "callback" in str(t.errors[0])
    assert "a broken tracker" in capfd.readouterr().err


def test_tracker_must_be_a_kv_tracker():
    with pytest.raises(llmrt.InvalidArgumentError):
        llmrt.Runtime(TINY, tracker=object())


def test_a_handle_collected_inside_a_callback_is_destroyed_afterwards():
    class DropsASession(llmrt.KvTracker):
        def __init__(self):
            self.victim = None
            self.dropped = False

        def on_alloc(self, session_id, page, tag):
            if self.victim is not None:
                self.victim = None  # the last reference: collected here, with the runtime locked
                self.dropped = True

    t = DropsASession()
    with llmrt.Runtime(TINY, tracker=t) as rt:
        t.victim = rt.session()
        assert rt.info().num_sessions == 1
        with rt.session(max_tokens=2) as s:
            assert len(s.generate(GOLDEN_PROMPT)) == 2
        assert t.dropped
        assert rt.info().num_sessions == 0  # destroyed by the next call outside the callback
