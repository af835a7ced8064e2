//! Many sessions streamed together from the host's own threads: each gets exactly the tokens it
//! gets alone, and the steps are shared (batched), not run once per thread.

mod common;

use std::sync::Barrier;

use common::*;
use llmrt::{FinishReason, Runtime, RuntimeOptions, Sampling, Tokenizer};

const PROMPTS: [&str; 8] = [
    "In the beginning",
    "And the LORD said unto Moses",
    "Blessed are the meek",
    "The LORD is my shepherd",
    "And it came to pass",
    "For God so loved the world",
    "Then Jesus answered",
    "Hear, O Israel",
];

#[test]
fn eight_threads_eight_sessions_match_their_solo_runs() {
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let sampling = Sampling::greedy().with_max_new_tokens(16);
    let prompts: Vec<Vec<i32>> = PROMPTS.iter().map(|p| tok.encode(p, false).unwrap()).collect();
    let solo: Vec<(Vec<i32>, String)> = prompts
        .iter()
        .map(|p| {
            let ids = solo_tokens(&kjv_model(), &RuntimeOptions::default(), p, &sampling);
            let text = tok.decode(&ids, true).unwrap();
            (ids, text)
        })
        .collect();

    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let start = Barrier::new(PROMPTS.len());
    let together: Vec<(Vec<i32>, String, Option<FinishReason>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|prompt| {
                let (rt, tok, sampling, start) = (&rt, &tok, &sampling, &start);
                scope.spawn(move || {
                    let s = rt.create_session(sampling).unwrap();
                    s.append_tokens(prompt).unwrap();
                    start.wait();
                    let mut stream = s.stream(tok).unwrap();
                    let mut ids = Vec::new();
                    let mut text = String::new();
                    for chunk in stream.by_ref() {
                        let chunk = chunk.unwrap();
                        ids.extend(chunk.token);
                        text.push_str(&chunk.text);
                    }
                    (ids, text, stream.finish_reason())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = 0;
    for (i, ((ids, text, finish), (solo_ids, solo_text))) in together.iter().zip(&solo).enumerate() {
        assert_eq!(ids, solo_ids, "session {i} ({:?})", PROMPTS[i]);
        assert_eq!(text, solo_text, "session {i}");
        assert_eq!(*finish, Some(FinishReason::Length));
        total += ids.len();
    }
    assert_eq!(total, 8 * 16);
    // Every step advances every session with work, whichever thread runs it: 16 steps (the
    // prefill samples the first token) serve all 128 tokens; one more at most if a thread
    // finds its session not yet finished. Unbatched it would be 8 times that.
    let steps = rt.steps_run();
    eprintln!("8 threads: {steps} steps for {total} tokens");
    assert!(steps <= 17, "{steps} steps for {total} tokens of 8 sessions started together");
    assert_eq!(rt.info().unwrap().num_sessions, 0, "every session was dropped in its thread");
}

#[test]
fn sessions_created_while_others_stream() {
    // Sessions join a runtime whose steps are running on other threads; none loses a result.
    let rt = tiny_runtime();
    let sampling = Sampling::greedy().with_max_new_tokens(9);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (rt, sampling) = (&rt, &sampling);
                scope.spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(3 * i));
                    let s = rt.create_session(sampling).unwrap();
                    s.append_tokens(&TINY_PROMPT).unwrap();
                    pull_tokens(&s)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), TINY_GOLDEN);
        }
    });
}

#[test]
fn plain_steps_drive_many_sessions() {
    // The host drives the loop itself: every result comes back from step().
    let rt = tiny_runtime();
    let sessions: Vec<_> =
        (0..4).map(|_| rt.create_session(&Sampling::greedy().with_max_new_tokens(9)).unwrap()).collect();
    for s in &sessions {
        s.append_tokens(&TINY_PROMPT).unwrap();
    }
    let mut got = vec![Vec::new(); sessions.len()];
    let mut done = 0;
    while done < sessions.len() {
        for r in rt.step().unwrap() {
            let i = sessions.iter().position(|s| s.id() == r.session_id).unwrap();
            got[i].extend(r.token);
            if r.finish.is_some() {
                done += 1;
            }
        }
    }
    for g in got {
        assert_eq!(g, TINY_GOLDEN);
    }
}
