package llmrt

// #include "llmrt/llmrt.h"
import "C"

import "unsafe"

// What this binding relies on from the header, for the ABI test (abi_test.go), which compares it
// with bindings/abi_manifest.txt, the manifest generated from the header of this source tree.
// The constants are the ones the Go API declares by hand; the structs are those the binding
// hands to the library, as cgo compiled them from the installed header that pkg-config found:
// a stale install, or a header change the binding has not followed, fails the test.

// abiConstants maps the header's macro names to the Go constants that copy them.
func abiConstants() map[string]int64 {
	m := map[string]int64{
		"LLMRT_ABI_VERSION_MAJOR":      ABIVersionMajor,
		"LLMRT_VERSION_MAJOR":          versionMajor,
		"LLMRT_VERSION_MINOR":          versionMinor,
		"LLMRT_VERSION_PATCH":          versionPatch,
		"LLM_ERROR_MESSAGE_CAPACITY":   errorMessageCapacity,
		"LLM_LOG_DEBUG":                int64(LogDebug),
		"LLM_LOG_INFO":                 int64(LogInfo),
		"LLM_LOG_WARNING":              int64(LogWarning),
		"LLM_LOG_ERROR":                int64(LogError),
		"LLM_LOG_OFF":                  int64(LogOff),
		"LLM_BACKEND_AUTO":             int64(BackendAuto),
		"LLM_BACKEND_CPU":              int64(BackendCPU),
		"LLM_BACKEND_CUDA":             int64(BackendCUDA),
		"LLM_KV_DTYPE_AUTO":            int64(KVDTypeAuto),
		"LLM_KV_DTYPE_BF16":            int64(KVDTypeBF16),
		"LLM_KV_DTYPE_F32":             int64(KVDTypeF32),
		"LLM_KV_DTYPE_FP8_E4M3":        int64(KVDTypeFP8E4M3),
		"LLM_KV_DTYPE_FP8_E4M3_TILED":  int64(KVDTypeFP8E4M3Tiled),
		"LLM_KV_INTEGRITY_OFF":         int64(KVIntegrityOff),
		"LLM_KV_INTEGRITY_TAGS":        int64(KVIntegrityTags),
		"LLM_KV_PRESSURE_FAIL":         int64(KVPressureFail),
		"LLM_KV_PRESSURE_QUEUE":        int64(KVPressureQueue),
		"LLM_KV_PRESSURE_PREEMPT":      int64(KVPressurePreempt),
		"LLM_COMM_ID_BYTES":            commIDBytes,
		"LLM_WEIGHTS_AS_STORED":        int64(WeightsAsStored),
		"LLM_WEIGHTS_INT4_G32":         int64(WeightsINT4G32),
		"LLM_WEIGHTS_INT4_G128":        int64(WeightsINT4G128),
		"LLM_ACTIVATIONS_EXACT":        int64(ActivationsExact),
		"LLM_ACTIVATIONS_INT8":         int64(ActivationsINT8),
		"LLM_ACTIVATIONS_BF16":         int64(ActivationsBF16),
		"LLM_ACTIVATIONS_FP8":          int64(ActivationsFP8),
		"LLM_WEIGHT_MEMORY_AUTO":       int64(WeightMemoryAuto),
		"LLM_WEIGHT_MEMORY_MAPPED":     int64(WeightMemoryMapped),
		"LLM_WEIGHT_MEMORY_HUGE_PAGES": int64(WeightMemoryHugePages),
		"LLM_WEIGHT_MEMORY_DEVICE":     int64(WeightMemoryDevice),
		"LLM_KV_SCALE_NONE":            int64(KVScaleNone),
		"LLM_KV_SCALE_CHECKPOINT":      int64(KVScaleCheckpoint),
		"LLM_KV_SCALE_CALIBRATED":      int64(KVScaleCalibrated),
		"LLM_KV_SCALE_PER_TILE":        int64(KVScalePerTile),
		"LLM_SAMPLING_NO_LOGITS":       samplingNoLogits,
		"LLM_SESSION_IDLE":             int64(SessionIdle),
		"LLM_SESSION_PREFILL":          int64(SessionPrefill),
		"LLM_SESSION_DECODING":         int64(SessionDecoding),
		"LLM_SESSION_FINISHED":         int64(SessionFinished),
		"LLM_SESSION_CANCELLED":        int64(SessionCancelled),
		"LLM_SESSION_FAILED":           int64(SessionFailed),
		"LLM_FINISH_NONE":              int64(FinishNone),
		"LLM_FINISH_STOP":              int64(FinishStop),
		"LLM_FINISH_LENGTH":            int64(FinishLength),
		"LLM_FINISH_CANCELLED":         int64(FinishCancelled),
		"LLM_FINISH_ERROR":             int64(FinishError),
		"LLM_TOKEN_NONE":               int64(TokenNone),
		"LLM_TOKENIZER_KIMI":           int64(TokenizerKimi),
		"LLM_TOKENIZER_GLM":            int64(TokenizerGLM),
	}
	for s, name := range statusNames {
		m[name] = int64(s)
	}
	return m
}

