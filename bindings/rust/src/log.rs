//! The process-wide log callback (llm_set_log_callback_v2).

use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{from_last_error, Result};
use crate::sys;

/// The level of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warning,
    Error,
    /// As a minimum level: nothing is logged.
    Off,
}

impl LogLevel {
    fn raw(self) -> sys::llm_log_level {
        match self {
            LogLevel::Debug => sys::LLM_LOG_DEBUG,
            LogLevel::Info => sys::LLM_LOG_INFO,
            LogLevel::Warning => sys::LLM_LOG_WARNING,
            LogLevel::Error => sys::LLM_LOG_ERROR,
            LogLevel::Off => sys::LLM_LOG_OFF,
        }
    }

    fn from_raw(level: sys::llm_log_level) -> LogLevel {
        match level {
            sys::LLM_LOG_DEBUG => LogLevel::Debug,
            sys::LLM_LOG_INFO => LogLevel::Info,
            sys::LLM_LOG_WARNING => LogLevel::Warning,
            _ => LogLevel::Error,
        }
    }
}

type Callback = Box<dyn Fn(LogLevel, &str) + Send + Sync>;

unsafe extern "C" fn trampoline(user: *mut c_void, level: sys::llm_log_level, message: *const c_char) {
    // SAFETY: user is the Callback installed with it, alive until destroy; message is a
    // NUL-terminated line valid during the call.
    let callback = &*(user as *const Callback);
    let text = if message.is_null() { Default::default() } else { CStr::from_ptr(message).to_string_lossy() };
    let _ = catch_unwind(AssertUnwindSafe(|| callback(LogLevel::from_raw(level), &text)));
}

unsafe extern "C" fn destroy(user: *mut c_void) {
    // SAFETY: called once by the library when a later call replaces this callback.
    let callback = Box::from_raw(user as *mut Callback);
    let _ = catch_unwind(AssertUnwindSafe(move || drop(callback)));
}

/// Routes the library's log lines at or above `min_level` to `callback`, process-wide. The
/// library owns the callback from then on and drops it when a later `set_log_callback` or
/// `reset_log_callback` replaces it (after its last call has returned). It may be called from
/// any thread that calls into llmrt; calls are serialized.
pub fn set_log_callback<F>(min_level: LogLevel, callback: F) -> Result<()>
where
    F: Fn(LogLevel, &str) + Send + Sync + 'static,
{
    let boxed: Callback = Box::new(callback);
    let user = Box::into_raw(Box::new(boxed)) as *mut c_void;
    // SAFETY: trampoline and destroy match the header's signatures; user stays valid until
    // destroy.
    let code = unsafe { sys::llm_set_log_callback_v2(Some(trampoline), user, min_level.raw(), Some(destroy)) };
    if code != sys::LLM_OK {
        // On failure nothing changed and destroy is not called: the callback is still ours.
        // SAFETY: user came from Box::into_raw above and the library did not keep it.
        drop(unsafe { Box::from_raw(user as *mut Callback) });
        return Err(from_last_error(code));
    }
    Ok(())
}

/// Restores the default (stderr from `LogLevel::Info` up), dropping the installed callback.
pub fn reset_log_callback() -> Result<()> {
    // SAFETY: fn NULL restores stderr; user and destroy are ignored.
    let code = unsafe { sys::llm_set_log_callback_v2(None, std::ptr::null_mut(), sys::LLM_LOG_INFO, None) };
    if code != sys::LLM_OK {
        return Err(from_last_error(code));
    }
    Ok(())
}
