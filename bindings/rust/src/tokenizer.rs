//! `Tokenizer` (immutable, shared across threads) and `Detokenizer` (incremental, for streaming).

use std::ffi::{c_char, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{empty_record, Error, Result};
use crate::sys;

/// The tokenizer file format of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerFamily {
    /// Kimi's tiktoken.model.
    Kimi,
    /// GLM's tokenizer.json.
    Glm,
    /// A family this binding does not know (from a newer library).
    Other(i32),
}

/// What `Tokenizer::info` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenizerInfo {
    pub family: TokenizerFamily,
    /// The tokenizer's ids including special tokens (config.json's vocab_size may be larger).
    pub vocab_size: u32,
    pub bos_id: Option<i32>,
    pub eos_id: Option<i32>,
}

/// One message of a conversation for `Tokenizer::apply_chat_template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// "system", "user", "assistant" (Kimi: "tool"; GLM: "observation").
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }
}

/// A checkpoint's tokenizer (tiktoken.model or tokenizer.json), loaded on its own.
///
/// Send + Sync: the header makes a tokenizer immutable after creation, and every function taking
/// a `const llm_tokenizer*` thread-safe.
pub struct Tokenizer {
    raw: NonNull<sys::llm_tokenizer>,
}

// SAFETY: see the type's comment; llm_tokenizer_destroy runs in Drop, with no borrow alive.
unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

/// A path as the C string the library takes; a path with a NUL byte cannot name a file.
pub(crate) fn path_cstring(path: &Path, what: &str) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid_argument(format!("{what} {:?} contains a NUL byte", path)))
}

fn text_cstring(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::invalid_argument(format!("{what} {text:?} contains a NUL byte")))
}

impl Tokenizer {
    /// Loads the tokenizer of the checkpoint directory `model_dir`.
    pub fn new(model_dir: impl AsRef<Path>) -> Result<Tokenizer> {
        let dir = path_cstring(model_dir.as_ref(), "model directory")?;
        let mut raw = ptr::null_mut();
        let mut record = empty_record();
        // SAFETY: dir is NUL-terminated; raw and record are valid for writes.
        let code = unsafe { sys::llm_tokenizer_create_v2(dir.as_ptr(), &mut raw, &mut record) };
        if code != sys::LLM_OK {
            return Err(Error::from_record(code, &record));
        }
        NonNull::new(raw)
            .map(|raw| Tokenizer { raw })
            .ok_or_else(|| Error::new(crate::Status::Internal, "llm_tokenizer_create_v2 returned no tokenizer"))
    }

    /// The raw handle, for calls this crate does not wrap. It stays owned by the Tokenizer.
    pub fn as_ptr(&self) -> *const sys::llm_tokenizer {
        self.raw.as_ptr()
    }

    fn error(&self, code: sys::llm_status) -> Error {
        let mut record = empty_record();
        // SAFETY: self.raw is a live tokenizer; record is valid for writes.
        unsafe { sys::llm_tokenizer_last_error(self.raw.as_ptr(), &mut record) };
        Error::from_record(code, &record)
    }

    fn check(&self, code: sys::llm_status) -> Result<()> {
        if code == sys::LLM_OK {
            Ok(())
        } else {
            Err(self.error(code))
        }
    }

    pub fn info(&self) -> Result<TokenizerInfo> {
        let mut info = sys::llm_tokenizer_info {
            struct_size: std::mem::size_of::<sys::llm_tokenizer_info>() as u32,
            family: 0,
            vocab_size: 0,
            bos_id: -1,
            eos_id: -1,
        };
        // SAFETY: live tokenizer; info is valid for writes with struct_size set.
        self.check(unsafe { sys::llm_tokenizer_get_info(self.raw.as_ptr(), &mut info) })?;
        Ok(TokenizerInfo {
            family: match info.family {
                sys::LLM_TOKENIZER_KIMI => TokenizerFamily::Kimi,
                sys::LLM_TOKENIZER_GLM => TokenizerFamily::Glm,
                other => TokenizerFamily::Other(other),
            },
            vocab_size: info.vocab_size,
            bos_id: (info.bos_id >= 0).then_some(info.bos_id),
            eos_id: (info.eos_id >= 0).then_some(info.eos_id),
        })
    }

