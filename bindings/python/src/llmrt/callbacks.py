"""Host callbacks: the KV tracker and the log sink.

The C function pointers handed to the library are module-level ctypes trampolines that live as
long as the process; the user pointer is a key into a registry holding the Python object. The
library's destroy hook (llm_kv_tracker.destroy, llm_set_log_callback_v2's destroy) removes the
entry, so the object and its callbacks stay alive exactly until the library no longer calls them.
"""

import atexit
import ctypes
import itertools
import sys
import threading
import traceback

from . import _abi
from . import errors
from ._handle import _callback_state

_registry = {}
_registry_lock = threading.Lock()
_keys = itertools.count(1)


def _register(obj):
    with _registry_lock:
        key = next(_keys)
        _registry[key] = obj
        return key


def _lookup(key):
    with _registry_lock:
        return _registry.get(key)


def _unregister(key):
    with _registry_lock:
        return _registry.pop(key, None)


def registered(obj):
    """Whether the library still holds `obj` (a tracker or log function) through its destroy hook."""
    with _registry_lock:
        return any(v is obj for v in _registry.values())


def _report(where):
    # An exception cannot cross into C: print it as Python does for unraisable errors.
    print(f"llmrt: exception in {where}:", file=sys.stderr)
    traceback.print_exc()


class KvTracker:
    """Host callbacks on the KV page life cycle (llm_kv_tracker). Subclass it and override the
    events you want; only overridden methods are handed to the library. Pass the object as
    Runtime(..., tracker=obj): setting a tracker turns page verification on.

    The callbacks run on the thread inside the llmrt call that caused the event, with the
    runtime's lock held: they must return quickly and must not call llmrt on that runtime
    (the binding refuses such calls with InvalidStateError). An exception in a callback is
    printed; in on_verify it vetoes the session.

    The runtime keeps the object alive until it no longer uses it; then on_destroy() runs,
    exactly once per runtime it was given to (runtime close, or a failed Runtime creation)."""

    def on_alloc(self, session_id, page, tag):
        """A page was handed to the session with a new tag."""

    def on_free(self, session_id, page, tag):
        """The session released its hold on the page (session_id 0: an orphan reclaimed)."""

    def on_share(self, from_session, to_session, page, tag):
        """to_session now shares a prefix page first computed by from_session (0 if unknown)."""

    def on_verify(self, session_id, pages, tags):
        """The tag check of the session passed; return True (or None) to let it run, False to
        veto it (the session fails with KvIntegrityError). pages and tags are lists."""
        return True

    def on_violation(self, session_id, entry, page, expected_tag, actual_tag):
        """Entry `entry` of the session's page table maps `page` with an unexpected tag."""

    def on_destroy(self):
        """The runtime no longer uses this tracker."""


def _enter():
    _callback_state.depth = getattr(_callback_state, "depth", 0) + 1


def _leave():
    _callback_state.depth -= 1


@_abi.ON_ALLOC
def _on_alloc(user, session_id, page, tag):
    t = _lookup(user)
    if t is None:
        return
    _enter()
    try:
        t.on_alloc(session_id, page, tag)
    except BaseException:
        _report("KvTracker.on_alloc")
    finally:
        _leave()


@_abi.ON_FREE
def _on_free(user, session_id, page, tag):
    t = _lookup(user)
    if t is None:
        return
    _enter()
    try:
        t.on_free(session_id, page, tag)
    except BaseException:
        _report("KvTracker.on_free")
    finally:
        _leave()


@_abi.ON_SHARE
def _on_share(user, from_session, to_session, page, tag):
    t = _lookup(user)
    if t is None:
        return
    _enter()
    try:
        t.on_share(from_session, to_session, page, tag)
    except BaseException:
        _report("KvTracker.on_share")
    finally:
        _leave()


@_abi.ON_VERIFY
def _on_verify(user, session_id, pages, tags, num_pages):
    t = _lookup(user)
    if t is None:
        return 0
    _enter()
    try:
        ok = t.on_verify(session_id, pages[:num_pages] if num_pages else [], tags[:num_pages] if num_pages else [])
        return 0 if ok is None or ok else 1
    except BaseException:
        _report("KvTracker.on_verify (the session is vetoed)")
        return 1
    finally:
        _leave()


