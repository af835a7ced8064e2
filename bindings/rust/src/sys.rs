//! The C ABI of `include/llmrt/llmrt.h`, declared by hand (no bindgen).
//!
//! Every struct and constant here is checked against `bindings/abi_manifest.txt` (generated from
//! the header by the C compiler) by `tests/layout.rs`, through the layout tables the macros below
//! record next to each declaration. The header has no implicit padding (convention 9), so
//! declaring each field in order with `#[repr(C)]` gives the C layout.
#![allow(non_camel_case_types, non_upper_case_globals, missing_docs)]

use std::ffi::{c_char, c_void};
use std::mem::{align_of, offset_of, size_of};

/// The size and offset of one declared field, as the layout test compares them.
#[derive(Debug, Clone, Copy)]
pub struct FieldLayout {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

/// The size, alignment and fields of one declared struct.
#[derive(Debug, Clone)]
pub struct StructLayout {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: Vec<FieldLayout>,
}

fn field_size<S, F>(_: fn(&S) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! abi_consts {
    ($($name:ident : $ty:ty = $val:expr;)*) => {
        $(pub const $name: $ty = $val;)*
        /// Every constant declared here with its value, for the layout test.
        pub const CONSTANTS: &[(&str, i64)] = &[$((stringify!($name), $name as i64)),*];
    };
}

macro_rules! abi_structs {
    ($($(#[$m:meta])* pub struct $name:ident { $(pub $field:ident : $ty:ty,)* })*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            #[derive(Clone, Copy)]
            pub struct $name { $(pub $field: $ty,)* }
        )*
        /// Every struct declared here with its layout, for the layout test.
        pub fn struct_layouts() -> Vec<StructLayout> {
            vec![$(StructLayout {
                name: stringify!($name),
                size: size_of::<$name>(),
                align: align_of::<$name>(),
                fields: vec![$(FieldLayout {
                    name: stringify!($field),
                    offset: offset_of!($name, $field),
                    size: field_size(|s: &$name| &s.$field),
                }),*],
            }),*]
        }
    };
}

pub type llm_status = i32;
pub type llm_log_level = i32;

abi_consts! {
    LLMRT_ABI_VERSION_MAJOR: u32 = 1;
    LLMRT_VERSION_MAJOR: u32 = 0;
    LLMRT_VERSION_MINOR: u32 = 1;
    LLMRT_VERSION_PATCH: u32 = 0;
    LLM_OK: llm_status = 0;
    LLM_ERR_INVALID_ARGUMENT: llm_status = 1;
    LLM_ERR_NOT_FOUND: llm_status = 2;
    LLM_ERR_IO: llm_status = 3;
    LLM_ERR_FORMAT: llm_status = 4;
    LLM_ERR_UNSUPPORTED: llm_status = 5;
    LLM_ERR_OUT_OF_MEMORY: llm_status = 6;
    LLM_ERR_KV_EXHAUSTED: llm_status = 7;
    LLM_ERR_KV_INTEGRITY: llm_status = 8;
    LLM_ERR_CANCELLED: llm_status = 9;
    LLM_ERR_INVALID_STATE: llm_status = 10;
    LLM_ERR_OUT_OF_RANGE: llm_status = 11;
    LLM_ERR_BUFFER_TOO_SMALL: llm_status = 12;
    LLM_ERR_INTERNAL: llm_status = 13;
    LLM_ERROR_MESSAGE_CAPACITY: usize = 1024;
    LLM_LOG_DEBUG: llm_log_level = 0;
    LLM_LOG_INFO: llm_log_level = 1;
    LLM_LOG_WARNING: llm_log_level = 2;
    LLM_LOG_ERROR: llm_log_level = 3;
    LLM_LOG_OFF: llm_log_level = 4;
    LLM_BACKEND_AUTO: i32 = 0;
    LLM_BACKEND_CPU: i32 = 1;
    LLM_BACKEND_CUDA: i32 = 2;
    LLM_KV_DTYPE_AUTO: i32 = 0;
    LLM_KV_DTYPE_BF16: i32 = 1;
    LLM_KV_DTYPE_F32: i32 = 2;
    LLM_KV_DTYPE_FP8_E4M3: i32 = 3;
    LLM_KV_DTYPE_FP8_E4M3_TILED: i32 = 4;
    LLM_KV_INTEGRITY_OFF: i32 = 0;
    LLM_KV_INTEGRITY_TAGS: i32 = 1;
    LLM_KV_PRESSURE_FAIL: i32 = 0;
    LLM_KV_PRESSURE_QUEUE: i32 = 1;
    LLM_KV_PRESSURE_PREEMPT: i32 = 2;
    LLM_COMM_ID_BYTES: usize = 128;
    LLM_WEIGHTS_AS_STORED: i32 = 0;
    LLM_WEIGHTS_INT4_G32: i32 = 1;
    LLM_WEIGHTS_INT4_G128: i32 = 2;
    LLM_ACTIVATIONS_EXACT: i32 = 0;
    LLM_ACTIVATIONS_INT8: i32 = 1;
    LLM_ACTIVATIONS_BF16: i32 = 2;
    LLM_ACTIVATIONS_FP8: i32 = 3;
    LLM_WEIGHT_MEMORY_AUTO: i32 = 0;
    LLM_WEIGHT_MEMORY_MAPPED: i32 = 1;
    LLM_WEIGHT_MEMORY_HUGE_PAGES: i32 = 2;
    LLM_WEIGHT_MEMORY_DEVICE: i32 = 3;
    LLM_KV_SCALE_NONE: i32 = 0;
    LLM_KV_SCALE_CHECKPOINT: i32 = 1;
    LLM_KV_SCALE_CALIBRATED: i32 = 2;
    LLM_KV_SCALE_PER_TILE: i32 = 3;
    LLM_CONVERT_INT4: i32 = 0;
    LLM_CONVERT_FP8_BLOCK: i32 = 1;
    LLM_SAMPLING_NO_LOGITS: u32 = 0x1;
    LLM_SESSION_IDLE: i32 = 0;
    LLM_SESSION_PREFILL: i32 = 1;
    LLM_SESSION_DECODING: i32 = 2;
    LLM_SESSION_FINISHED: i32 = 3;
    LLM_SESSION_CANCELLED: i32 = 4;
    LLM_SESSION_FAILED: i32 = 5;
    LLM_FINISH_NONE: i32 = 0;
    LLM_FINISH_STOP: i32 = 1;
    LLM_FINISH_LENGTH: i32 = 2;
    LLM_FINISH_CANCELLED: i32 = 3;
    LLM_FINISH_ERROR: i32 = 4;
    LLM_TOKEN_NONE: i32 = -1;
    LLM_TOKENIZER_KIMI: i32 = 1;
    LLM_TOKENIZER_GLM: i32 = 2;
    LLM_TESTCTL_KV_FREE_MAPPED_PAGE: i32 = 1;
    LLM_TESTCTL_KV_CORRUPT_ENTRY: i32 = 2;
    LLM_TESTCTL_KV_SWAP_PAGES: i32 = 3;
    LLM_TESTCTL_RANK_FAIL_NEXT_PASS: i32 = 4;
}

/// `LLMRT_VERSION_STRING` of the header this module was written from.
pub const LLMRT_VERSION_STRING: &str = "0.1.0";

// Opaque handles.
#[repr(C)]
pub struct llm_runtime {
    _private: [u8; 0],
}
#[repr(C)]
pub struct llm_session {
    _private: [u8; 0],
}
#[repr(C)]
pub struct llm_tokenizer {
    _private: [u8; 0],
}
#[repr(C)]
pub struct llm_detokenizer {
    _private: [u8; 0],
}

pub type llm_log_fn = Option<unsafe extern "C" fn(user: *mut c_void, level: llm_log_level, message: *const c_char)>;
pub type llm_destroy_fn = Option<unsafe extern "C" fn(user: *mut c_void)>;

pub type on_alloc_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, session_id: u64, page: u32, tag: u64)>;
pub type on_free_fn = on_alloc_fn;
pub type on_share_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, from_session: u64, to_session: u64, page: u32, tag: u64)>;
pub type on_verify_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        session_id: u64,
        pages: *const u32,
        tags: *const u64,
        num_pages: usize,
    ) -> i32,
