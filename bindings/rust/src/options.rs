//! Runtime and sampling options, and the info structs, as Rust types.

use crate::comm_id::CommId;
use crate::sys;

/// Which backend runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// CUDA when built and a device is present, else CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl Backend {
    pub(crate) fn to_raw(self) -> i32 {
        match self {
            Backend::Auto => sys::LLM_BACKEND_AUTO,
            Backend::Cpu => sys::LLM_BACKEND_CPU,
            Backend::Cuda => sys::LLM_BACKEND_CUDA,
        }
    }
}

/// How the paged KV cache stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDtype {
    /// BF16.
    #[default]
    Auto,
    Bf16,
    /// Exact reference storage, for verification.
    F32,
    /// One byte per value, one scale per layer.
    Fp8E4m3,
    /// FP8 with a scale per 128-value tile of each token.
    Fp8E4m3Tiled,
}

/// What a step does with a session whose next tokens find no free KV page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvPressure {
    /// That session's step result has `Status::KvExhausted`; it is left unchanged.
    #[default]
    Fail,
    /// A prompt is admitted only when pages for all of it are free, in arrival order.
    Queue,
    /// Newer running sessions give up their pages and recompute later.
    Preempt,
}

/// Storage of the routed experts for one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weights {
    #[default]
    AsStored,
    Int4G32,
    Int4G128,
}

/// How matmuls treat their activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activations {
    /// Float32 activations: the reference numerics.
    #[default]
    Exact,
    /// Activations rounded to int8 per 32 values, integer dot products with INT4 codes (W4A8):
    /// faster on CPUs, slightly different numerics. Other weights are unaffected.
    Int8,
    /// Activations of matmuls with BF16 weights rounded to bfloat16, bf16 dot products (the MoE
    /// router stays float32). Other weights are unaffected.
    Bf16,
    /// Activations of matmuls with FP8 block-scaled weights rounded to e4m3 codes, one float32
    /// scale per row and 128 columns, code products summed in float32 and scaled by both block
    /// scales (the FP8 block-scaled GEMM); BF16 weights as under `Bf16`, INT4 and F32 unaffected.
    Fp8,
}

/// Where the CPU backend keeps the weights (device backends keep them in device memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMemory {
    /// `HugePages` where the kernel offers transparent huge pages, else `Mapped`.
    #[default]
    Auto,
    /// Read in place from the checkpoint's file mapping: no copy, pages shared between processes.
    Mapped,
    /// Copied at load into private memory advised for 2 MiB pages: faster decode (fewer page
    /// walks while streaming weights), a private copy per process.
    HugePages,
}

/// Options of `Runtime::new`. Zero means "the library's default" for every number.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeOptions {
    pub backend: Backend,
    /// CPU worker threads; 0 = one per core.
    pub num_threads: u32,
    pub kv_dtype: KvDtype,
    /// Bytes for the paged KV cache; 0 = 256 MiB.
    pub kv_budget_bytes: u64,
    /// Tokens per KV page; 0 = 16.
    pub page_size_tokens: u32,
    /// Live sessions at once; 0 = 256.
    pub max_sessions: u32,
    /// Token budget of one step; 0 = 512.
    pub max_tokens_per_step: u32,
    /// Verify every scheduled session's page tags before each forward pass.
    pub kv_integrity: bool,
    pub kv_pressure: KvPressure,
    /// Share full KV pages of equal prompt prefixes.
    pub prefix_sharing: bool,
    pub prefill_weights: Weights,
    pub decode_weights: Weights,
    /// In-process ranks the model is split over (tensor parallelism); 0 or 1 = one rank.
    pub tensor_parallel: u32,
    /// Partition routed experts whole among the ranks instead of splitting each one.
    pub expert_parallel: bool,
    /// Processes of a multi-process group (ranks joined through MPI); 0 or 1 = this process alone.
    pub world_size: u32,
    /// This process's rank in the group (its MPI rank).
    pub rank: u32,
    /// How long a rank waits for the others in a collective, in milliseconds; 0 = 60000.
    pub collective_timeout_ms: u32,
    /// The group's id: [`CommId::create`] on one process, the same bytes on every process
    /// ([`CommId::from_bytes`]). Every rank checks it against rank 0's when it joins; `None`: no
    /// check. Read only when `world_size > 1`; the runtime copies it at creation.
    pub comm_id: Option<CommId>,
    /// How matmuls with quantized weights treat their activations.
    pub quantized_activations: Activations,
    /// Where the CPU backend keeps the weights.
    pub weight_memory: WeightMemory,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            backend: Backend::Auto,
            num_threads: 0,
            kv_dtype: KvDtype::Auto,
            kv_budget_bytes: 0,
            page_size_tokens: 0,
            max_sessions: 0,
            max_tokens_per_step: 0,
            kv_integrity: false,
            kv_pressure: KvPressure::Fail,
            prefix_sharing: true,
            prefill_weights: Weights::AsStored,
            decode_weights: Weights::AsStored,
            tensor_parallel: 1,
            expert_parallel: false,
            world_size: 1,
            rank: 0,
            collective_timeout_ms: 0,
            comm_id: None,
            quantized_activations: Activations::Exact,
            weight_memory: WeightMemory::Auto,
        }
    }
}

