//! Paths and helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use llmrt::{KvDtype, Runtime, RuntimeOptions, Sampling, Session, StepResult};

/// The repository root (the crate lives in bindings/rust).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// The shipped model, trained on the King James Bible.
pub fn kjv_model() -> PathBuf {
    repo().join("models/kimi-k2-kjv-tiny")
}

/// The committed tiny Kimi K2 checkpoint with q LoRA and YaRN, and its golden continuation
/// (from transformers; the C ABI test checks the same ids).
pub fn tiny_model() -> PathBuf {
    repo().join("tests/data/tiny_kimi_k2_qlora_yarn")
}
pub const TINY_PROMPT: [i32; 7] = [0, 17, 42, 99, 3, 250, 7];
pub const TINY_GOLDEN: [i32; 9] = [178, 108, 252, 14, 31, 214, 39, 201, 165];

pub fn f32_kv() -> RuntimeOptions {
    RuntimeOptions { kv_dtype: KvDtype::F32, ..RuntimeOptions::default() }
}

pub fn tiny_runtime() -> Runtime {
    Runtime::new(tiny_model(), &f32_kv()).expect("load the tiny model")
}

/// The tokens of a session's generation, pulled one result at a time.
pub fn pull_tokens(session: &Session<'_>) -> Vec<i32> {
    let mut out = Vec::new();
    while let Some(r) = session.next_result().expect("next result") {
        assert_eq!(r.status, None, "session {} failed: {r:?}", session.id());
        out.extend(r.token);
        if r.finish.is_some() {
            break;
        }
    }
    out
}

/// The tokens `prompt` generates alone in a fresh runtime, by plain steps.
pub fn solo_tokens(model: &std::path::Path, options: &RuntimeOptions, prompt: &[i32], sampling: &Sampling) -> Vec<i32> {
    let rt = Runtime::new(model, options).expect("load");
    let s = rt.create_session(sampling).expect("session");
    s.append_tokens(prompt).expect("append");
    let mut out = Vec::new();
    loop {
        let results: Vec<StepResult> = rt.step().expect("step");
        assert_eq!(results.len(), 1);
        let r = results[0];
        assert_eq!(r.status, None);
        out.extend(r.token);
        if r.finish.is_some() {
            return out;
        }
    }
}