type abiField struct {
	name         string
	offset, size uintptr
}

type abiStruct struct {
	name        string
	size, align uintptr
	fields      []abiField
}

func field(name string, offset, size uintptr) abiField { return abiField{name, offset, size} }

// abiStructs lists every header struct the binding uses, field by field.
func abiStructs() []abiStruct {
	var e C.llm_error
	var t C.llm_kv_tracker
	var o C.llm_runtime_options
	var ci C.llm_comm_id
	var ri C.llm_runtime_info
	var so C.llm_sampling_options
	var si C.llm_session_info
	var r C.llm_step_result
	var ti C.llm_tokenizer_info
	var cm C.llm_chat_message
	var ks C.llm_kv_sizing
	return []abiStruct{
		{"llm_kv_sizing", unsafe.Sizeof(ks), unsafe.Alignof(ks), []abiField{
			field("struct_size", unsafe.Offsetof(ks.struct_size), unsafe.Sizeof(ks.struct_size)),
			field("kv_dtype", unsafe.Offsetof(ks.kv_dtype), unsafe.Sizeof(ks.kv_dtype)),
			field("num_layers", unsafe.Offsetof(ks.num_layers), unsafe.Sizeof(ks.num_layers)),
			field("elements_per_token_layer", unsafe.Offsetof(ks.elements_per_token_layer),
				unsafe.Sizeof(ks.elements_per_token_layer)),
			field("bytes_per_token", unsafe.Offsetof(ks.bytes_per_token), unsafe.Sizeof(ks.bytes_per_token)),
			field("capacity_tokens", unsafe.Offsetof(ks.capacity_tokens), unsafe.Sizeof(ks.capacity_tokens)),
			field("max_sessions", unsafe.Offsetof(ks.max_sessions), unsafe.Sizeof(ks.max_sessions)),
		}},
		{"llm_error", unsafe.Sizeof(e), unsafe.Alignof(e), []abiField{
			field("struct_size", unsafe.Offsetof(e.struct_size), unsafe.Sizeof(e.struct_size)),
			field("status", unsafe.Offsetof(e.status), unsafe.Sizeof(e.status)),
			field("message", unsafe.Offsetof(e.message), unsafe.Sizeof(e.message)),
		}},
		{"llm_kv_tracker", unsafe.Sizeof(t), unsafe.Alignof(t), []abiField{
			field("struct_size", unsafe.Offsetof(t.struct_size), unsafe.Sizeof(t.struct_size)),
			field("reserved0", unsafe.Offsetof(t.reserved0), unsafe.Sizeof(t.reserved0)),
			field("user_data", unsafe.Offsetof(t.user_data), unsafe.Sizeof(t.user_data)),
			field("on_alloc", unsafe.Offsetof(t.on_alloc), unsafe.Sizeof(t.on_alloc)),
			field("on_free", unsafe.Offsetof(t.on_free), unsafe.Sizeof(t.on_free)),
			field("on_share", unsafe.Offsetof(t.on_share), unsafe.Sizeof(t.on_share)),
			field("on_verify", unsafe.Offsetof(t.on_verify), unsafe.Sizeof(t.on_verify)),
			field("on_violation", unsafe.Offsetof(t.on_violation), unsafe.Sizeof(t.on_violation)),
			field("destroy", unsafe.Offsetof(t.destroy), unsafe.Sizeof(t.destroy)),
		}},
		{"llm_runtime_options", unsafe.Sizeof(o), unsafe.Alignof(o), []abiField{
			field("struct_size", unsafe.Offsetof(o.struct_size), unsafe.Sizeof(o.struct_size)),
			field("backend", unsafe.Offsetof(o.backend), unsafe.Sizeof(o.backend)),
			field("num_threads", unsafe.Offsetof(o.num_threads), unsafe.Sizeof(o.num_threads)),
			field("kv_dtype", unsafe.Offsetof(o.kv_dtype), unsafe.Sizeof(o.kv_dtype)),
			field("kv_budget_bytes", unsafe.Offsetof(o.kv_budget_bytes), unsafe.Sizeof(o.kv_budget_bytes)),
			field("page_size_tokens", unsafe.Offsetof(o.page_size_tokens), unsafe.Sizeof(o.page_size_tokens)),
			field("max_sessions", unsafe.Offsetof(o.max_sessions), unsafe.Sizeof(o.max_sessions)),
			field("max_tokens_per_step", unsafe.Offsetof(o.max_tokens_per_step), unsafe.Sizeof(o.max_tokens_per_step)),
			field("weight_memory", unsafe.Offsetof(o.weight_memory), unsafe.Sizeof(o.weight_memory)),
			field("kv_integrity", unsafe.Offsetof(o.kv_integrity), unsafe.Sizeof(o.kv_integrity)),
			field("kv_pressure", unsafe.Offsetof(o.kv_pressure), unsafe.Sizeof(o.kv_pressure)),
			field("tracker", unsafe.Offsetof(o.tracker), unsafe.Sizeof(o.tracker)),
			field("prefix_sharing", unsafe.Offsetof(o.prefix_sharing), unsafe.Sizeof(o.prefix_sharing)),
			field("reserved1", unsafe.Offsetof(o.reserved1), unsafe.Sizeof(o.reserved1)),
			field("prefill_weights", unsafe.Offsetof(o.prefill_weights), unsafe.Sizeof(o.prefill_weights)),
			field("decode_weights", unsafe.Offsetof(o.decode_weights), unsafe.Sizeof(o.decode_weights)),
			field("tensor_parallel", unsafe.Offsetof(o.tensor_parallel), unsafe.Sizeof(o.tensor_parallel)),
			field("expert_parallel", unsafe.Offsetof(o.expert_parallel), unsafe.Sizeof(o.expert_parallel)),
			field("world_size", unsafe.Offsetof(o.world_size), unsafe.Sizeof(o.world_size)),
			field("rank", unsafe.Offsetof(o.rank), unsafe.Sizeof(o.rank)),
			field("collective_timeout_ms", unsafe.Offsetof(o.collective_timeout_ms), unsafe.Sizeof(o.collective_timeout_ms)),
			field("reserved_parallel", unsafe.Offsetof(o.reserved_parallel), unsafe.Sizeof(o.reserved_parallel)),
			field("comm_id", unsafe.Offsetof(o.comm_id), unsafe.Sizeof(o.comm_id)),
			field("quantized_activations", unsafe.Offsetof(o.quantized_activations), unsafe.Sizeof(o.quantized_activations)),
			field("reserved_activations", unsafe.Offsetof(o.reserved_activations), unsafe.Sizeof(o.reserved_activations)),
		}},
		{"llm_comm_id", unsafe.Sizeof(ci), unsafe.Alignof(ci), []abiField{
			field("backend", unsafe.Offsetof(ci.backend), unsafe.Sizeof(ci.backend)),
			field("reserved", unsafe.Offsetof(ci.reserved), unsafe.Sizeof(ci.reserved)),
			field("bytes", unsafe.Offsetof(ci.bytes), unsafe.Sizeof(ci.bytes)),
		}},
		{"llm_runtime_info", unsafe.Sizeof(ri), unsafe.Alignof(ri), []abiField{
			field("struct_size", unsafe.Offsetof(ri.struct_size), unsafe.Sizeof(ri.struct_size)),
			field("architecture", unsafe.Offsetof(ri.architecture), unsafe.Sizeof(ri.architecture)),
			field("model_type", unsafe.Offsetof(ri.model_type), unsafe.Sizeof(ri.model_type)),
			field("backend", unsafe.Offsetof(ri.backend), unsafe.Sizeof(ri.backend)),
			field("kv_dtype", unsafe.Offsetof(ri.kv_dtype), unsafe.Sizeof(ri.kv_dtype)),
			field("vocab_size", unsafe.Offsetof(ri.vocab_size), unsafe.Sizeof(ri.vocab_size)),
			field("num_layers", unsafe.Offsetof(ri.num_layers), unsafe.Sizeof(ri.num_layers)),
			field("weight_memory", unsafe.Offsetof(ri.weight_memory), unsafe.Sizeof(ri.weight_memory)),
			field("num_parameters", unsafe.Offsetof(ri.num_parameters), unsafe.Sizeof(ri.num_parameters)),
			field("weight_bytes", unsafe.Offsetof(ri.weight_bytes), unsafe.Sizeof(ri.weight_bytes)),
			field("kv_bytes_per_token", unsafe.Offsetof(ri.kv_bytes_per_token), unsafe.Sizeof(ri.kv_bytes_per_token)),
			field("kv_capacity_tokens", unsafe.Offsetof(ri.kv_capacity_tokens), unsafe.Sizeof(ri.kv_capacity_tokens)),
			field("page_size_tokens", unsafe.Offsetof(ri.page_size_tokens), unsafe.Sizeof(ri.page_size_tokens)),
			field("pages_total", unsafe.Offsetof(ri.pages_total), unsafe.Sizeof(ri.pages_total)),
			field("pages_free", unsafe.Offsetof(ri.pages_free), unsafe.Sizeof(ri.pages_free)),
			field("num_sessions", unsafe.Offsetof(ri.num_sessions), unsafe.Sizeof(ri.num_sessions)),
			field("max_position_embeddings", unsafe.Offsetof(ri.max_position_embeddings), unsafe.Sizeof(ri.max_position_embeddings)),
			field("pages_shared", unsafe.Offsetof(ri.pages_shared), unsafe.Sizeof(ri.pages_shared)),
			field("prefix_lookup_tokens", unsafe.Offsetof(ri.prefix_lookup_tokens), unsafe.Sizeof(ri.prefix_lookup_tokens)),
			field("prefix_hit_tokens", unsafe.Offsetof(ri.prefix_hit_tokens), unsafe.Sizeof(ri.prefix_hit_tokens)),
			field("integrity_violations", unsafe.Offsetof(ri.integrity_violations), unsafe.Sizeof(ri.integrity_violations)),
			field("preemptions", unsafe.Offsetof(ri.preemptions), unsafe.Sizeof(ri.preemptions)),
			field("integrity_check_ns", unsafe.Offsetof(ri.integrity_check_ns), unsafe.Sizeof(ri.integrity_check_ns)),
			field("weight_bytes_f32", unsafe.Offsetof(ri.weight_bytes_f32), unsafe.Sizeof(ri.weight_bytes_f32)),
			field("weight_bytes_bf16", unsafe.Offsetof(ri.weight_bytes_bf16), unsafe.Sizeof(ri.weight_bytes_bf16)),
			field("weight_bytes_fp8", unsafe.Offsetof(ri.weight_bytes_fp8), unsafe.Sizeof(ri.weight_bytes_fp8)),
			field("weight_bytes_int4", unsafe.Offsetof(ri.weight_bytes_int4), unsafe.Sizeof(ri.weight_bytes_int4)),
			field("prefill_weights", unsafe.Offsetof(ri.prefill_weights), unsafe.Sizeof(ri.prefill_weights)),
			field("decode_weights", unsafe.Offsetof(ri.decode_weights), unsafe.Sizeof(ri.decode_weights)),
			field("kv_scale_source", unsafe.Offsetof(ri.kv_scale_source), unsafe.Sizeof(ri.kv_scale_source)),
			field("reserved2", unsafe.Offsetof(ri.reserved2), unsafe.Sizeof(ri.reserved2)),
			field("workspace_bytes", unsafe.Offsetof(ri.workspace_bytes), unsafe.Sizeof(ri.workspace_bytes)),
			field("tensor_parallel", unsafe.Offsetof(ri.tensor_parallel), unsafe.Sizeof(ri.tensor_parallel)),
			field("expert_parallel", unsafe.Offsetof(ri.expert_parallel), unsafe.Sizeof(ri.expert_parallel)),
			field("rank_weight_bytes", unsafe.Offsetof(ri.rank_weight_bytes), unsafe.Sizeof(ri.rank_weight_bytes)),
			field("rank_kv_capacity_tokens", unsafe.Offsetof(ri.rank_kv_capacity_tokens), unsafe.Sizeof(ri.rank_kv_capacity_tokens)),
			field("collective_ns", unsafe.Offsetof(ri.collective_ns), unsafe.Sizeof(ri.collective_ns)),
		}},
		{"llm_sampling_options", unsafe.Sizeof(so), unsafe.Alignof(so), []abiField{
			field("struct_size", unsafe.Offsetof(so.struct_size), unsafe.Sizeof(so.struct_size)),
			field("temperature", unsafe.Offsetof(so.temperature), unsafe.Sizeof(so.temperature)),
			field("top_k", unsafe.Offsetof(so.top_k), unsafe.Sizeof(so.top_k)),
			field("top_p", unsafe.Offsetof(so.top_p), unsafe.Sizeof(so.top_p)),
			field("min_p", unsafe.Offsetof(so.min_p), unsafe.Sizeof(so.min_p)),
			field("max_new_tokens", unsafe.Offsetof(so.max_new_tokens), unsafe.Sizeof(so.max_new_tokens)),
			field("seed", unsafe.Offsetof(so.seed), unsafe.Sizeof(so.seed)),
			field("stop_tokens", unsafe.Offsetof(so.stop_tokens), unsafe.Sizeof(so.stop_tokens)),
			field("num_stop_tokens", unsafe.Offsetof(so.num_stop_tokens), unsafe.Sizeof(so.num_stop_tokens)),
			field("flags", unsafe.Offsetof(so.flags), unsafe.Sizeof(so.flags)),
		}},
		{"llm_session_info", unsafe.Sizeof(si), unsafe.Alignof(si), []abiField{
			field("struct_size", unsafe.Offsetof(si.struct_size), unsafe.Sizeof(si.struct_size)),
			field("state", unsafe.Offsetof(si.state), unsafe.Sizeof(si.state)),
			field("id", unsafe.Offsetof(si.id), unsafe.Sizeof(si.id)),
			field("num_tokens", unsafe.Offsetof(si.num_tokens), unsafe.Sizeof(si.num_tokens)),
			field("num_pending", unsafe.Offsetof(si.num_pending), unsafe.Sizeof(si.num_pending)),
			field("num_generated", unsafe.Offsetof(si.num_generated), unsafe.Sizeof(si.num_generated)),
			field("num_pages", unsafe.Offsetof(si.num_pages), unsafe.Sizeof(si.num_pages)),
		}},
		{"llm_step_result", unsafe.Sizeof(r), unsafe.Alignof(r), []abiField{
			field("session", unsafe.Offsetof(r.session), unsafe.Sizeof(r.session)),
			field("session_id", unsafe.Offsetof(r.session_id), unsafe.Sizeof(r.session_id)),
			field("token", unsafe.Offsetof(r.token), unsafe.Sizeof(r.token)),
			field("finish_reason", unsafe.Offsetof(r.finish_reason), unsafe.Sizeof(r.finish_reason)),
			field("status", unsafe.Offsetof(r.status), unsafe.Sizeof(r.status)),
			field("num_prefilled", unsafe.Offsetof(r.num_prefilled), unsafe.Sizeof(r.num_prefilled)),
			field("failed_page", unsafe.Offsetof(r.failed_page), unsafe.Sizeof(r.failed_page)),
			field("num_failed_pages", unsafe.Offsetof(r.num_failed_pages), unsafe.Sizeof(r.num_failed_pages)),
			field("reserved", unsafe.Offsetof(r.reserved), unsafe.Sizeof(r.reserved)),
		}},
		{"llm_tokenizer_info", unsafe.Sizeof(ti), unsafe.Alignof(ti), []abiField{
			field("struct_size", unsafe.Offsetof(ti.struct_size), unsafe.Sizeof(ti.struct_size)),
			field("family", unsafe.Offsetof(ti.family), unsafe.Sizeof(ti.family)),
			field("vocab_size", unsafe.Offsetof(ti.vocab_size), unsafe.Sizeof(ti.vocab_size)),
			field("bos_id", unsafe.Offsetof(ti.bos_id), unsafe.Sizeof(ti.bos_id)),
			field("eos_id", unsafe.Offsetof(ti.eos_id), unsafe.Sizeof(ti.eos_id)),
		}},
		{"llm_chat_message", unsafe.Sizeof(cm), unsafe.Alignof(cm), []abiField{
			field("role", unsafe.Offsetof(cm.role), unsafe.Sizeof(cm.role)),
			field("content", unsafe.Offsetof(cm.content), unsafe.Sizeof(cm.content)),
		}},
	}
}

// statusString is the library's own name of a status (llm_status_string), for the ABI test.
func statusString(s Status) string { return C.GoString(C.llm_status_string(C.llm_status(s))) }
