//! The KV tracker: host callbacks on the KV page life cycle, as a trait object.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::sys;

/// Callbacks on the KV page life cycle of one runtime (`Runtime::with_tracker`). Every method has
/// a default that does nothing (and lets verification pass).
///
/// The runtime calls them from whichever thread is inside the llmrt call that caused the event
/// (a step for alloc, share, verify and violation; a step, a cancel, a session's drop or the
/// runtime's drop for free), while the runtime's lock is held: they must return quickly and must
/// not call into the same runtime. Hence `Send + Sync`. A panic inside a callback does not cross
/// into the library: it is caught, and a panicking `on_verify` vetoes the session.
///
/// The runtime owns the tracker: it is dropped exactly once, when the runtime is dropped (or
/// when creating the runtime fails).
pub trait KvTracker: Send + Sync {
    /// A page was handed to the session with a new tag.
    fn on_alloc(&self, _session_id: u64, _page: u32, _tag: u64) {}
    /// The session released its hold on the page. session_id 0: an orphaned page reclaimed
    /// after an integrity failure.
    fn on_free(&self, _session_id: u64, _page: u32, _tag: u64) {}
    /// `to_session` now shares a prefix page first computed by `from_session` (0 if unknown).
    fn on_share(&self, _from_session: u64, _to_session: u64, _page: u32, _tag: u64) {}
    /// After the tag check of a session passed: true lets it run, false vetoes it (the session is
    /// aborted with `Status::KvIntegrity`). `pages` and `tags` are its page table.
    fn on_verify(&self, _session_id: u64, _pages: &[u32], _tags: &[u64]) -> bool {
        true
    }
    /// Entry `entry` of the session's page table maps `page`, expected `expected_tag`, found
    /// `actual_tag` (0: the page is free).
    fn on_violation(&self, _session_id: u64, _entry: u32, _page: u32, _expected_tag: u64, _actual_tag: u64) {}
}

// The user pointer is a thin pointer to an `Arc<Boxed>`'s contents (a fat pointer does not fit
// in a void*). The library holds one strong count, released by `destroy`; the binding holds
// another until creation returns (see TrackerGuard).
type Boxed = Box<dyn KvTracker>;

unsafe fn tracker<'a>(user: *mut c_void) -> &'a dyn KvTracker {
    // SAFETY (caller): user came from into_raw below and destroy has not run yet: the runtime
    // calls no callback after destroy.
    &**(user as *const Boxed)
}

unsafe extern "C" fn on_alloc(user: *mut c_void, session_id: u64, page: u32, tag: u64) {
    let t = tracker(user);
    let _ = catch_unwind(AssertUnwindSafe(|| t.on_alloc(session_id, page, tag)));
}

unsafe extern "C" fn on_free(user: *mut c_void, session_id: u64, page: u32, tag: u64) {
    let t = tracker(user);
    let _ = catch_unwind(AssertUnwindSafe(|| t.on_free(session_id, page, tag)));
}

unsafe extern "C" fn on_share(user: *mut c_void, from: u64, to: u64, page: u32, tag: u64) {
    let t = tracker(user);
    let _ = catch_unwind(AssertUnwindSafe(|| t.on_share(from, to, page, tag)));
}

unsafe extern "C" fn on_verify(
    user: *mut c_void,
    session_id: u64,
    pages: *const u32,
    tags: *const u64,
    num_pages: usize,
) -> i32 {
    let t = tracker(user);
    // SAFETY: the library passes num_pages entries in each array (NULL only when empty).
    let (pages, tags) = if num_pages == 0 || pages.is_null() || tags.is_null() {
        (&[][..], &[][..])
    } else {
        (std::slice::from_raw_parts(pages, num_pages), std::slice::from_raw_parts(tags, num_pages))
    };
    match catch_unwind(AssertUnwindSafe(|| t.on_verify(session_id, pages, tags))) {
        Ok(true) => 0,
        _ => 1,
    }
}

unsafe extern "C" fn on_violation(
    user: *mut c_void,
    session_id: u64,
    entry: u32,
    page: u32,
    expected: u64,
    actual: u64,
) {
    let t = tracker(user);
    let _ = catch_unwind(AssertUnwindSafe(|| t.on_violation(session_id, entry, page, expected, actual)));
}

unsafe extern "C" fn destroy(user: *mut c_void) {
    // SAFETY: the library calls destroy once, after the last callback; the pointer came from
    // Arc::into_raw in TrackerGuard::new and carries the library's count. A panicking Drop is
    // caught (it must not unwind into C).
    let arc = Arc::from_raw(user as *const Boxed);
    let _ = catch_unwind(AssertUnwindSafe(move || drop(arc)));
}

/// The C struct for a tracker whose ownership passes to the library through
/// llm_runtime_create_v2, and the binding's own reference, kept until the call returns.
///
/// The header says destroy runs at llm_runtime_destroy or when creation fails; the library of
/// this version calls it on failures once it has read the tracker but not when it rejects an
/// option value before that. After a failed creation the binding therefore looks at the count:
/// if the library's reference is still there, the binding releases it. Either way the tracker
/// is dropped exactly once.
pub(crate) struct TrackerGuard {
    pub(crate) raw: sys::llm_kv_tracker,
    ours: Arc<Boxed>,
}

impl TrackerGuard {
    pub(crate) fn new(tracker: Boxed) -> TrackerGuard {
        let ours = Arc::new(tracker);
        let user = Arc::into_raw(Arc::clone(&ours)) as *mut c_void;
        let raw = sys::llm_kv_tracker {
            struct_size: std::mem::size_of::<sys::llm_kv_tracker>() as u32,
            reserved0: 0,
            user_data: user,
            on_alloc: Some(on_alloc),
            on_free: Some(on_free),
            on_share: Some(on_share),
            on_verify: Some(on_verify),
            on_violation: Some(on_violation),
            destroy: Some(destroy),
        };
        TrackerGuard { raw, ours }
    }

    /// Creation succeeded: the runtime owns the tracker now.
    pub(crate) fn created(self) {}

    /// Creation failed: release the library's reference unless destroy already did.
    pub(crate) fn failed(self) {
        if Arc::strong_count(&self.ours) > 1 {
            // SAFETY: the library did not call destroy (the count is still 2) and, creation
            // having failed, holds no copy of the pointer: its count is ours to release.
            unsafe { drop(Arc::from_raw(self.raw.user_data as *const Boxed)) };
        }
    }
}
