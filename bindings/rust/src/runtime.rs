//! `Runtime`, `Session<'rt>`, stepping with per-session result queues, and token streams.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::error::{empty_record, from_last_error, Error, Result, Status};
use crate::options::{kv_dtype_raw, FinishReason, KvDtype, RuntimeInfo, RuntimeOptions, Sampling, SessionInfo, SessionState};
use crate::sys;
use crate::tokenizer::{path_cstring, ChatMessage, Detokenizer, Tokenizer};
use crate::tracker::{KvTracker, TrackerGuard};

/// One session's outcome of one step (the header's llm_step_result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepResult {
    pub session_id: u64,
    /// The sampled token; None while the prompt is still being prefilled, or on an error.
    pub token: Option<i32>,
    /// Set on the session's last result of a generation.
    pub finish: Option<FinishReason>,
    /// Why the session did not advance; None when it did.
    pub status: Option<Status>,
    /// Prompt tokens processed for this session in this step.
    pub num_prefilled: u32,
    /// With `Status::KvIntegrity`: the first page that failed.
    pub failed_page: Option<u32>,
    pub num_failed_pages: u32,
}

impl StepResult {
    fn from_raw(r: &sys::llm_step_result) -> StepResult {
        StepResult {
            session_id: r.session_id,
            token: (r.token != sys::LLM_TOKEN_NONE).then_some(r.token),
            finish: FinishReason::from_raw(r.finish_reason),
            status: Status::from_raw(r.status),
            num_prefilled: r.num_prefilled,
            failed_page: u32::try_from(r.failed_page).ok(),
            num_failed_pages: r.num_failed_pages,
        }
    }
}

/// One session's queue of step results not yet taken.
#[derive(Default)]
struct Queue {
    results: VecDeque<StepResult>,
    /// The last result queued ended a generation (no more come until new tokens are appended).
    ended: bool,
}

/// The step coordination shared by the threads that use one runtime.
#[derive(Default)]
struct Steps {
    /// Every live session of this runtime, by id.
    queues: HashMap<u64, Queue>,
    /// A thread is inside llm_decode_step (through this binding).
    stepping: bool,
    /// Steps run through this binding.
    count: u64,
}

/// A loaded model with its KV cache and sessions (llm_runtime).
///
/// Send + Sync: the header lets every function be called from any thread, and calls on one
/// runtime and its sessions concurrently (convention 5). Dropping it needs `&mut` ownership, and
/// every `Session` borrows it, so no call can use it during or after llm_runtime_destroy.
///
/// `llm_decode_step` advances every session of the runtime at once. So that each session can be
/// consumed on its own (`Session::next_result`, `Session::stream`) from any number of threads, the
/// runtime keeps a queue of step results per session: a thread that wants its session's next
/// result and finds its queue empty runs one step (or waits for the step another thread is
/// running) and distributes every result into the queues. Steps are thereby shared: eight
/// threads streaming eight sessions advance together, one batched step at a time.
pub struct Runtime {
    raw: NonNull<sys::llm_runtime>,
    steps: Mutex<Steps>,
    stepped: Condvar,
}

// SAFETY: see the type's comment.
unsafe impl Send for Runtime {}
unsafe impl Sync for Runtime {}

impl Runtime {
    /// Loads the Hugging Face checkpoint in `model_dir`.
    pub fn new(model_dir: impl AsRef<Path>, options: &RuntimeOptions) -> Result<Runtime> {
        Runtime::create(model_dir.as_ref(), options, None)
    }

    /// As `new`, with a host KV tracker (which turns verification on). The runtime owns the
    /// tracker and drops it when it is dropped, or at once when loading fails.
    pub fn with_tracker(
        model_dir: impl AsRef<Path>,
        options: &RuntimeOptions,
        tracker: Box<dyn KvTracker>,
    ) -> Result<Runtime> {
        Runtime::create(model_dir.as_ref(), options, Some(tracker))
    }

