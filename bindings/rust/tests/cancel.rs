//! Cancellation from another thread in the middle of a generation: the stream ends with
//! `FinishReason::Cancelled` and the session's KV pages go back to the pool.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use llmrt::{FinishReason, Runtime, RuntimeOptions, Sampling, SessionState, Tokenizer};

#[test]
fn cancel_while_another_thread_streams() {
    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let info = rt.info().unwrap();
    let pages_total = info.pages_total;
    assert_eq!(info.pages_free, pages_total);
    let prompt = tok.encode("And the LORD said unto Moses", false).unwrap();
    // No limit and no stop token: left alone, it would run until the context (1024) is full.
    let s = rt.create_session(&Sampling::greedy()).unwrap();
    s.append_tokens(&prompt).unwrap();
    let received = AtomicUsize::new(0);
    let (started_tx, started_rx) = mpsc::channel();
    let (finish, tokens, text) = std::thread::scope(|scope| {
        let streamer = scope.spawn(|| {
            let mut stream = s.stream(&tok).unwrap();
            let mut tokens = 0;
            let mut text = String::new();
            for chunk in stream.by_ref() {
                let chunk = chunk.unwrap();
                if chunk.token.is_some() {
                    tokens += 1;
                }
                text.push_str(&chunk.text);
                if received.fetch_add(1, Ordering::SeqCst) == 4 {
                    started_tx.send(()).unwrap();
                }
            }
            (stream.finish_reason(), tokens, text)
        });
        // Cancel while the stream keeps pulling (it does not wait for us).
        started_rx.recv_timeout(Duration::from_secs(60)).expect("the stream produced 5 items");
        s.cancel().unwrap();
        streamer.join().unwrap()
    });
    assert_eq!(finish, Some(FinishReason::Cancelled));
    assert!((5..1000).contains(&tokens), "{tokens} tokens before the cancel took effect");
    assert!(!text.is_empty());
    let si = s.info().unwrap();
    assert_eq!(si.state, SessionState::Cancelled);
    assert_eq!(si.num_pages, 0);
    assert_eq!(rt.info().unwrap().pages_free, pages_total, "the cancelled session's pages are free");
    // Nothing more comes, and a cancelled session takes no new tokens.
    assert_eq!(s.next_result().unwrap(), None);
    assert_eq!(s.append_tokens(&prompt).unwrap_err().status, llmrt::Status::InvalidState);
}

#[test]
fn cancel_one_of_several_streamed_sessions() {
    // The others finish with exactly their solo tokens.
    let rt = tiny_runtime();
    let sampling = Sampling::greedy().with_max_new_tokens(9);
    let victim = rt.create_session(&Sampling::greedy()).unwrap();
    victim.append_tokens(&[3, 4, 5]).unwrap();
    let others: Vec<_> = (0..3).map(|_| rt.create_session(&sampling).unwrap()).collect();
    for o in &others {
        o.append_tokens(&TINY_PROMPT).unwrap();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = others.iter().map(|o| scope.spawn(move || pull_tokens(o))).collect();
        let v = scope.spawn(|| {
            let mut last = None;
            let mut n = 0;
            while let Some(r) = victim.next_result().unwrap() {
                n += 1;
                if n == 3 {
                    victim.cancel().unwrap();
                }
                last = r.finish;
            }
            last
        });
        for h in handles {
            assert_eq!(h.join().unwrap(), TINY_GOLDEN);
        }
        assert_eq!(v.join().unwrap(), Some(FinishReason::Cancelled));
    });
    assert_eq!(victim.info().unwrap().num_pages, 0);
}