@_abi.ON_VIOLATION
def _on_violation(user, session_id, entry, page, expected_tag, actual_tag):
    t = _lookup(user)
    if t is None:
        return
    _enter()
    try:
        t.on_violation(session_id, entry, page, expected_tag, actual_tag)
    except BaseException:
        _report("KvTracker.on_violation")
    finally:
        _leave()


@_abi.DESTROY_FN
def _on_tracker_destroy(user):
    t = _unregister(user)
    if t is None:
        return
    try:
        t.on_destroy()
    except BaseException:
        _report("KvTracker.on_destroy")


_TRAMPOLINES = (("on_alloc", _on_alloc), ("on_free", _on_free), ("on_share", _on_share),
                ("on_verify", _on_verify), ("on_violation", _on_violation))


def make_tracker_struct(tracker):
    """An llm_kv_tracker for `tracker`, registered until the library calls its destroy hook.
    The caller passes it to llm_runtime_create_v2, which copies it and calls destroy exactly
    once (also when the creation fails)."""
    if not isinstance(tracker, KvTracker):
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                   f"tracker must be an llmrt.KvTracker, not {type(tracker).__name__}")
    s = _abi.llm_kv_tracker()
    s.struct_size = ctypes.sizeof(s)
    for name, fn in _TRAMPOLINES:
        # Only overridden events: the library then skips the calls nobody listens to.
        if getattr(type(tracker), name) is not getattr(KvTracker, name):
            setattr(s, name, fn)
    s.destroy = _on_tracker_destroy
    s.user_data = _register(tracker)
    return s


# ---- log ---------------------------------------------------------------------------------------
LOG_LEVELS = {"debug": _abi.LLM_LOG_DEBUG, "info": _abi.LLM_LOG_INFO, "warning": _abi.LLM_LOG_WARNING,
              "error": _abi.LLM_LOG_ERROR, "off": _abi.LLM_LOG_OFF}


@_abi.LOG_FN
def _on_log(user, level, message):
    fn = _lookup(user)
    if fn is None:
        return
    try:
        fn(level, message.decode("utf-8", "replace") if message else "")
    except BaseException:
        _report("the llmrt log callback")


@_abi.DESTROY_FN
def _on_log_destroy(user):
    _unregister(user)


_log_lock = threading.Lock()
_log_installed = False


@atexit.register
def _restore_stderr_log():
    # The library outlives the interpreter's teardown; it must not call a Python sink then.
    if _log_installed:
        try:
            set_log_callback(None)
        except Exception:
            pass


def set_log_callback(fn, min_level="info"):
    """Routes the library's log lines at or above min_level ("debug", "info", "warning",
    "error", "off" or an LLM_LOG_* number) to fn(level, message); fn None restores stderr.
    Process-wide. fn may be called from any thread that calls into llmrt (calls are serialized)
    and is kept alive until it is replaced."""
    level = LOG_LEVELS.get(min_level, min_level) if isinstance(min_level, str) else min_level
    if not isinstance(level, int):
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"unknown log level {min_level!r}")
    global _log_installed
    lib = _abi.lib()
    with _log_lock:
        if fn is None:
            st = lib.llm_set_log_callback_v2(_abi.LOG_FN(), None, level, _abi.DESTROY_FN())
            key = None
        else:
            if not callable(fn):
                raise errors.binding_error(errors.Status.INVALID_ARGUMENT, "the log callback must be callable")
            key = _register(fn)
            st = lib.llm_set_log_callback_v2(_on_log, key, level, _on_log_destroy)
        if st != _abi.LLM_OK:
            if key is not None:
                _unregister(key)  # on failure the library did not take it
            # No handle to read the message from: this lock keeps the call and the read on one thread.
            raise errors.error_for(st, lib.llm_last_error().decode("utf-8", "replace"))
        _log_installed = key is not None
