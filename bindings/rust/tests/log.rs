//! The process-wide log callback: lines arrive at the closure, and the library drops each
//! closure exactly once when a later call replaces it. (Its own test binary: the callback is
//! process-wide.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use llmrt::{LogLevel, Runtime, RuntimeOptions};

struct DropCounter(Arc<AtomicUsize>);
impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn log_lines_reach_the_closure_which_is_dropped_once() {
    let lines = Arc::new(Mutex::new(Vec::<(LogLevel, String)>::new()));
    let first_drops = Arc::new(AtomicUsize::new(0));
    {
        let (lines, guard) = (lines.clone(), DropCounter(first_drops.clone()));
        llmrt::set_log_callback(LogLevel::Info, move |level, line| {
            let _ = &guard;
            lines.lock().unwrap().push((level, line.to_string()));
        })
        .unwrap();
    }
    // The shipped model's config has no scoring_func: loading it logs a warning naming the file.
    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    drop(rt);
    let got = lines.lock().unwrap().clone();
    assert!(
        got.iter().any(|(level, line)| *level == LogLevel::Warning && line.contains("kimi-k2-kjv-tiny/config.json")),
        "{got:?}"
    );
    assert_eq!(first_drops.load(Ordering::SeqCst), 0);

    // Replacing it drops the first closure; only the second one hears what follows.
    let second_drops = Arc::new(AtomicUsize::new(0));
    let second_lines = Arc::new(AtomicUsize::new(0));
    {
        let (count, guard) = (second_lines.clone(), DropCounter(second_drops.clone()));
        llmrt::set_log_callback(LogLevel::Error, move |_, _| {
            let _ = &guard;
            count.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    assert_eq!(first_drops.load(Ordering::SeqCst), 1);
    let before = lines.lock().unwrap().len();
    drop(Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap());
    assert_eq!(lines.lock().unwrap().len(), before, "the replaced closure is not called");
    assert_eq!(second_lines.load(Ordering::SeqCst), 0, "a warning is below the Error level");

    llmrt::reset_log_callback().unwrap();
    assert_eq!(second_drops.load(Ordering::SeqCst), 1);
    assert_eq!(first_drops.load(Ordering::SeqCst), 1);
    assert_eq!(Arc::strong_count(&lines), 1);
}