    /// Encodes `text`. `parse_special`: special tokens written in the text ("<|im_end|>") become
    /// their ids; false encodes them as plain text (use it for untrusted text).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<i32>> {
        let mut ids = vec![0i32; text.len() + 1];
        loop {
            let mut n = 0usize;
            // SAFETY: text is valid for text.len() bytes; ids for ids.len() entries.
            let code = unsafe {
                sys::llm_tokenize(
                    self.raw.as_ptr(),
                    text.as_ptr() as *const c_char,
                    text.len(),
                    parse_special as i32,
                    ids.as_mut_ptr(),
                    ids.len(),
                    &mut n,
                )
            };
            if code == sys::LLM_ERR_BUFFER_TOO_SMALL && n > ids.len() {
                ids.resize(n, 0);
                continue;
            }
            self.check(code)?;
            ids.truncate(n);
            return Ok(ids);
        }
    }

    /// Decodes ids to text; `skip_special` leaves special tokens out. Bytes that do not form
    /// UTF-8 (ids that cut a character) become U+FFFD.
    pub fn decode(&self, ids: &[i32], skip_special: bool) -> Result<String> {
        read_text(|buf, cap, len| {
            // SAFETY: ids is valid for ids.len() entries; buf for cap bytes.
            let code = unsafe {
                sys::llm_detokenize(self.raw.as_ptr(), ids.as_ptr(), ids.len(), skip_special as i32, buf, cap, len)
            };
            self.check(code)
        })
    }

    /// The id of a special token by its text ("<|im_end|>"); `None` when the tokenizer has none.
    pub fn special_id(&self, text: &str) -> Result<Option<i32>> {
        let c = text_cstring(text, "special token")?;
        let mut id = -1;
        // SAFETY: c is NUL-terminated; id is valid for writes.
        match unsafe { sys::llm_tokenizer_special_id(self.raw.as_ptr(), c.as_ptr(), &mut id) } {
            sys::LLM_OK => Ok(Some(id)),
            sys::LLM_ERR_NOT_FOUND => Ok(None),
            code => Err(self.error(code)),
        }
    }

    /// Renders `messages` in the family's chat format; encode the result with
    /// `parse_special = true`. Content is inserted as is (see the header on untrusted content).
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String> {
        let mut owned = Vec::with_capacity(messages.len());
        for m in messages {
            owned.push((text_cstring(&m.role, "chat role")?, text_cstring(&m.content, "chat message")?));
        }
        let raw: Vec<sys::llm_chat_message> =
            owned.iter().map(|(r, c)| sys::llm_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
        read_text(|buf, cap, len| {
            // SAFETY: raw holds raw.len() messages whose strings live in `owned`; buf has cap bytes.
            let code = unsafe {
                sys::llm_chat_apply_template(
                    self.raw.as_ptr(),
                    raw.as_ptr(),
                    raw.len(),
                    add_generation_prompt as i32,
                    enable_thinking as i32,
                    buf,
                    cap,
                    len,
                )
            };
            self.check(code)
        })
    }

    /// The tokens that end an assistant turn: the eos id and, where the tokenizer has them,
    /// `<|im_end|>` (Kimi) and `<|user|>`, `<|observation|>`, `<|endoftext|>` (GLM).
    pub fn chat_stop_tokens(&self) -> Result<Vec<i32>> {
        let mut stops = Vec::new();
        if let Some(eos) = self.info()?.eos_id {
            stops.push(eos);
        }
        for s in ["<|im_end|>", "<|user|>", "<|observation|>", "<|endoftext|>"] {
            if let Some(id) = self.special_id(s)? {
                if !stops.contains(&id) {
                    stops.push(id);
                }
            }
        }
        Ok(stops)
    }

    /// An incremental detokenizer over this tokenizer.
    pub fn detokenizer(&self, skip_special: bool) -> Result<Detokenizer<'_>> {
        let mut raw = ptr::null_mut();
        // SAFETY: live tokenizer; raw is valid for writes. The detokenizer borrows self, so the
        // tokenizer outlives it as the header requires.
        self.check(unsafe { sys::llm_detokenizer_create(self.raw.as_ptr(), skip_special as i32, &mut raw) })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::new(crate::Status::Internal, "llm_detokenizer_create returned no detokenizer"))?;
        Ok(Detokenizer { raw, _tokenizer: PhantomData })
    }
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        // SAFETY: created by llm_tokenizer_create_v2, destroyed exactly once; no detokenizer is
        // alive (they borrow the tokenizer).
        unsafe { sys::llm_tokenizer_destroy(self.raw.as_ptr()) }
    }
}