impl RuntimeOptions {
    /// These options as rank `rank` of a group of `world_size` processes.
    pub fn with_world(mut self, world_size: u32, rank: u32) -> RuntimeOptions {
        self.world_size = world_size;
        self.rank = rank;
        self
    }

    /// These options with the group id `id` (a copy of it).
    pub fn with_comm_id(mut self, id: &CommId) -> RuntimeOptions {
        self.comm_id = Some(*id);
        self
    }

    /// The C struct. Its `comm_id` points into `self`, so it is valid while `self` is borrowed,
    /// which covers the llm_runtime_create call (the library copies the id there).
    pub(crate) fn to_raw(&self) -> sys::llm_runtime_options {
        let mut o = std::mem::MaybeUninit::<sys::llm_runtime_options>::zeroed();
        // SAFETY: init fills every field of the struct.
        let mut o = unsafe {
            sys::llm_runtime_options_init(o.as_mut_ptr());
            o.assume_init()
        };
        o.backend = self.backend.to_raw();
        // Larger counts than i32 holds cannot name threads; the library rejects negatives.
        o.num_threads = self.num_threads.min(i32::MAX as u32) as i32;
        o.kv_dtype = kv_dtype_raw(self.kv_dtype);
        o.kv_budget_bytes = self.kv_budget_bytes;
        o.page_size_tokens = self.page_size_tokens;
        o.max_sessions = self.max_sessions;
        o.max_tokens_per_step = self.max_tokens_per_step;
        o.kv_integrity = if self.kv_integrity { sys::LLM_KV_INTEGRITY_TAGS } else { sys::LLM_KV_INTEGRITY_OFF };
        o.kv_pressure = match self.kv_pressure {
            KvPressure::Fail => sys::LLM_KV_PRESSURE_FAIL,
            KvPressure::Queue => sys::LLM_KV_PRESSURE_QUEUE,
            KvPressure::Preempt => sys::LLM_KV_PRESSURE_PREEMPT,
        };
        o.prefix_sharing = self.prefix_sharing as i32;
        o.prefill_weights = weights_raw(self.prefill_weights);
        o.decode_weights = weights_raw(self.decode_weights);
        o.tensor_parallel = self.tensor_parallel;
        o.expert_parallel = i32::from(self.expert_parallel);
        o.world_size = self.world_size;
        o.rank = self.rank;
        o.collective_timeout_ms = self.collective_timeout_ms;
        o.quantized_activations = match self.quantized_activations {
            Activations::Exact => sys::LLM_ACTIVATIONS_EXACT,
            Activations::Int8 => sys::LLM_ACTIVATIONS_INT8,
            Activations::Bf16 => sys::LLM_ACTIVATIONS_BF16,
            Activations::Fp8 => sys::LLM_ACTIVATIONS_FP8,
        };
        o.weight_memory = match self.weight_memory {
            WeightMemory::Auto => sys::LLM_WEIGHT_MEMORY_AUTO,
            WeightMemory::Mapped => sys::LLM_WEIGHT_MEMORY_MAPPED,
            WeightMemory::HugePages => sys::LLM_WEIGHT_MEMORY_HUGE_PAGES,
        };
        o.comm_id = self.comm_id.as_ref().map_or(std::ptr::null(), |id| id.raw() as *const sys::llm_comm_id);
        o
    }
}