>;
pub type on_violation_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        session_id: u64,
        entry: u32,
        page: u32,
        expected_tag: u64,
        actual_tag: u64,
    ),
>;

abi_structs! {
    pub struct llm_error {
        pub struct_size: u32,
        pub status: llm_status,
        pub message: [c_char; LLM_ERROR_MESSAGE_CAPACITY],
    }

    pub struct llm_kv_tracker {
        pub struct_size: u32,
        pub reserved0: u32,
        pub user_data: *mut c_void,
        pub on_alloc: on_alloc_fn,
        pub on_free: on_free_fn,
        pub on_share: on_share_fn,
        pub on_verify: on_verify_fn,
        pub on_violation: on_violation_fn,
        pub destroy: llm_destroy_fn,
    }

    pub struct llm_runtime_options {
        pub struct_size: u32,
        pub backend: i32,
        pub num_threads: i32,
        pub kv_dtype: i32,
        pub kv_budget_bytes: u64,
        pub page_size_tokens: u32,
        pub max_sessions: u32,
        pub max_tokens_per_step: u32,
        pub weight_memory: i32,
        pub kv_integrity: i32,
        pub kv_pressure: i32,
        pub tracker: *const llm_kv_tracker,
        pub prefix_sharing: i32,
        pub reserved1: u32,
        pub prefill_weights: i32,
        pub decode_weights: i32,
        pub tensor_parallel: u32,
        pub expert_parallel: i32,
        pub world_size: u32,
        pub rank: u32,
        pub collective_timeout_ms: u32,
        pub reserved_parallel: u32,
        pub comm_id: *const llm_comm_id,
        pub quantized_activations: i32,
        pub reserved_activations: u32,
    }

    pub struct llm_comm_id {
        pub backend: i32,
        pub reserved: u32,
        pub bytes: [u8; LLM_COMM_ID_BYTES],
    }

    pub struct llm_runtime_info {
        pub struct_size: u32,
        pub architecture: [c_char; 64],
        pub model_type: [c_char; 32],
        pub backend: i32,
        pub kv_dtype: i32,
        pub vocab_size: u32,
        pub num_layers: u32,
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
        pub reserved2: u32,
        pub workspace_bytes: u64,
        pub tensor_parallel: u32,
        pub expert_parallel: i32,
        pub rank_weight_bytes: u64,
        pub rank_kv_capacity_tokens: u64,
        pub collective_ns: u64,
    }

    pub struct llm_kv_sizing {
        pub struct_size: u32,
        pub kv_dtype: i32,
        pub num_layers: u32,
        pub elements_per_token_layer: u32,
        pub bytes_per_token: u64,
        pub capacity_tokens: u64,
        pub max_sessions: u64,
    }

    pub struct llm_convert_options {
        pub struct_size: u32,
        pub target: i32,
        pub fp8_block: u32,
        pub int4_group: u32,
        pub int4_all_linears: i32,
        pub reserved0: u32,
        pub max_shard_bytes: u64,
    }

    pub struct llm_sampling_options {
        pub struct_size: u32,
        pub temperature: f32,
        pub top_k: i32,
        pub top_p: f32,
        pub min_p: f32,
        pub max_new_tokens: u32,
        pub seed: u64,
        pub stop_tokens: *const i32,
        pub num_stop_tokens: u32,
        pub flags: u32,
    }

    pub struct llm_session_info {
        pub struct_size: u32,
        pub state: i32,
        pub id: u64,
        pub num_tokens: u32,
        pub num_pending: u32,
        pub num_generated: u32,
        pub num_pages: u32,
    }

    pub struct llm_step_result {
        pub session: *mut llm_session,
        pub session_id: u64,
        pub token: i32,
        pub finish_reason: i32,
        pub status: llm_status,
        pub num_prefilled: u32,
        pub failed_page: i32,
        pub num_failed_pages: u32,
        pub reserved: u64,
    }

    pub struct llm_tokenizer_info {
        pub struct_size: u32,
        pub family: i32,
        pub vocab_size: u32,
        pub bos_id: i32,
        pub eos_id: i32,
    }

    pub struct llm_chat_message {
        pub role: *const c_char,
        pub content: *const c_char,
    }
}

