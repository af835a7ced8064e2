//! Error paths: each failure carries its status and the library's message naming the thing at
//! fault, read through the per-handle records.

mod common;

use common::*;
use llmrt::{Error, Runtime, RuntimeOptions, Sampling, Status, Tokenizer};

#[test]
fn missing_model_directory_is_not_found_naming_it() {
    let dir = "/nonexistent/llmrt-rust-test/model";
    let err = Runtime::new(dir, &RuntimeOptions::default()).err().expect("loading a missing directory fails");
    assert_eq!(err.status, Status::NotFound);
    assert!(err.message.contains(dir), "message {:?} names {dir}", err.message);
    // Display: the status name and the message; and it is a std error.
    let shown = err.to_string();
    assert!(shown.starts_with("LLM_ERR_NOT_FOUND: "), "{shown}");
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    assert!(boxed.to_string().contains(dir));

    let err = Tokenizer::new(dir).err().expect("a missing tokenizer directory fails");
    assert_eq!(err.status, Status::NotFound);
    assert!(err.message.contains(dir), "{}", err.message);
}

#[test]
fn creation_errors_on_many_threads_are_each_their_own() {
    // Errors of creation come through the error-out parameter: each thread sees its own path.
    std::thread::scope(|scope| {
        for i in 0..4 {
            scope.spawn(move || {
                let dir = format!("/nonexistent/llmrt-rust-test/thread-{i}");
                let err = Runtime::new(&dir, &RuntimeOptions::default()).err().unwrap();
                assert_eq!(err.status, Status::NotFound);
                assert!(err.message.contains(&dir), "{}", err.message);
            });
        }
    });
}

#[test]
fn out_of_range_token_is_invalid_argument_on_the_session() {
    let rt = tiny_runtime();
    let vocab = rt.info().unwrap().vocab_size as i32;
    let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(2)).unwrap();
    let err = s.append_tokens(&[1, vocab + 7]).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains(&(vocab + 7).to_string()), "message {:?} names the id", err.message);
    let err = s.append_tokens(&[-3]).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    // Nothing was queued: the session is still idle and has nothing to report.
    assert_eq!(s.info().unwrap().num_pending, 0);
    assert_eq!(s.next_result().unwrap(), None);
    // The session still works.
    s.append_tokens(&TINY_PROMPT).unwrap();
    assert_eq!(pull_tokens(&s), TINY_GOLDEN[..2]);
}

#[test]
fn session_error_read_on_another_thread_than_the_failure() {
    // The message is recorded on the session, not on the failing thread.
    let rt = tiny_runtime();
    let s = rt.create_session(&Sampling::greedy()).unwrap();
    let status =
        std::thread::scope(|scope| scope.spawn(|| s.append_tokens(&[1 << 30]).unwrap_err().status).join().unwrap());
    assert_eq!(status, Status::InvalidArgument);
    let mut record = llmrt::sys::llm_error {
        struct_size: std::mem::size_of::<llmrt::sys::llm_error>() as u32,
        status: 0,
        message: [0; llmrt::sys::LLM_ERROR_MESSAGE_CAPACITY],
    };
    // SAFETY: a live session and a record sized for the call.
    let code = unsafe { llmrt::sys::llm_session_last_error(s.as_ptr(), &mut record) };
    assert_eq!(code, llmrt::sys::LLM_OK);
    assert_eq!(record.status, llmrt::sys::LLM_ERR_INVALID_ARGUMENT);
}

#[test]
fn invalid_text_and_paths_are_refused_before_the_library() {
    let err = Runtime::new("models/with\0nul", &RuntimeOptions::default()).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("NUL"), "{}", err.message);
    let tok = Tokenizer::new(kjv_model()).unwrap();
    assert_eq!(tok.special_id("a\0b").unwrap_err().status, Status::InvalidArgument);
    // A bad id given to decode is the library's INVALID_ARGUMENT, with its message.
    let err = tok.decode(&[-5], false).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(!err.message.is_empty());
}

#[test]
fn bad_runtime_options_fail_with_their_status() {
    // A KV budget too small for one page is refused with a message; nothing leaks.
    let opts = RuntimeOptions { kv_budget_bytes: u64::MAX, ..RuntimeOptions::default() };
    let err: Error = Runtime::new(tiny_model(), &opts).err().expect("an impossible budget fails");
    assert!(matches!(err.status, Status::OutOfRange | Status::OutOfMemory), "{err}");
    assert!(!err.message.is_empty());
}

#[test]
fn empty_prompt_is_refused() {
    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let err = rt.generate(&tok, "", 4, &Sampling::greedy()).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
}