pub(crate) fn kv_dtype_raw(d: KvDtype) -> i32 {
    match d {
        KvDtype::Auto => sys::LLM_KV_DTYPE_AUTO,
        KvDtype::Bf16 => sys::LLM_KV_DTYPE_BF16,
        KvDtype::F32 => sys::LLM_KV_DTYPE_F32,
        KvDtype::Fp8E4m3 => sys::LLM_KV_DTYPE_FP8_E4M3,
        KvDtype::Fp8E4m3Tiled => sys::LLM_KV_DTYPE_FP8_E4M3_TILED,
    }
}

fn weights_raw(w: Weights) -> i32 {
    match w {
        Weights::AsStored => sys::LLM_WEIGHTS_AS_STORED,
        Weights::Int4G32 => sys::LLM_WEIGHTS_INT4_G32,
        Weights::Int4G128 => sys::LLM_WEIGHTS_INT4_G128,
    }
}

/// How a session samples. The default is greedy decoding with no limit and no stop tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: i32,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// Per generation; 0 = until a stop token or the context ends.
    pub max_new_tokens: u32,
    /// Per-session random stream; equal seeds give equal samples.
    pub seed: u64,
    pub stop_tokens: Vec<i32>,
    /// Whether the session keeps the logits of its sampled position for `Session::logits`
    /// (true, the default). False sets `LLM_SAMPLING_NO_LOGITS`: a step brings back only the
    /// sampled ids (on the CUDA backend, `vocab_size` floats less per session and step over the
    /// bus), the tokens are the same, and `Session::logits` fails with `Status::InvalidState`.
    pub keep_logits: bool,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            max_new_tokens: 0,
            seed: 0,
            stop_tokens: Vec::new(),
            keep_logits: true,
        }
    }
}

impl Sampling {
    /// Greedy decoding (the default).
    pub fn greedy() -> Sampling {
        Sampling::default()
    }

    /// Sampling at `temperature` with `seed`.
    pub fn temperature(temperature: f32, seed: u64) -> Sampling {
        Sampling { temperature, seed, ..Sampling::default() }
    }

    pub fn with_max_new_tokens(mut self, n: u32) -> Sampling {
        self.max_new_tokens = n;
        self
    }

    pub fn with_stop_tokens(mut self, stops: impl IntoIterator<Item = i32>) -> Sampling {
        self.stop_tokens = stops.into_iter().collect();
        self
    }

    /// A session that does not keep its logits (`keep_logits: false`, `LLM_SAMPLING_NO_LOGITS`):
    /// the same tokens with less copied per step, and `Session::logits` is `Status::InvalidState`.
    pub fn without_logits(mut self) -> Sampling {
        self.keep_logits = false;
        self
    }

    /// The C struct; it points into self.stop_tokens, which the library copies at creation.
    pub(crate) fn to_raw(&self) -> sys::llm_sampling_options {
        let mut o = std::mem::MaybeUninit::<sys::llm_sampling_options>::zeroed();
        // SAFETY: init fills every field of the struct.
        let mut o = unsafe {
            sys::llm_sampling_options_init(o.as_mut_ptr());
            o.assume_init()
        };
        o.temperature = self.temperature;
        o.top_k = self.top_k;
        o.top_p = self.top_p;
        o.min_p = self.min_p;
        o.max_new_tokens = self.max_new_tokens;
        o.seed = self.seed;
        o.stop_tokens = if self.stop_tokens.is_empty() { std::ptr::null() } else { self.stop_tokens.as_ptr() };
        o.num_stop_tokens = self.stop_tokens.len().min(u32::MAX as usize) as u32;
        o.flags = if self.keep_logits { 0 } else { sys::LLM_SAMPLING_NO_LOGITS };
        o
    }
}

/// What `Runtime::info` reports (the header's llm_runtime_info).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub architecture: String,
    pub model_type: String,
    pub backend: i32,
    pub kv_dtype: i32,
    pub vocab_size: u32,
    pub num_layers: u32,
    /// `LLM_WEIGHT_MEMORY_MAPPED`, `_HUGE_PAGES` (CPU) or `_DEVICE` in effect.
    pub weight_memory: i32,
    pub num_parameters: u64,
    pub weight_bytes: u64,
    pub kv_bytes_per_token: u64,
    pub kv_capacity_tokens: u64,
    pub page_size_tokens: u32,
    pub pages_total: u32,
    pub pages_free: u32,
    pub num_sessions: u32,
    pub max_position_embeddings: u32,
    pub pages_shared: u32,
    pub prefix_lookup_tokens: u64,
    pub prefix_hit_tokens: u64,
    pub integrity_violations: u64,
    pub preemptions: u64,
    pub integrity_check_ns: u64,
    pub weight_bytes_f32: u64,
    pub weight_bytes_bf16: u64,
    pub weight_bytes_fp8: u64,
    pub weight_bytes_int4: u64,
    pub prefill_weights: i32,
    pub decode_weights: i32,
    pub kv_scale_source: i32,
    pub workspace_bytes: u64,
}