    fn create(model_dir: &Path, options: &RuntimeOptions, tracker: Option<Box<dyn KvTracker>>) -> Result<Runtime> {
        // Checked before the tracker changes hands, so that an early return drops it here.
        let dir = path_cstring(model_dir, "model directory")?;
        let mut raw_options = options.to_raw();
        let guard = tracker.map(TrackerGuard::new);
        if let Some(g) = &guard {
            raw_options.tracker = &g.raw;
        }
        let mut raw = ptr::null_mut();
        let mut record = empty_record();
        // SAFETY: every pointer is valid for the call; the library copies the options and the
        // tracker struct.
        let code = unsafe { sys::llm_runtime_create_v2(dir.as_ptr(), &raw_options, &mut raw, &mut record) };
        match (code, NonNull::new(raw)) {
            (sys::LLM_OK, Some(raw)) => {
                if let Some(g) = guard {
                    g.created();
                }
                Ok(Runtime { raw, steps: Mutex::new(Steps::default()), stepped: Condvar::new() })
            }
            _ => {
                if let Some(g) = guard {
                    g.failed();
                }
                if code == sys::LLM_OK {
                    Err(Error::new(Status::Internal, "llm_runtime_create_v2 returned no runtime"))
                } else {
                    Err(Error::from_record(code, &record))
                }
            }
        }
    }

    /// The raw handle, for calls this crate does not wrap. It stays owned by the Runtime.
    pub fn as_ptr(&self) -> *mut sys::llm_runtime {
        self.raw.as_ptr()
    }

    fn error(&self, code: sys::llm_status) -> Error {
        let mut record = empty_record();
        // SAFETY: live runtime; record is valid for writes.
        unsafe { sys::llm_runtime_last_error(self.raw.as_ptr(), &mut record) };
        Error::from_record(code, &record)
    }

    fn check(&self, code: sys::llm_status) -> Result<()> {
        if code == sys::LLM_OK {
            Ok(())
        } else {
            Err(self.error(code))
        }
    }

    fn lock(&self) -> MutexGuard<'_, Steps> {
        // The state stays consistent when a holder panics (every update is a single step).
        self.steps.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn info(&self) -> Result<RuntimeInfo> {
        // SAFETY: all zeros is a valid llm_runtime_info (integers and char arrays).
        let mut info: sys::llm_runtime_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<sys::llm_runtime_info>() as u32;
        // SAFETY: live runtime; info is valid for writes with struct_size set.
        self.check(unsafe { sys::llm_runtime_get_info(self.raw.as_ptr(), &mut info) })?;
        Ok(RuntimeInfo::from(&info))
    }

