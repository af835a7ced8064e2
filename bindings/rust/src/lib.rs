//! Rust binding of llmrt, an embeddable inference runtime for the Kimi K2.x and GLM MoE model
//! families, over its C ABI (`include/llmrt/llmrt.h`).
//!
//! ```no_run
//! use llmrt::{Runtime, RuntimeOptions, Sampling, Tokenizer};
//! let rt = Runtime::new("models/kimi-k2-kjv-tiny", &RuntimeOptions::default())?;
//! let tok = Tokenizer::new("models/kimi-k2-kjv-tiny")?;
//! let text = rt.generate(&tok, "In the beginning", 24, &Sampling::greedy())?;
//! println!("{text}");
//! # Ok::<(), llmrt::Error>(())
//! ```
//!
//! - [`Runtime`] loads a checkpoint; [`Session`]s borrow it and are stepped together.
//!   [`Session::stream`] yields tokens with their text; any number of threads may stream their
//!   own sessions at once and share the batched steps. [`Runtime::step`] is there for hosts that
//!   drive the loop themselves.
//! - Every failure is an [`Error`] with the library's [`Status`] and message, read through the
//!   per-handle error records, so it is right whatever thread the call ran on.
//! - Every handle is released in `Drop`, exactly once.
//! - [`sys`] declares the C ABI by hand; `tests/layout.rs` checks it against the header's
//!   manifest.

pub mod sys;

mod comm_id;
mod error;
mod log;
mod options;
mod runtime;
mod tokenizer;
mod tracker;

pub use comm_id::CommId;
pub use error::{Error, Result, Status};
pub use log::{reset_log_callback, set_log_callback, LogLevel};
pub use options::{
    Activations, Backend, FinishReason, KvDtype, KvPressure, RuntimeInfo, RuntimeOptions, Sampling, SessionInfo, SessionState,
    WeightMemory, Weights,
};
pub use runtime::{chat_prompt, model_kv_sizing, Chunk, KvSizing, Runtime, Session, StepResult, TokenStream};
pub use tokenizer::{ChatMessage, Detokenizer, Tokenizer, TokenizerFamily, TokenizerInfo};
pub use tracker::KvTracker;

/// The library's version ("0.1.0"), which may differ from the header this crate was written
/// against (`sys::LLMRT_VERSION_STRING`) within one ABI major version.
pub fn version() -> String {
    // SAFETY: static storage, never NULL.
    unsafe { std::ffi::CStr::from_ptr(sys::llm_version()) }.to_string_lossy().into_owned()
}

/// The library's version as MAJOR * 1000000 + MINOR * 1000 + PATCH.
pub fn version_number() -> u32 {
    // SAFETY: no arguments.
    unsafe { sys::llm_version_number() }
}

/// What the type system refuses, as the header's rules require (these examples must not
/// compile; `cargo test` checks that they do not).
///
/// A session cannot outlive its runtime:
/// ```compile_fail,E0597
/// let s = {
///     let rt = llmrt::Runtime::new("m", &llmrt::RuntimeOptions::default()).unwrap();
///     rt.create_session(&llmrt::Sampling::greedy()).unwrap()
/// };
/// ```
/// A detokenizer cannot outlive its tokenizer:
/// ```compile_fail,E0597
/// let d = {
///     let tok = llmrt::Tokenizer::new("m").unwrap();
///     tok.detokenizer(true).unwrap()
/// };
/// ```
/// A detokenizer is not Sync (one thread at a time):
/// ```compile_fail,E0277
/// fn sync<T: Sync>() {}
/// sync::<llmrt::Detokenizer<'static>>();
/// ```
/// The same checks with what is allowed, so that the examples above fail for their stated reason:
/// ```no_run
/// fn sync<T: Sync>() {}
/// fn send<T: Send>() {}
/// sync::<llmrt::Session<'static>>();
/// send::<llmrt::Detokenizer<'static>>();
/// let rt = llmrt::Runtime::new("m", &llmrt::RuntimeOptions::default()).unwrap();
/// let tok = llmrt::Tokenizer::new("m").unwrap();
/// let s = rt.create_session(&llmrt::Sampling::greedy()).unwrap();
/// let d = tok.detokenizer(true).unwrap();
/// drop((s, d));
/// ```
pub mod compile_checks {}
