//! `Error` and `Status`: a failed call's llm_status and message.

use std::ffi::{c_char, CStr};
use std::fmt;

use crate::sys;

/// The kind of a failure: the header's `llm_status` codes (except `LLM_OK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// NULL pointer, bad option value, bad token id, a string with an interior NUL.
    InvalidArgument,
    /// Missing directory, file or tensor.
    NotFound,
    /// A file could not be opened, mapped or read.
    Io,
    /// Corrupt, truncated or inconsistent checkpoint data.
    Format,
    /// Unknown architecture, dtype or feature.
    Unsupported,
    /// Host or device allocation failed.
    OutOfMemory,
    /// No free KV page for a session's next tokens.
    KvExhausted,
    /// A session's KV pages failed verification.
    KvIntegrity,
    /// The session was cancelled.
    Cancelled,
    /// The call is not valid in the object's current state.
    InvalidState,
    /// A position, length or limit was exceeded.
    OutOfRange,
    /// An output buffer was too small.
    BufferTooSmall,
    /// A bug in llmrt.
    Internal,
    /// A code this binding does not know (from a newer library).
    Other(i32),
}

impl Status {
    /// The status of a raw code; `None` for `LLM_OK`.
    pub fn from_raw(code: sys::llm_status) -> Option<Status> {
        Some(match code {
            sys::LLM_OK => return None,
            sys::LLM_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::LLM_ERR_NOT_FOUND => Status::NotFound,
            sys::LLM_ERR_IO => Status::Io,
            sys::LLM_ERR_FORMAT => Status::Format,
            sys::LLM_ERR_UNSUPPORTED => Status::Unsupported,
            sys::LLM_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::LLM_ERR_KV_EXHAUSTED => Status::KvExhausted,
            sys::LLM_ERR_KV_INTEGRITY => Status::KvIntegrity,
            sys::LLM_ERR_CANCELLED => Status::Cancelled,
            sys::LLM_ERR_INVALID_STATE => Status::InvalidState,
            sys::LLM_ERR_OUT_OF_RANGE => Status::OutOfRange,
            sys::LLM_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            sys::LLM_ERR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        })
    }

    /// The raw `llm_status` code.
    pub fn code(self) -> sys::llm_status {
        match self {
            Status::InvalidArgument => sys::LLM_ERR_INVALID_ARGUMENT,
            Status::NotFound => sys::LLM_ERR_NOT_FOUND,
            Status::Io => sys::LLM_ERR_IO,
            Status::Format => sys::LLM_ERR_FORMAT,
            Status::Unsupported => sys::LLM_ERR_UNSUPPORTED,
            Status::OutOfMemory => sys::LLM_ERR_OUT_OF_MEMORY,
            Status::KvExhausted => sys::LLM_ERR_KV_EXHAUSTED,
            Status::KvIntegrity => sys::LLM_ERR_KV_INTEGRITY,
            Status::Cancelled => sys::LLM_ERR_CANCELLED,
            Status::InvalidState => sys::LLM_ERR_INVALID_STATE,
            Status::OutOfRange => sys::LLM_ERR_OUT_OF_RANGE,
            Status::BufferTooSmall => sys::LLM_ERR_BUFFER_TOO_SMALL,
            Status::Internal => sys::LLM_ERR_INTERNAL,
            Status::Other(code) => code,
        }
    }

    /// The library's name for the code ("LLM_ERR_NOT_FOUND").
    pub fn name(self) -> String {
        // SAFETY: llm_status_string returns static storage, never NULL, for any code.
        unsafe { CStr::from_ptr(sys::llm_status_string(self.code())) }.to_string_lossy().into_owned()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A failed call: its status and the library's message, which names the thing at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

/// The result of every fallible call of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// An error raised by the binding itself, before any call into the library.
    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidArgument, message)
    }

    /// The error of a call that returned `code`, with the message the library recorded in
    /// `record` (filled by one of the llm_*_last_error functions or an error-out parameter). When
    /// the record holds another failure (a concurrent failure on the same handle replaced it),
    /// the message falls back to the status name rather than reporting someone else's message.
    pub(crate) fn from_record(code: sys::llm_status, record: &sys::llm_error) -> Error {
        let status = Status::from_raw(code).unwrap_or(Status::Internal);
        let message = if record.status == code { message_of(record) } else { String::new() };
        let message = if message.is_empty() { status.name() } else { message };
        Error { status, message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// An `llm_error` ready to be filled (struct_size set, no status).
pub(crate) fn empty_record() -> sys::llm_error {
    sys::llm_error {
        struct_size: std::mem::size_of::<sys::llm_error>() as u32,
        status: sys::LLM_OK,
        message: [0 as c_char; sys::LLM_ERROR_MESSAGE_CAPACITY],
    }
}

fn message_of(record: &sys::llm_error) -> String {
    let bytes: Vec<u8> = record.message.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Errors of calls without a handle (the log callback): the thread's llm_last_error, read on the
/// same OS thread as the failed call (Rust code does not move between threads inside a function).
pub(crate) fn from_last_error(code: sys::llm_status) -> Error {
    let status = Status::from_raw(code).unwrap_or(Status::Internal);
    // SAFETY: llm_last_error never returns NULL; the text is valid until the next call.
    let message = unsafe { CStr::from_ptr(sys::llm_last_error()) }.to_string_lossy().into_owned();
    Error { status, message: if message.is_empty() { status.name() } else { message } }
}