    /// Creates an empty session that samples as `sampling` says.
    pub fn create_session(&self, sampling: &Sampling) -> Result<Session<'_>> {
        let options = sampling.to_raw();
        let mut raw = ptr::null_mut();
        // SAFETY: live runtime; options (and the stop tokens it points to) are valid for the call.
        self.check(unsafe { sys::llm_session_create(self.raw.as_ptr(), &options, &mut raw) })?;
        let raw =
            NonNull::new(raw).ok_or_else(|| Error::new(Status::Internal, "llm_session_create returned no session"))?;
        self.adopt(raw)
    }

    /// Wraps a session the library created and registers its queue. No step can report it yet:
    /// it has no tokens until the caller appends some (an import registers its queue itself).
    fn adopt(&self, raw: NonNull<sys::llm_session>) -> Result<Session<'_>> {
        let mut session = Session { raw, id: 0, runtime: self };
        session.id = session.info()?.id;
        self.lock().queues.insert(session.id, Queue::default());
        Ok(session)
    }

    /// Runs one step and returns every result, for hosts that drive the loop themselves.
    ///
    /// These results are not queued for `Session::next_result` or streams: use one way or the
    /// other on a runtime (a step that a stream runs, on the other hand, queues the results of
    /// every session, so streams on several threads never lose one another's results).
    pub fn step(&self) -> Result<Vec<StepResult>> {
        let mut steps = self.lock();
        while steps.stepping {
            steps = self.stepped.wait(steps).unwrap_or_else(|e| e.into_inner());
        }
        self.step_and_distribute(steps, false).1
    }

    /// Steps run through this binding so far (both `step` and the streams' steps).
    pub fn steps_run(&self) -> u64 {
        self.lock().count
    }

    /// One llm_decode_step_v2 call, made by step_and_distribute.
    fn raw_step(&self, live_sessions: usize) -> Result<Vec<StepResult>> {
        let mut capacity = live_sessions.max(1);
        loop {
            let mut results = vec![zero_result(); capacity];
            let mut n = 0usize;
            // SAFETY: live runtime; results holds capacity elements of result_size bytes.
            let code = unsafe {
                sys::llm_decode_step_v2(
                    self.raw.as_ptr(),
                    results.as_mut_ptr() as *mut std::ffi::c_void,
                    std::mem::size_of::<sys::llm_step_result>(),
                    capacity,
                    &mut n,
                )
            };
            // Sessions created by other threads since the count was taken: the library says how
            // many there are before doing any work.
            if code == sys::LLM_ERR_BUFFER_TOO_SMALL && n > capacity {
                capacity = n;
                continue;
            }
            self.check(code)?;
            return Ok(results[..n.min(capacity)].iter().map(StepResult::from_raw).collect());
        }
    }

    /// The next result of `session`: from its queue, or by running (or waiting for) a step.
    /// None when the session has nothing more to report.
    fn next_result_of(&self, session: &Session<'_>) -> Result<Option<StepResult>> {
        let id = session.id;
        let mut stepped_while_terminal = false;
        let mut steps = self.lock();
        loop {
            let queue = steps.queues.entry(id).or_default();
            if let Some(r) = queue.results.pop_front() {
                return Ok(Some(r));
            }
            if queue.ended {
                return Ok(None);
            }
            if steps.stepping {
                steps = self.stepped.wait(steps).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // No step is running, so the state is settled, except that a cancel from another
            // thread is reported by the step after it: step once more for a cancelled session.
            match session.info()?.state {
                SessionState::Prefill | SessionState::Decoding => {}
                SessionState::Cancelled if !stepped_while_terminal => stepped_while_terminal = true,
                _ => return Ok(None),
            }
            let (guard, outcome) = self.step_and_distribute(steps, true);
            steps = guard;
            outcome?;
        }
    }

    /// Runs one step with `steps` (held, no step running): marks the step as running, releases
    /// the lock for the step, then, under the lock again, queues every result when `distribute`
    /// (before the waiting threads are woken, so none of them finds its queue empty while its
    /// result is on the way) and clears the mark.
    fn step_and_distribute<'a>(
        &'a self,
        mut steps: MutexGuard<'a, Steps>,
        distribute: bool,
    ) -> (MutexGuard<'a, Steps>, Result<Vec<StepResult>>) {
        steps.stepping = true;
        let capacity = steps.queues.len();
        drop(steps);
        let mut unwind_guard = StepGuard { runtime: self, armed: true };
        let outcome = self.raw_step(capacity);
        let mut steps = self.lock();
        unwind_guard.armed = false;
        if let (true, Ok(results)) = (distribute, &outcome) {
            for r in results {
                // Results of sessions dropped meanwhile have no queue and are discarded.
                if let Some(q) = steps.queues.get_mut(&r.session_id) {
                    q.ended = r.finish.is_some();
                    q.results.push_back(*r);
                }
            }
        }
        steps.stepping = false;
        steps.count += 1;
        self.stepped.notify_all();
        (steps, outcome)
    }

    /// Encodes `prompt` (special-token text stays plain text, no BOS), generates up to
    /// `max_tokens` tokens (0: until a stop token or the context ends) with `sampling`, stopping
    /// also at the tokenizer's eos, and returns the generated text.
    pub fn generate(
        &self,
        tokenizer: &Tokenizer,
        prompt: &str,
        max_tokens: u32,
        sampling: &Sampling,
    ) -> Result<String> {
        let ids = tokenizer.encode(prompt, false)?;
        if ids.is_empty() {
            return Err(Error::invalid_argument("the prompt encodes to no tokens"));
        }
        let mut sampling = sampling.clone();
        sampling.max_new_tokens = max_tokens;
        if let Some(eos) = tokenizer.info()?.eos_id {
            if !sampling.stop_tokens.contains(&eos) {
                sampling.stop_tokens.push(eos);
            }
        }
        self.run_to_text(tokenizer, &ids, &sampling)
    }

    /// Renders `messages` with the chat template (with the assistant opener), generates the
    /// assistant's reply with `sampling` (stopping at the end-of-turn tokens as well) and
    /// returns its text.
    pub fn chat(&self, tokenizer: &Tokenizer, messages: &[ChatMessage], sampling: &Sampling) -> Result<String> {
        let ids = chat_prompt(tokenizer, messages)?;
        let mut sampling = sampling.clone();
        for id in tokenizer.chat_stop_tokens()? {
            if !sampling.stop_tokens.contains(&id) {
                sampling.stop_tokens.push(id);
            }
        }
        self.run_to_text(tokenizer, &ids, &sampling)
    }

    fn run_to_text(&self, tokenizer: &Tokenizer, ids: &[i32], sampling: &Sampling) -> Result<String> {
        let session = self.create_session(sampling)?;
        session.append_tokens(ids)?;
        let mut text = String::new();
        for chunk in session.stream(tokenizer)? {
            text.push_str(&chunk?.text);
        }
        Ok(text)
    }

    /// Teacher-forced scoring: for each position p < n-1, log P(tokens[p+1] | tokens[..=p]) and
    /// the most likely next token.
    pub fn score(&self, tokens: &[i32]) -> Result<(Vec<f32>, Vec<i32>)> {
        if tokens.len() < 2 {
            return Err(Error::invalid_argument(format!("score needs at least 2 tokens, got {}", tokens.len())));
        }
        let mut logprobs = vec![0f32; tokens.len() - 1];
        let mut argmax = vec![0i32; tokens.len() - 1];
        // SAFETY: live runtime; both outputs hold tokens.len() - 1 entries.
        self.check(unsafe {
            sys::llm_score(self.raw.as_ptr(), tokens.as_ptr(), tokens.len(), logprobs.as_mut_ptr(), argmax.as_mut_ptr())
        })?;
        Ok((logprobs, argmax))
    }

    /// Creates a session from `Session::export_kv` of another runtime of the same model.
    pub fn import_kv(&self, blob: &[u8], sampling: &Sampling) -> Result<Session<'_>> {
        self.import(blob, None, sampling)
    }

    /// Creates a session from `Session::export_kv_authenticated` under the same `key`
    /// (llm_session_import_kv_authenticated): trusted like state this runtime computed.
    pub fn import_kv_authenticated(&self, blob: &[u8], key: &[u8], sampling: &Sampling) -> Result<Session<'_>> {
        self.import(blob, Some(key), sampling)
    }

    fn import(&self, blob: &[u8], key: Option<&[u8]>, sampling: &Sampling) -> Result<Session<'_>> {
        let options = sampling.to_raw();
        let mut raw = ptr::null_mut();
        // An imported session is ready to decode, so its queue is registered before any step can
        // report it: steps start under this lock, and a step on another thread between the import
        // and the registration would hand its first token to no one.
        let mut steps = self.lock();
        // SAFETY: blob and key are valid for their lengths; options for the call.
        self.check(unsafe {
            match key {
                None => sys::llm_session_import_kv(self.raw.as_ptr(), blob.as_ptr().cast(), blob.len(), &options, &mut raw),
                Some(k) => sys::llm_session_import_kv_authenticated(
                    self.raw.as_ptr(),
                    blob.as_ptr().cast(),
                    blob.len(),
                    k.as_ptr().cast(),
                    k.len(),
                    &options,
                    &mut raw,
                ),
            }
        })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::new(Status::Internal, "llm_session_import_kv returned no session"))?;
        let mut info = blank_session_info();
        // SAFETY: the live session just created; info is valid for writes with struct_size set.
        if unsafe { sys::llm_session_get_info(raw.as_ptr(), &mut info) } != sys::LLM_OK {
            // (Not through Session's Drop, which takes the lock held here.)
            // SAFETY: created above, destroyed exactly once, used by no one else yet.
            unsafe { sys::llm_session_destroy(raw.as_ptr()) };
            return Err(Error::new(Status::Internal, "llm_session_get_info failed on an imported session"));
        }
        steps.queues.insert(info.id, Queue::default());
        drop(steps);
        Ok(Session { raw, id: info.id, runtime: self })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: no Session is alive (each borrows the runtime), no other thread can use it;
        // destroyed exactly once. This also drops the tracker (through its destroy hook).
        unsafe { sys::llm_runtime_destroy(self.raw.as_ptr()) }
    }
}

