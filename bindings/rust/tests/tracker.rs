//! The KV tracker as a trait object: events arrive, a veto aborts that session alone, and the
//! runtime drops the tracker exactly once (when it is dropped, or at once when loading fails).

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use llmrt::{FinishReason, KvTracker, Runtime, Sampling, Status};

#[derive(Default)]
struct Counts {
    alloc: AtomicUsize,
    free: AtomicUsize,
    verify: AtomicUsize,
    drops: AtomicUsize,
    // Panics inside callbacks are caught at the boundary, so the checks count instead.
    double_allocs: AtomicUsize,
    live_pages: Mutex<HashSet<(u64, u32)>>,
    veto: Mutex<HashSet<u64>>,
    panic_in_verify: Mutex<HashSet<u64>>,
}

struct Recorder(Arc<Counts>);

impl KvTracker for Recorder {
    fn on_alloc(&self, session_id: u64, page: u32, _tag: u64) {
        self.0.alloc.fetch_add(1, Ordering::SeqCst);
        if !self.0.live_pages.lock().unwrap().insert((session_id, page)) {
            self.0.double_allocs.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn on_free(&self, session_id: u64, page: u32, _tag: u64) {
        self.0.free.fetch_add(1, Ordering::SeqCst);
        self.0.live_pages.lock().unwrap().remove(&(session_id, page));
    }
    fn on_verify(&self, session_id: u64, pages: &[u32], tags: &[u64]) -> bool {
        self.0.verify.fetch_add(1, Ordering::SeqCst);
        assert_eq!(pages.len(), tags.len());
        if self.0.panic_in_verify.lock().unwrap().contains(&session_id) {
            panic!("a host bug inside on_verify");
        }
        !self.0.veto.lock().unwrap().contains(&session_id)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn events_arrive_and_the_tracker_is_dropped_with_the_runtime() {
    let counts = Arc::new(Counts::default());
    let rt = Runtime::with_tracker(tiny_model(), &f32_kv(), Box::new(Recorder(counts.clone()))).unwrap();
    {
        let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(9)).unwrap();
        s.append_tokens(&TINY_PROMPT).unwrap();
        // Verification on changes no token.
        assert_eq!(pull_tokens(&s), TINY_GOLDEN);
        assert!(counts.alloc.load(Ordering::SeqCst) > 0);
        assert!(counts.verify.load(Ordering::SeqCst) >= TINY_GOLDEN.len());
        assert!(!counts.live_pages.lock().unwrap().is_empty());
    }
    assert_eq!(counts.double_allocs.load(Ordering::SeqCst), 0);
    // Dropping the session freed every page it had.
    assert!(counts.live_pages.lock().unwrap().is_empty());
    assert_eq!(counts.free.load(Ordering::SeqCst), counts.alloc.load(Ordering::SeqCst));
    assert_eq!(counts.drops.load(Ordering::SeqCst), 0, "the runtime still owns the tracker");
    drop(rt);
    assert_eq!(counts.drops.load(Ordering::SeqCst), 1);
    assert_eq!(Arc::strong_count(&counts), 1, "nothing else holds the tracker's state");
}

#[test]
fn the_tracker_is_dropped_once_when_loading_fails() {
    let counts = Arc::new(Counts::default());
    let err = Runtime::with_tracker("/nonexistent/llmrt-rust-test", &f32_kv(), Box::new(Recorder(counts.clone())))
        .err()
        .unwrap();
    assert_eq!(err.status, Status::NotFound);
    assert_eq!(counts.drops.load(Ordering::SeqCst), 1);
    assert_eq!(Arc::strong_count(&counts), 1);

    // Refused by the binding before the library is called (a NUL in the path): dropped too.
    let counts = Arc::new(Counts::default());
    assert!(Runtime::with_tracker("bad\0path", &f32_kv(), Box::new(Recorder(counts.clone()))).is_err());
    assert_eq!(counts.drops.load(Ordering::SeqCst), 1);
    assert_eq!(Arc::strong_count(&counts), 1);
}

#[test]
fn a_veto_aborts_that_session_alone() {
    let counts = Arc::new(Counts::default());
    let rt = Runtime::with_tracker(tiny_model(), &f32_kv(), Box::new(Recorder(counts.clone()))).unwrap();
    let sampling = Sampling::greedy().with_max_new_tokens(9);
    let victim = rt.create_session(&sampling).unwrap();
    let panicky = rt.create_session(&sampling).unwrap();
    let other = rt.create_session(&sampling).unwrap();
    counts.veto.lock().unwrap().insert(victim.id());
    counts.panic_in_verify.lock().unwrap().insert(panicky.id());
    for s in [&victim, &panicky, &other] {
        s.append_tokens(&TINY_PROMPT).unwrap();
    }
    let tok = llmrt::Tokenizer::new(kjv_model()).unwrap(); // any tokenizer: the vetoed stream yields no text
    std::thread::scope(|scope| {
        let o = scope.spawn(|| pull_tokens(&other));
        for s in [&victim, &panicky] {
            let mut stream = s.stream(&tok).unwrap();
            let err = stream.next().expect("one item").unwrap_err();
            assert_eq!(err.status, Status::KvIntegrity, "{err}");
            assert!(stream.next().is_none(), "the stream ends after the abort");
            assert_eq!(stream.finish_reason(), Some(FinishReason::Error));
        }
        assert_eq!(o.join().unwrap(), TINY_GOLDEN);
    });
    assert_eq!(rt.info().unwrap().integrity_violations, 2);
    drop((victim, panicky, other));
    drop(rt);
    assert_eq!(counts.drops.load(Ordering::SeqCst), 1);
}