extern "C" {
    pub fn llm_version() -> *const c_char;
    pub fn llm_version_number() -> u32;
    pub fn llm_status_string(status: llm_status) -> *const c_char;
    pub fn llm_last_error() -> *const c_char;

    pub fn llm_set_log_callback(fn_: llm_log_fn, user: *mut c_void, min_level: llm_log_level) -> llm_status;
    pub fn llm_set_log_callback_v2(
        fn_: llm_log_fn,
        user: *mut c_void,
        min_level: llm_log_level,
        destroy: llm_destroy_fn,
    ) -> llm_status;

    pub fn llm_comm_id_create(backend: i32, out_id: *mut llm_comm_id) -> llm_status;

    pub fn llm_runtime_options_init(options: *mut llm_runtime_options);
    pub fn llm_runtime_create(
        model_dir: *const c_char,
        options: *const llm_runtime_options,
        out_runtime: *mut *mut llm_runtime,
    ) -> llm_status;
    pub fn llm_runtime_create_v2(
        model_dir: *const c_char,
        options: *const llm_runtime_options,
        out_runtime: *mut *mut llm_runtime,
        error: *mut llm_error,
    ) -> llm_status;
    pub fn llm_runtime_last_error(runtime: *const llm_runtime, error: *mut llm_error) -> llm_status;
    pub fn llm_runtime_destroy(runtime: *mut llm_runtime);
    pub fn llm_runtime_get_info(runtime: *const llm_runtime, info: *mut llm_runtime_info) -> llm_status;

    pub fn llm_model_kv_sizing(
        model_dir: *const c_char,
        kv_dtype: i32,
        kv_budget_bytes: u64,
        page_size_tokens: u32,
        session_tokens: u32,
        out: *mut llm_kv_sizing,
    ) -> llm_status;

    pub fn llm_model_kv_sizing_v2(
        model_dir: *const c_char,
        kv_dtype: i32,
        kv_budget_bytes: u64,
        page_size_tokens: u32,
        session_tokens: u32,
        tensor_parallel: u32,
        out: *mut llm_kv_sizing,
    ) -> llm_status;

    pub fn llm_convert_options_init(options: *mut llm_convert_options);
    pub fn llm_convert_checkpoint(
        in_dir: *const c_char,
        out_dir: *const c_char,
        options: *const llm_convert_options,
        summary: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
    ) -> llm_status;

    pub fn llm_sampling_options_init(options: *mut llm_sampling_options);
    pub fn llm_session_create(
        runtime: *mut llm_runtime,
        options: *const llm_sampling_options,
        out_session: *mut *mut llm_session,
    ) -> llm_status;
    pub fn llm_session_destroy(session: *mut llm_session);
    pub fn llm_session_append_tokens(session: *mut llm_session, tokens: *const i32, num_tokens: usize) -> llm_status;
    pub fn llm_session_cancel(session: *mut llm_session) -> llm_status;
    pub fn llm_session_get_info(session: *const llm_session, info: *mut llm_session_info) -> llm_status;
    pub fn llm_session_last_error(session: *const llm_session, error: *mut llm_error) -> llm_status;
    pub fn llm_session_get_logits(
        session: *const llm_session,
        out: *mut f32,
        capacity: usize,
        out_count: *mut usize,
    ) -> llm_status;

    pub fn llm_session_export_kv(
        session: *mut llm_session,
        buffer: *mut c_void,
        capacity: usize,
        out_size: *mut usize,
    ) -> llm_status;
    pub fn llm_session_import_kv(
        runtime: *mut llm_runtime,
        data: *const c_void,
        size: usize,
        options: *const llm_sampling_options,
        out_session: *mut *mut llm_session,
    ) -> llm_status;
    pub fn llm_session_export_kv_authenticated(
        session: *mut llm_session,
        key: *const c_void,
        key_len: usize,
        buffer: *mut c_void,
        capacity: usize,
        out_size: *mut usize,
    ) -> llm_status;
    pub fn llm_session_import_kv_authenticated(
        runtime: *mut llm_runtime,
        data: *const c_void,
        size: usize,
        key: *const c_void,
        key_len: usize,
        options: *const llm_sampling_options,
        out_session: *mut *mut llm_session,
    ) -> llm_status;

    pub fn llm_decode_step(
        runtime: *mut llm_runtime,
        results: *mut llm_step_result,
        capacity: usize,
        out_count: *mut usize,
    ) -> llm_status;
    pub fn llm_decode_step_v2(
        runtime: *mut llm_runtime,
        results: *mut c_void,
        result_size: usize,
        capacity: usize,
        out_count: *mut usize,
    ) -> llm_status;
    pub fn llm_score(
        runtime: *mut llm_runtime,
        tokens: *const i32,
        num_tokens: usize,
        logprobs: *mut f32,
        argmax: *mut i32,
    ) -> llm_status;
    pub fn llm_session_get_failed_pages(
        session: *const llm_session,
        pages: *mut u32,
        capacity: usize,
        out_count: *mut usize,
    ) -> llm_status;

    pub fn llm_tokenizer_create(model_dir: *const c_char, out_tokenizer: *mut *mut llm_tokenizer) -> llm_status;
    pub fn llm_tokenizer_create_v2(
        model_dir: *const c_char,
        out_tokenizer: *mut *mut llm_tokenizer,
        error: *mut llm_error,
    ) -> llm_status;
    pub fn llm_tokenizer_last_error(tokenizer: *const llm_tokenizer, error: *mut llm_error) -> llm_status;
    pub fn llm_detokenizer_last_error(detokenizer: *const llm_detokenizer, error: *mut llm_error) -> llm_status;
    pub fn llm_tokenizer_destroy(tokenizer: *mut llm_tokenizer);
    pub fn llm_tokenizer_get_info(tokenizer: *const llm_tokenizer, info: *mut llm_tokenizer_info) -> llm_status;
    pub fn llm_tokenize(
        tokenizer: *const llm_tokenizer,
        text: *const c_char,
        text_len: usize,
        parse_special: i32,
        tokens: *mut i32,
        capacity: usize,
        out_count: *mut usize,
    ) -> llm_status;
    pub fn llm_detokenize(
        tokenizer: *const llm_tokenizer,
        tokens: *const i32,
        num_tokens: usize,
        skip_special: i32,
        text: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
    ) -> llm_status;
    pub fn llm_tokenizer_special_id(
        tokenizer: *const llm_tokenizer,
        text: *const c_char,
        out_id: *mut i32,
    ) -> llm_status;
    pub fn llm_detokenizer_create(
        tokenizer: *const llm_tokenizer,
        skip_special: i32,
        out_detokenizer: *mut *mut llm_detokenizer,
    ) -> llm_status;
    pub fn llm_detokenizer_destroy(detokenizer: *mut llm_detokenizer);
    pub fn llm_detokenizer_push(
        detokenizer: *mut llm_detokenizer,
        token: i32,
        text: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
    ) -> llm_status;
    pub fn llm_detokenizer_flush(
        detokenizer: *mut llm_detokenizer,
        text: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
    ) -> llm_status;
    pub fn llm_chat_apply_template(
        tokenizer: *const llm_tokenizer,
        messages: *const llm_chat_message,
        num_messages: usize,
        add_generation_prompt: i32,
        enable_thinking: i32,
        text: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
    ) -> llm_status;

    pub fn llm_test_control(runtime: *mut llm_runtime, op: i32, args: *const i64, num_args: usize) -> llm_status;
}