/// Clears `stepping` and wakes the waiting threads if a step unwinds (a panic), so that they
/// do not wait forever.
struct StepGuard<'a> {
    runtime: &'a Runtime,
    armed: bool,
}

impl Drop for StepGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.runtime.lock().stepping = false;
            self.runtime.stepped.notify_all();
        }
    }
}

fn zero_result() -> sys::llm_step_result {
    sys::llm_step_result {
        session: ptr::null_mut(),
        session_id: 0,
        token: sys::LLM_TOKEN_NONE,
        finish_reason: sys::LLM_FINISH_NONE,
        status: sys::LLM_OK,
        num_prefilled: 0,
        failed_page: -1,
        num_failed_pages: 0,
        reserved: 0,
    }
}

/// The prompt ids of a chat: the template with the assistant opener, special tokens parsed.
pub fn chat_prompt(tokenizer: &Tokenizer, messages: &[ChatMessage]) -> Result<Vec<i32>> {
    let text = tokenizer.apply_chat_template(messages, true, false)?;
    tokenizer.encode(&text, true)
}

/// One sequence of a runtime (llm_session). It borrows its runtime, so it cannot outlive it.
///
/// Send + Sync: the header makes calls on a session safe from any thread and concurrently
/// (they are serialized by the runtime's lock), and lets other threads create, feed, cancel and
/// destroy sessions while a step runs. Only destruction must not race with other calls, and
/// `Drop` takes the session by value. So one thread can stream a session while another cancels
/// it through a shared reference.
pub struct Session<'rt> {
    raw: NonNull<sys::llm_session>,
    id: u64,
    runtime: &'rt Runtime,
}

