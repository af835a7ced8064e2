"""A library handle that is released exactly once, never while a call on it is in flight."""

import threading

from . import errors

# Set while a KV tracker callback runs on this thread: the library holds the runtime's lock
# then, so a call back into it (or a close() that waits for the step) would deadlock.
_callback_state = threading.local()


def in_callback():
    return getattr(_callback_state, "depth", 0) > 0


# Handles the garbage collector finalized inside a tracker callback, where they cannot be
# destroyed (the runtime is locked): destroyed by the next acquire outside a callback.
_deferred = []
_deferred_lock = threading.Lock()


def _destroy_deferred():
    with _deferred_lock:
        handles = _deferred[:]
        del _deferred[:]
    for h in handles:
        h.close()


class Handle:
    """Owns one pointer from the library.

    Calls bracket themselves with acquire() / release(); close() marks the handle closed (later
    acquires raise InvalidStateError instead of passing a dangling pointer to C), waits for the
    calls in flight and destroys it once. A child (a session, a detokenizer) holds its parent,
    so the parent is never destroyed by the garbage collector first, and a call on the child
    counts as a call on the parent: closing a runtime waits for calls on its sessions.

    Handles never reference the Python objects that wrap them, so they are never part of a
    reference cycle and __del__ releases them in dependency order."""

    __slots__ = ("_ptr", "_kind", "_destroy", "_parent", "_cv", "_users", "_closed", "__weakref__")

    def __init__(self, ptr, kind, destroy, parent=None):
        self._ptr = ptr
        self._kind = kind
        self._destroy = destroy
        self._parent = parent
        self._cv = threading.Condition(threading.Lock())
        self._users = 0
        self._closed = False

    @property
    def closed(self):
        return self._closed

    @property
    def kind(self):
        return self._kind

    def acquire(self):
        if in_callback():
            raise errors.binding_error(errors.Status.INVALID_STATE,
                                       f"a KV tracker callback may not use the {self._kind} (the runtime is locked)")
        if _deferred:
            _destroy_deferred()
        if self._parent is not None:
            self._parent.acquire()
        try:
            with self._cv:
                if self._closed:
                    raise errors.binding_error(errors.Status.INVALID_STATE, f"the {self._kind} is closed")
                self._users += 1
                return self._ptr
        except BaseException:
            if self._parent is not None:
                self._parent.release()
            raise

    def release(self):
        with self._cv:
            self._users -= 1
            if self._users == 0:
                self._cv.notify_all()
        if self._parent is not None:
            self._parent.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    def close(self, destroy=True, before_destroy=None, parent_closing=False):
        """Returns False when it was closed already. destroy=False only marks it closed (its
        owner destroys it, as llm_runtime_destroy does with the sessions still alive).
        before_destroy runs after the calls in flight returned and before the pointer is freed.
        parent_closing: called from the parent's before_destroy, so the parent is still alive
        and no call on it is in flight."""
        if in_callback():
            raise errors.binding_error(errors.Status.INVALID_STATE,
                                       f"a KV tracker callback may not close the {self._kind}")
        with self._cv:
            if self._closed:
                return False
            self._closed = True
            while self._users:
                self._cv.wait()
        ptr, self._ptr = self._ptr, None
        if before_destroy is not None:
            before_destroy()
        if destroy and ptr:
            if self._parent is None or parent_closing:
                self._destroy(ptr)
            else:
                try:
                    self._parent.acquire()
                except errors.InvalidStateError:
                    return True  # the parent is closed: it destroyed (or destroys) its children
                try:
                    self._destroy(ptr)
                finally:
                    self._parent.release()
        return True

    def __del__(self):
        if in_callback():
            with _deferred_lock:
                _deferred.append(self)  # kept alive until it can be destroyed
            return
        try:
            self.close()
        except Exception:
            pass  # interpreter shutdown