/// Reads a text output through the header's buffer protocol: a first call into a small buffer,
/// and on LLM_ERR_BUFFER_TOO_SMALL (which reports the length) a second one into one that fits.
fn read_text(mut call: impl FnMut(*mut c_char, usize, &mut usize) -> Result<()>) -> Result<String> {
    let mut buf = vec![0u8; 256];
    loop {
        let mut len = 0usize;
        match call(buf.as_mut_ptr() as *mut c_char, buf.len(), &mut len) {
            Ok(()) => {
                buf.truncate(len.min(buf.len()));
                return Ok(
                    String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
                );
            }
            Err(e) if e.status == crate::Status::BufferTooSmall && len + 1 > buf.len() => buf.resize(len + 1, 0),
            Err(e) => return Err(e),
        }
    }
}

/// Incremental detokenization for streaming: text comes out in whole UTF-8 characters only.
///
/// Send, not Sync: the header allows one thread at a time per detokenizer; `push` and `flush`
/// take `&mut self`, so moving it between threads is fine and sharing it is not.
pub struct Detokenizer<'tok> {
    raw: NonNull<sys::llm_detokenizer>,
    _tokenizer: PhantomData<&'tok Tokenizer>,
}

// SAFETY: see the type's comment. The borrowed tokenizer is Sync.
unsafe impl Send for Detokenizer<'_> {}

impl Detokenizer<'_> {
    fn check(&self, code: sys::llm_status) -> Result<()> {
        if code == sys::LLM_OK {
            return Ok(());
        }
        let mut record = empty_record();
        // SAFETY: live detokenizer; record is valid for writes.
        unsafe { sys::llm_detokenizer_last_error(self.raw.as_ptr(), &mut record) };
        Err(Error::from_record(code, &record))
    }

    /// Adds a token and returns the text that is ready (possibly empty: part of a character is
    /// held back until the rest arrives). A bad id is an INVALID_ARGUMENT error and is not taken.
    pub fn push(&mut self, token: i32) -> Result<String> {
        let raw = self.raw.as_ptr();
        let mut first = true;
        read_text(|buf, cap, len| {
            // After BUFFER_TOO_SMALL the token was taken and its text stays ready: fetch it by
            // pushing "no token".
            let t = if first { token } else { sys::LLM_TOKEN_NONE };
            first = false;
            // SAFETY: live detokenizer, used from one thread (&mut self); buf has cap bytes.
            self.check(unsafe { sys::llm_detokenizer_push(raw, t, buf, cap, len) })
        })
    }

    /// Returns what is held back (an incomplete character becomes U+FFFD) and resets.
    pub fn flush(&mut self) -> Result<String> {
        let raw = self.raw.as_ptr();
        read_text(|buf, cap, len| {
            // SAFETY: as in push. A flush that did not fit keeps its text ready and the held-back
            // bytes are already in it, so the second flush returns all of it.
            self.check(unsafe { sys::llm_detokenizer_flush(raw, buf, cap, len) })
        })
    }
}

impl Drop for Detokenizer<'_> {
    fn drop(&mut self) {
        // SAFETY: created by llm_detokenizer_create, destroyed exactly once, before its tokenizer.
        unsafe { sys::llm_detokenizer_destroy(self.raw.as_ptr()) }
    }
}