// SAFETY: see the type's comment.
unsafe impl Send for Session<'_> {}
unsafe impl Sync for Session<'_> {}

impl<'rt> Session<'rt> {
    /// The session's id: unique within its runtime, increasing in creation order.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn runtime(&self) -> &'rt Runtime {
        self.runtime
    }

    /// The raw handle, for calls this crate does not wrap. It stays owned by the Session.
    pub fn as_ptr(&self) -> *mut sys::llm_session {
        self.raw.as_ptr()
    }

    fn error(&self, code: sys::llm_status) -> Error {
        let mut record = empty_record();
        // SAFETY: live session; record is valid for writes.
        unsafe { sys::llm_session_last_error(self.raw.as_ptr(), &mut record) };
        Error::from_record(code, &record)
    }

    fn check(&self, code: sys::llm_status) -> Result<()> {
        if code == sys::LLM_OK {
            Ok(())
        } else {
            Err(self.error(code))
        }
    }

    /// Queues tokens for the next steps: a prompt, or a new turn after a finished generation.
    /// Every id must be below the model's vocab_size (else `Status::InvalidArgument`, nothing
    /// queued).
    pub fn append_tokens(&self, tokens: &[i32]) -> Result<()> {
        // Cleared first, under the queue lock, so that no step can report the new generation
        // before its stream expects it.
        let mut steps = self.runtime.lock();
        let was_ended = steps.queues.get_mut(&self.id).map(|q| std::mem::replace(&mut q.ended, false));
        // SAFETY: live session; tokens is valid for its length.
        let code = unsafe { sys::llm_session_append_tokens(self.raw.as_ptr(), tokens.as_ptr(), tokens.len()) };
        if code != sys::LLM_OK {
            if let (Some(q), Some(ended)) = (steps.queues.get_mut(&self.id), was_ended) {
                q.ended = ended;
            }
        }
        drop(steps);
        self.check(code)
    }

    /// Stops the generation at once; the stream ends with `FinishReason::Cancelled` and the
    /// session's KV pages are released. Callable from any thread while another one streams.
    pub fn cancel(&self) -> Result<()> {
        // SAFETY: live session.
        self.check(unsafe { sys::llm_session_cancel(self.raw.as_ptr()) })
    }

    pub fn info(&self) -> Result<SessionInfo> {
        let mut info = blank_session_info();
        // SAFETY: live session; info is valid for writes with struct_size set.
        self.check(unsafe { sys::llm_session_get_info(self.raw.as_ptr(), &mut info) })?;
        Ok(SessionInfo {
            state: SessionState::from_raw(info.state),
            id: info.id,
            num_tokens: info.num_tokens,
            num_pending: info.num_pending,
            num_generated: info.num_generated,
            num_pages: info.num_pages,
        })
    }

    /// The logits of the most recent sampled position (vocab_size values). `Status::InvalidState`
    /// before the first sampled position, and always for a session created with
    /// `Sampling::without_logits()` (`keep_logits: false`).
    pub fn logits(&self) -> Result<Vec<f32>> {
        let mut n = 0usize;
        // SAFETY: a size query: capacity 0 with a NULL buffer.
        let code = unsafe { sys::llm_session_get_logits(self.raw.as_ptr(), ptr::null_mut(), 0, &mut n) };
        if code != sys::LLM_ERR_BUFFER_TOO_SMALL && code != sys::LLM_OK {
            return Err(self.error(code));
        }
        let mut out = vec![0f32; n];
        // SAFETY: out holds n floats.
        self.check(unsafe { sys::llm_session_get_logits(self.raw.as_ptr(), out.as_mut_ptr(), out.len(), &mut n) })?;
        out.truncate(n);
        Ok(out)
    }

    /// Pages of the session's page table that failed verification.
    pub fn failed_pages(&self) -> Result<Vec<u32>> {
        let mut n = 0usize;
        // SAFETY: a count query.
        self.check(unsafe { sys::llm_session_get_failed_pages(self.raw.as_ptr(), ptr::null_mut(), 0, &mut n) })?;
        let mut pages = vec![0u32; n];
        // SAFETY: pages holds n entries.
        self.check(unsafe {
            sys::llm_session_get_failed_pages(self.raw.as_ptr(), pages.as_mut_ptr(), pages.len(), &mut n)
        })?;
        pages.truncate(n);
        Ok(pages)
    }

    /// Serializes the session for `Runtime::import_kv` (call between steps). A step on another
    /// thread between the size query and the export may grow the blob: the export is then asked
    /// again with the new size.
    pub fn export_kv(&self) -> Result<Vec<u8>> {
        self.export(None)
    }

    /// `export_kv` sealed with HMAC-SHA256 under `key` (16 to 1024 bytes, shared by the host's
    /// runtimes) for `Runtime::import_kv_authenticated` (llm_session_export_kv_authenticated).
    pub fn export_kv_authenticated(&self, key: &[u8]) -> Result<Vec<u8>> {
        self.export(Some(key))
    }

    fn export(&self, key: Option<&[u8]>) -> Result<Vec<u8>> {
        let mut blob: Vec<u8> = Vec::new();
        loop {
            let mut size = 0usize;
            let buffer = if blob.is_empty() { ptr::null_mut() } else { blob.as_mut_ptr().cast() };
            // SAFETY: buffer holds blob.len() bytes (none: a size query with a NULL buffer); the
            // key is valid for its length.
            let code = unsafe {
                match key {
                    None => sys::llm_session_export_kv(self.raw.as_ptr(), buffer, blob.len(), &mut size),
                    Some(k) => sys::llm_session_export_kv_authenticated(
                        self.raw.as_ptr(),
                        k.as_ptr().cast(),
                        k.len(),
                        buffer,
                        blob.len(),
                        &mut size,
                    ),
                }
            };
            match code {
                sys::LLM_OK => {
                    blob.truncate(size);
                    return Ok(blob);
                }
                sys::LLM_ERR_BUFFER_TOO_SMALL if size > blob.len() => blob.resize(size, 0),
                _ => return Err(self.error(code)),
            }
        }
    }

    /// The session's next step result, running steps of the whole runtime as needed (results
    /// of other sessions go to their queues). None when the session has nothing more to report
    /// (idle, or its generation ended and its last result was taken).
    pub fn next_result(&self) -> Result<Option<StepResult>> {
        self.runtime.next_result_of(self)
    }

    /// The generation as a stream of tokens with their text (through an incremental
    /// detokenizer that leaves special tokens out).
    pub fn stream<'a>(&'a self, tokenizer: &'a Tokenizer) -> Result<TokenStream<'a>> {
        Ok(TokenStream { session: self, detokenizer: tokenizer.detokenizer(true)?, done: false, finish: None })
    }
}