fn c_chars(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl From<&sys::llm_runtime_info> for RuntimeInfo {
    fn from(i: &sys::llm_runtime_info) -> RuntimeInfo {
        RuntimeInfo {
            architecture: c_chars(&i.architecture),
            model_type: c_chars(&i.model_type),
            backend: i.backend,
            kv_dtype: i.kv_dtype,
            vocab_size: i.vocab_size,
            num_layers: i.num_layers,
            weight_memory: i.weight_memory,
            num_parameters: i.num_parameters,
            weight_bytes: i.weight_bytes,
            kv_bytes_per_token: i.kv_bytes_per_token,
            kv_capacity_tokens: i.kv_capacity_tokens,
            page_size_tokens: i.page_size_tokens,
            pages_total: i.pages_total,
            pages_free: i.pages_free,
            num_sessions: i.num_sessions,
            max_position_embeddings: i.max_position_embeddings,
            pages_shared: i.pages_shared,
            prefix_lookup_tokens: i.prefix_lookup_tokens,
            prefix_hit_tokens: i.prefix_hit_tokens,
            integrity_violations: i.integrity_violations,
            preemptions: i.preemptions,
            integrity_check_ns: i.integrity_check_ns,
            weight_bytes_f32: i.weight_bytes_f32,
            weight_bytes_bf16: i.weight_bytes_bf16,
            weight_bytes_fp8: i.weight_bytes_fp8,
            weight_bytes_int4: i.weight_bytes_int4,
            prefill_weights: i.prefill_weights,
            decode_weights: i.decode_weights,
            kv_scale_source: i.kv_scale_source,
            workspace_bytes: i.workspace_bytes,
        }
    }
}

/// A session's state (LLM_SESSION_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Nothing queued, nothing generating.
    Idle,
    /// Prompt tokens queued.
    Prefill,
    /// Generating.
    Decoding,
    /// Generation ended (stop token or length); may take a new turn.
    Finished,
    Cancelled,
    /// A fatal error; see the step result's status.
    Failed,
    Other(i32),
}

impl SessionState {
    pub(crate) fn from_raw(s: i32) -> SessionState {
        match s {
            sys::LLM_SESSION_IDLE => SessionState::Idle,
            sys::LLM_SESSION_PREFILL => SessionState::Prefill,
            sys::LLM_SESSION_DECODING => SessionState::Decoding,
            sys::LLM_SESSION_FINISHED => SessionState::Finished,
            sys::LLM_SESSION_CANCELLED => SessionState::Cancelled,
            sys::LLM_SESSION_FAILED => SessionState::Failed,
            other => SessionState::Other(other),
        }
    }
}

/// What `Session::info` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionInfo {
    pub state: SessionState,
    /// Unique within the runtime, increasing in creation order.
    pub id: u64,
    /// Tokens in the context (processed into the KV cache).
    pub num_tokens: u32,
    /// Tokens queued and not yet processed.
    pub num_pending: u32,
    /// Tokens generated in the current generation.
    pub num_generated: u32,
    /// KV pages held.
    pub num_pages: u32,
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// Sampled a stop token (the token is reported).
    Stop,
    /// max_new_tokens reached or the context is full.
    Length,
    Cancelled,
    /// See the result's status.
    Error,
    Other(i32),
}

impl FinishReason {
    pub(crate) fn from_raw(r: i32) -> Option<FinishReason> {
        match r {
            sys::LLM_FINISH_NONE => None,
            sys::LLM_FINISH_STOP => Some(FinishReason::Stop),
            sys::LLM_FINISH_LENGTH => Some(FinishReason::Length),
            sys::LLM_FINISH_CANCELLED => Some(FinishReason::Cancelled),
            sys::LLM_FINISH_ERROR => Some(FinishReason::Error),
            other => Some(FinishReason::Other(other)),
        }
    }
}