/// llm_kv_sizing: the KV cache a runtime of a model, codec, budget and page size makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSizing {
    /// The codec sized (llm_kv_dtype; AUTO resolved).
    pub kv_dtype: i32,
    pub num_layers: u32,
    pub elements_per_token_layer: u32,
    /// Over all layers: what `RuntimeInfo` reports for this codec.
    pub bytes_per_token: u64,
    /// Tokens the budget holds, in whole pages.
    pub capacity_tokens: u64,
    /// Sessions of `session_tokens` each that fit; 0 if not asked.
    pub max_sessions: u64,
}

/// Sizes the KV cache of the model in `model_dir` from its config.json alone
/// (llm_model_kv_sizing_v2), for one rank of `tensor_parallel` ranks (0 or 1: one).
/// `page_size_tokens` 0 is the runtime default; `session_tokens` 0 skips the session count.
pub fn model_kv_sizing(
    model_dir: impl AsRef<Path>,
    kv_dtype: KvDtype,
    kv_budget_bytes: u64,
    page_size_tokens: u32,
    session_tokens: u32,
    tensor_parallel: u32,
) -> Result<KvSizing> {
    let dir = path_cstring(model_dir.as_ref(), "model directory")?;
    let mut out = sys::llm_kv_sizing {
        struct_size: std::mem::size_of::<sys::llm_kv_sizing>() as u32,
        kv_dtype: 0,
        num_layers: 0,
        elements_per_token_layer: 0,
        bytes_per_token: 0,
        capacity_tokens: 0,
        max_sessions: 0,
    };
    // SAFETY: dir is a valid C string; out is valid for writes with struct_size set.
    let code = unsafe {
        sys::llm_model_kv_sizing_v2(
            dir.as_ptr(),
            kv_dtype_raw(kv_dtype),
            kv_budget_bytes,
            page_size_tokens,
            session_tokens,
            tensor_parallel,
            &mut out,
        )
    };
    if code != sys::LLM_OK {
        return Err(from_last_error(code));
    }
    Ok(KvSizing {
        kv_dtype: out.kv_dtype,
        num_layers: out.num_layers,
        elements_per_token_layer: out.elements_per_token_layer,
        bytes_per_token: out.bytes_per_token,
        capacity_tokens: out.capacity_tokens,
        max_sessions: out.max_sessions,
    })
}

/// An llm_session_info for llm_session_get_info to fill (struct_size set).
fn blank_session_info() -> sys::llm_session_info {
    sys::llm_session_info {
        struct_size: std::mem::size_of::<sys::llm_session_info>() as u32,
        state: 0,
        id: 0,
        num_tokens: 0,
        num_pending: 0,
        num_generated: 0,
        num_pages: 0,
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // SAFETY: created by this runtime, destroyed exactly once; Drop owns the session, so no
        // other call on it is in flight. Other threads may be stepping: the header allows it.
        unsafe { sys::llm_session_destroy(self.raw.as_ptr()) };
        self.runtime.lock().queues.remove(&self.id);
    }
}

/// One item of a `TokenStream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The generated token; None on a final item without a token (a cancellation).
    pub token: Option<i32>,
    /// The text that became ready with this token (possibly empty: part of a UTF-8 character
    /// waits for the rest; special tokens have none).
    pub text: String,
    /// Set on the last item.
    pub finish: Option<FinishReason>,
}

/// The tokens of a session's generation with their text, ending after the item that carries
/// the finish reason. A failed step of the session is an `Err` item (the stream ends after it
/// when the session failed for good).
pub struct TokenStream<'a> {
    session: &'a Session<'a>,
    detokenizer: Detokenizer<'a>,
    done: bool,
    finish: Option<FinishReason>,
}

impl TokenStream<'_> {
    /// Why the generation ended, once the stream has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    fn failure(&self, status: Status) -> Error {
        let e = self.session.error(status.code());
        if e.message != status.name() {
            return e;
        }
        Error::new(status, format!("session {} failed in a step: {}", self.session.id, status.name()))
    }
}

impl Iterator for TokenStream<'_> {
    type Item = Result<Chunk>;

    fn next(&mut self) -> Option<Result<Chunk>> {
        if self.done {
            return None;
        }
        loop {
            let r = match self.session.next_result() {
                Ok(Some(r)) => r,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            // A cancelled session's last result carries LLM_ERR_CANCELLED: that is the normal
            // end of a cancelled stream, not a failure.
            if let (Some(status), false) = (r.status, r.finish == Some(FinishReason::Cancelled)) {
                // A failure that ends the generation ends the stream; one that leaves the
                // session as it was (no KV page this step) does not.
                if r.finish.is_some() {
                    self.done = true;
                    self.finish = r.finish;
                }
                return Some(Err(self.failure(status)));
            }
            if r.token.is_none() && r.finish.is_none() {
                continue; // a prefill chunk
            }
            let mut text = String::new();
            if let Some(t) = r.token {
                match self.detokenizer.push(t) {
                    Ok(s) => text = s,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            if r.finish.is_some() {
                self.done = true;
                self.finish = r.finish;
                match self.detokenizer.flush() {
                    Ok(s) => text.push_str(&s),
                    Err(e) => return Some(Err(e)),
                }
            }
            return Some(Ok(Chunk { token: r.token, text, finish: r.finish }));
        }
    }
}
