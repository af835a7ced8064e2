// The C ABI: version, status strings, log sink, runtimes, KV sizing, conversion.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "src/api/api_internal.h"
#include "src/convert/convert.h"
#include "src/kv/kv_sizing.h"
#include "src/model/checkpoint.h"
#include "src/model/model.h"
#include "src/util/file.h"
#include "src/util/log.h"

using llmrt::api::Fail;
using llmrt::api::HandleErrorScope;
using llmrt::api::FromHandle;
using llmrt::api::ReadOptions;
using llmrt::api::Report;
using llmrt::api::ToHandle;
using llmrt::api::ToLlmStatus;
using llmrt::api::WriteOut;
using llmrt::api::WriteText;

namespace {

// Adapts the host's llm_kv_tracker callbacks to the engine's tracker interface.
class CallbackTracker final : public llmrt::KvTracker {
 public:
  explicit CallbackTracker(const llm_kv_tracker& t) : t_(t) {}
  ~CallbackTracker() override {
    if (t_.destroy) t_.destroy(t_.user_data);
  }
  bool verifies() const override { return true; }
  bool observes() const override { return t_.on_alloc || t_.on_free || t_.on_share; }
  void OnAlloc(uint64_t session, const llmrt::PageRef& r) override {
    if (t_.on_alloc) t_.on_alloc(t_.user_data, session, static_cast<uint32_t>(r.page), r.tag);
  }
  void OnFree(uint64_t session, const llmrt::PageRef& r) override {
    if (t_.on_free) t_.on_free(t_.user_data, session, static_cast<uint32_t>(r.page), r.tag);
  }
  void OnShare(uint64_t from, uint64_t to, const llmrt::PageRef& r) override {
    if (t_.on_share) t_.on_share(t_.user_data, from, to, static_cast<uint32_t>(r.page), r.tag);
  }
  bool OnVerify(uint64_t session, const std::vector<llmrt::PageRef>& refs) override {
    if (!t_.on_verify) return true;
    pages_.resize(refs.size());
    tags_.resize(refs.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      pages_[i] = static_cast<uint32_t>(refs[i].page);
      tags_[i] = refs[i].tag;
    }
    return t_.on_verify(t_.user_data, session, pages_.data(), tags_.data(), refs.size()) == 0;
  }
  void OnViolation(uint64_t session, int32_t entry, const llmrt::PageRef& expected, uint64_t actual) override {
    if (t_.on_violation) {
      t_.on_violation(t_.user_data, session, static_cast<uint32_t>(entry), static_cast<uint32_t>(expected.page),
                      expected.tag, actual);
    }
  }

 private:
  llm_kv_tracker t_;
  std::vector<uint32_t> pages_;
  std::vector<uint64_t> tags_;
};

// LLM_KV_DTYPE_* to the KV codec it names, and back.
bool KvCodecOf(int32_t kv_dtype, uint32_t* codec) {
  switch (kv_dtype) {
    case LLM_KV_DTYPE_AUTO:
    case LLM_KV_DTYPE_BF16: *codec = llmrt::kKvCodecBf16; return true;
    case LLM_KV_DTYPE_F32: *codec = llmrt::kKvCodecF32; return true;
    case LLM_KV_DTYPE_FP8_E4M3: *codec = llmrt::kKvCodecFp8; return true;
    case LLM_KV_DTYPE_FP8_E4M3_TILED: *codec = llmrt::kKvCodecFp8Tiled; return true;
    default: return false;
  }
}
int32_t KvDtypeOf(uint32_t codec) {
  switch (codec) {
    case llmrt::kKvCodecF32: return LLM_KV_DTYPE_F32;
    case llmrt::kKvCodecFp8: return LLM_KV_DTYPE_FP8_E4M3;
    case llmrt::kKvCodecFp8Tiled: return LLM_KV_DTYPE_FP8_E4M3_TILED;
    default: return LLM_KV_DTYPE_BF16;
  }
}

}  // namespace

extern "C" {

LLM_API const char* llm_version(void) { return LLMRT_VERSION_STRING; }

LLM_API uint32_t llm_version_number(void) {
  return LLMRT_VERSION_MAJOR * 1000000u + LLMRT_VERSION_MINOR * 1000u + LLMRT_VERSION_PATCH;
}

LLM_API const char* llm_status_string(llm_status status) {
  switch (status) {
    case LLM_OK: return "LLM_OK";
    case LLM_ERR_INVALID_ARGUMENT: return "LLM_ERR_INVALID_ARGUMENT";
    case LLM_ERR_NOT_FOUND: return "LLM_ERR_NOT_FOUND";
    case LLM_ERR_IO: return "LLM_ERR_IO";
    case LLM_ERR_FORMAT: return "LLM_ERR_FORMAT";
    case LLM_ERR_UNSUPPORTED: return "LLM_ERR_UNSUPPORTED";
    case LLM_ERR_OUT_OF_MEMORY: return "LLM_ERR_OUT_OF_MEMORY";
    case LLM_ERR_KV_EXHAUSTED: return "LLM_ERR_KV_EXHAUSTED";
    case LLM_ERR_KV_INTEGRITY: return "LLM_ERR_KV_INTEGRITY";
    case LLM_ERR_CANCELLED: return "LLM_ERR_CANCELLED";
    case LLM_ERR_INVALID_STATE: return "LLM_ERR_INVALID_STATE";
    case LLM_ERR_OUT_OF_RANGE: return "LLM_ERR_OUT_OF_RANGE";
    case LLM_ERR_BUFFER_TOO_SMALL: return "LLM_ERR_BUFFER_TOO_SMALL";
    case LLM_ERR_INTERNAL: return "LLM_ERR_INTERNAL";
    default: return "LLM_ERR_UNKNOWN_STATUS";
  }
}

LLM_API const char* llm_last_error(void) { return llmrt::api::LastError(); }

LLM_API llm_status llm_set_log_callback(llm_log_fn fn, void* user, llm_log_level min_level) {
  if (min_level < LLM_LOG_DEBUG || min_level > LLM_LOG_OFF) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "min_level must be LLM_LOG_DEBUG..LLM_LOG_OFF");
  }
  llmrt::SetLogSink(fn, user, static_cast<llmrt::LogLevel>(min_level));
  return LLM_OK;
}

LLM_API llm_status llm_set_log_callback_v2(llm_log_fn fn, void* user, llm_log_level min_level,
                                           llm_destroy_fn destroy) {
  if (min_level < LLM_LOG_DEBUG || min_level > LLM_LOG_OFF) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "min_level must be LLM_LOG_DEBUG..LLM_LOG_OFF");
  }
  llmrt::SetLogSink(fn, user, static_cast<llmrt::LogLevel>(min_level), destroy);
  return LLM_OK;
}

LLM_API void llm_runtime_options_init(llm_runtime_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->backend = LLM_BACKEND_AUTO;
  o->kv_dtype = LLM_KV_DTYPE_AUTO;
  o->kv_integrity = LLM_KV_INTEGRITY_OFF;
  o->kv_pressure = LLM_KV_PRESSURE_FAIL;
  o->prefix_sharing = 1;
}

namespace {

// llm_runtime_create and llm_runtime_create_synthetic: the same options, checks and statuses;
// synthetic_seed set makes the weights instead of reading them (model_dir then needs only
// config.json).
llm_status CreateRuntime(const char* model_dir, const llm_runtime_options* options, llm_runtime** out_runtime,
                         std::optional<uint64_t> synthetic_seed) {
  LLM_GUARD_BEGIN
  if (out_runtime != nullptr) *out_runtime = nullptr;  // on every failure, the tracker's included
  llm_runtime_options o;
  llm_runtime_options_init(&o);
  const bool options_readable = ReadOptions(options, &o);
  // The tracker is taken over first, so that every later failure releases it through its
  // destroy hook (the header promises destroy on a failed creation).
  std::shared_ptr<llmrt::KvTracker> callback_tracker;
  if (options_readable && o.tracker != nullptr) {
    llm_kv_tracker t;
    std::memset(&t, 0, sizeof(t));
    const uint32_t ts = o.tracker->struct_size;
    if (ts < sizeof(uint32_t) || ts > (1u << 16)) {
      return Fail(LLM_ERR_INVALID_ARGUMENT, "options->tracker->struct_size is invalid");
    }
    std::memcpy(&t, o.tracker, std::min<size_t>(ts, sizeof(t)));
    callback_tracker = std::make_shared<CallbackTracker>(t);
  }
  LLM_REQUIRE(out_runtime);
  *out_runtime = nullptr;
  if (model_dir == nullptr) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, synthetic_seed ? "config_dir must not be NULL" : "model_dir must not be NULL");
  }
  if (!options_readable) return Fail(LLM_ERR_INVALID_ARGUMENT, "options->struct_size is invalid");
  llmrt::RuntimeOptions ro;
  switch (o.backend) {
    case LLM_BACKEND_AUTO: ro.backend = llmrt::BackendKind::kAuto; break;
    case LLM_BACKEND_CPU: ro.backend = llmrt::BackendKind::kCpu; break;
    case LLM_BACKEND_CUDA: ro.backend = llmrt::BackendKind::kCuda; break;
    default: return Fail(LLM_ERR_INVALID_ARGUMENT, "options->backend is not an LLM_BACKEND_* value");
  }
  if (!KvCodecOf(o.kv_dtype, &ro.policy.kv_codec)) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "options->kv_dtype is not an LLM_KV_DTYPE_* value");
  }
  for (int32_t p : {o.prefill_weights, o.decode_weights}) {
    if (p < LLM_WEIGHTS_AS_STORED || p > LLM_WEIGHTS_INT4_G128) {
      return Fail(LLM_ERR_INVALID_ARGUMENT, "options->prefill_weights / decode_weights must be LLM_WEIGHTS_* values");
    }
  }
  // LLM_WEIGHTS_* values are the ExpertStorage enumerators in order.
  ro.policy.prefill_experts = static_cast<llmrt::ExpertStorage>(o.prefill_weights);
  ro.policy.decode_experts = static_cast<llmrt::ExpertStorage>(o.decode_weights);
  if (o.num_threads < 0) return Fail(LLM_ERR_INVALID_ARGUMENT, "options->num_threads must be >= 0");
  ro.num_threads = o.num_threads;
  if (o.kv_budget_bytes != 0) ro.kv_budget_bytes = o.kv_budget_bytes;
  if (o.page_size_tokens != 0) ro.page_size = o.page_size_tokens;
  if (o.max_sessions != 0) ro.max_sessions = o.max_sessions;
  if (o.max_tokens_per_step != 0) ro.max_tokens_per_step = o.max_tokens_per_step;
  switch (o.kv_pressure) {
    case LLM_KV_PRESSURE_FAIL: ro.kv_pressure = llmrt::KvPressurePolicy::kFail; break;
    case LLM_KV_PRESSURE_QUEUE: ro.kv_pressure = llmrt::KvPressurePolicy::kQueue; break;
    case LLM_KV_PRESSURE_PREEMPT: ro.kv_pressure = llmrt::KvPressurePolicy::kPreempt; break;
    default: return Fail(LLM_ERR_INVALID_ARGUMENT, "options->kv_pressure is not an LLM_KV_PRESSURE_* value");
  }
  ro.prefix_sharing = o.prefix_sharing != 0;
  if (callback_tracker != nullptr) {
    ro.tracker = std::move(callback_tracker);
  } else if (o.kv_integrity == LLM_KV_INTEGRITY_TAGS) {
    ro.tracker = std::shared_ptr<llmrt::KvTracker>(llmrt::MakeTagChecker());
  } else if (o.kv_integrity != LLM_KV_INTEGRITY_OFF) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "options->kv_integrity is not an LLM_KV_INTEGRITY_* value");
  }
  ro.tensor_parallel = o.tensor_parallel == 0 ? 1 : static_cast<int>(std::min<uint32_t>(o.tensor_parallel, 1u << 16));
  ro.expert_parallel = o.expert_parallel != 0;
  ro.world_size = o.world_size == 0 ? 1 : static_cast<int>(std::min<uint32_t>(o.world_size, 1u << 16));
  ro.rank = static_cast<int>(std::min<uint32_t>(o.rank, 1u << 16));
  if (o.collective_timeout_ms != 0) ro.collective_timeout_ms = o.collective_timeout_ms;
  if (o.comm_id != nullptr && ro.world_size > 1) {
    llmrt::CommId id;
    switch (o.comm_id->backend) {
      case LLM_BACKEND_CPU: id.kind = llmrt::CommIdKind::kMpi; break;
      case LLM_BACKEND_CUDA: id.kind = llmrt::CommIdKind::kNccl; break;
      default: return Fail(LLM_ERR_INVALID_ARGUMENT, "options->comm_id->backend is not LLM_BACKEND_CPU or _CUDA");
    }
    std::memcpy(id.bytes.data(), o.comm_id->bytes, id.bytes.size());
    ro.comm_id = id;
  }
  switch (o.quantized_activations) {
    case LLM_ACTIVATIONS_EXACT: ro.activations = llmrt::QuantizedActivations::kExact; break;
    case LLM_ACTIVATIONS_INT8: ro.activations = llmrt::QuantizedActivations::kInt8; break;
    case LLM_ACTIVATIONS_BF16: ro.activations = llmrt::QuantizedActivations::kBf16; break;
    case LLM_ACTIVATIONS_FP8: ro.activations = llmrt::QuantizedActivations::kFp8; break;
    default:
      return Fail(LLM_ERR_INVALID_ARGUMENT, "options->quantized_activations is not an LLM_ACTIVATIONS_* value");
  }
  switch (o.weight_memory) {
    case LLM_WEIGHT_MEMORY_AUTO: ro.weight_memory = llmrt::WeightMemory::kAuto; break;
    case LLM_WEIGHT_MEMORY_MAPPED: ro.weight_memory = llmrt::WeightMemory::kMapped; break;
    case LLM_WEIGHT_MEMORY_HUGE_PAGES: ro.weight_memory = llmrt::WeightMemory::kHugePages; break;
    default:
      return Fail(LLM_ERR_INVALID_ARGUMENT,
                  "options->weight_memory is not LLM_WEIGHT_MEMORY_AUTO, _MAPPED or _HUGE_PAGES");
  }
  ro.synthetic_seed = synthetic_seed;
  auto rt = llmrt::Runtime::Create(model_dir, ro);
  if (!rt.ok()) return Report(rt.status());
  *out_runtime = new llm_runtime{std::move(rt).value()};
  return LLM_OK;
  LLM_GUARD_END
}

}  // namespace

LLM_API llm_status llm_runtime_create(const char* model_dir, const llm_runtime_options* options,
                                      llm_runtime** out_runtime) {
  return CreateRuntime(model_dir, options, out_runtime, std::nullopt);
}

LLM_API llm_status llm_runtime_create_synthetic(const char* config_dir, uint64_t seed,
                                                const llm_runtime_options* options, llm_runtime** out_runtime) {
  return CreateRuntime(config_dir, options, out_runtime, seed);
}

LLM_API llm_status llm_comm_id_create(int32_t backend, llm_comm_id* out_id) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_id);  // written only on success
  absl::StatusOr<llmrt::CommId> id;
  switch (backend) {
    case LLM_BACKEND_CPU: id = llmrt::MakeMpiCommId(); break;
    case LLM_BACKEND_CUDA: id = llmrt::MakeNcclCommId(); break;
    default: return Fail(LLM_ERR_INVALID_ARGUMENT, "backend must be LLM_BACKEND_CPU or LLM_BACKEND_CUDA");
  }
  if (!id.ok()) return Report(id.status());
  llm_comm_id made;
  std::memset(&made, 0, sizeof(made));
  made.backend = backend;
  std::memcpy(made.bytes, id->bytes.data(), sizeof(made.bytes));
  *out_id = made;
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_runtime_create_v2(const char* model_dir, const llm_runtime_options* options,
                                         llm_runtime** out_runtime, llm_error* error) {
  const llm_status st = llm_runtime_create(model_dir, options, out_runtime);
  llmrt::api::FillError(st, error);
  return st;
}

LLM_API llm_status llm_runtime_last_error(const llm_runtime* runtime, llm_error* error) {
  return llmrt::api::LastErrorOf(runtime, "runtime", llmrt::api::KeyOf(runtime), error);
}

LLM_API void llm_runtime_destroy(llm_runtime* runtime) {
  if (runtime == nullptr) return;
  try {
    llmrt::api::ForgetHandleErrors(runtime->rep.get());  // its sessions' records
    llmrt::api::ForgetHandleErrors(runtime);
    delete runtime;
  } catch (...) {
  }
}

LLM_API llm_status llm_model_kv_sizing(const char* model_dir, int32_t kv_dtype, uint64_t kv_budget_bytes,
                                       uint32_t page_size_tokens, uint32_t session_tokens, llm_kv_sizing* out) {
  return llm_model_kv_sizing_v2(model_dir, kv_dtype, kv_budget_bytes, page_size_tokens, session_tokens, 1, out);
}

LLM_API llm_status llm_model_kv_sizing_v2(const char* model_dir, int32_t kv_dtype, uint64_t kv_budget_bytes,
                                          uint32_t page_size_tokens, uint32_t session_tokens, uint32_t tensor_parallel,
                                          llm_kv_sizing* out) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(model_dir);
  LLM_REQUIRE(out);
  if (out->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "out->struct_size is not set");
  uint32_t codec = 0;
  if (!KvCodecOf(kv_dtype, &codec)) return Fail(LLM_ERR_INVALID_ARGUMENT, "kv_dtype is not an LLM_KV_DTYPE_* value");
  if (kv_dtype == LLM_KV_DTYPE_AUTO) kv_dtype = LLM_KV_DTYPE_BF16;
  const uint32_t page = page_size_tokens == 0 ? 16 : page_size_tokens;
  if (page > 4096) return Fail(LLM_ERR_INVALID_ARGUMENT, "page_size_tokens is outside [1, 4096]");
  const std::string dir(model_dir);
  absl::StatusOr<std::string> text = llmrt::ReadTextFile(dir + "/config.json");
  if (!text.ok()) return Report(text.status());
  absl::StatusOr<llmrt::ModelConfig> c = llmrt::ParseModelConfig(*text, dir + "/config.json");
  if (!c.ok()) return Report(c.status());
  const int tp = tensor_parallel == 0 ? 1 : static_cast<int>(std::min<uint32_t>(tensor_parallel, 1u << 16));
  llmrt::ShardPlan plan;
  plan.size = tp;
  if (absl::Status st = llmrt::CheckShardable(*c, plan); !st.ok()) return Report(st);
  const llmrt::KvSizing k = llmrt::SizeKvCache(*llmrt::FindKvCodec(codec), llmrt::ModelKvShape(*c, tp), kv_budget_bytes,
                                               page, session_tokens);
  llm_kv_sizing r;
  std::memset(&r, 0, sizeof(r));
  r.struct_size = sizeof(r);
  r.kv_dtype = kv_dtype;
  r.num_layers = static_cast<uint32_t>(c->num_layers);
  r.elements_per_token_layer = static_cast<uint32_t>(k.width);
  r.bytes_per_token = k.bytes_per_token;
  r.capacity_tokens = k.capacity_tokens;
  r.max_sessions = k.sessions;
  WriteOut(r, out);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_runtime_get_info(const llm_runtime* runtime, llm_runtime_info* info) {
  HandleErrorScope error_scope(runtime);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(runtime);
  LLM_REQUIRE(info);
  if (info->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "info->struct_size is not set");
  const llmrt::RuntimeInfo i = runtime->rep->Info();
  llm_runtime_info out;
  std::memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  std::snprintf(out.architecture, sizeof(out.architecture), "%s", i.architecture.c_str());
  std::snprintf(out.model_type, sizeof(out.model_type), "%s", i.model_type.c_str());
  out.backend = i.backend == llmrt::BackendKind::kCuda ? LLM_BACKEND_CUDA : LLM_BACKEND_CPU;
  switch (i.weight_memory) {
    case llmrt::WeightMemory::kMapped: out.weight_memory = LLM_WEIGHT_MEMORY_MAPPED; break;
    case llmrt::WeightMemory::kHugePages: out.weight_memory = LLM_WEIGHT_MEMORY_HUGE_PAGES; break;
    default: out.weight_memory = LLM_WEIGHT_MEMORY_DEVICE; break;
  }
  out.kv_dtype = KvDtypeOf(i.kv_codec);
  out.vocab_size = static_cast<uint32_t>(i.vocab_size);
  out.num_layers = static_cast<uint32_t>(i.num_layers);
  out.num_parameters = i.num_parameters;
  out.weight_bytes = i.weight_bytes;
  out.kv_bytes_per_token = i.kv_bytes_per_token;
  out.kv_capacity_tokens = i.kv_capacity_tokens;
  out.page_size_tokens = static_cast<uint32_t>(i.page_size);
  out.pages_total = static_cast<uint32_t>(i.pages_total);
  out.pages_free = static_cast<uint32_t>(i.pages_free);
  out.num_sessions = static_cast<uint32_t>(i.num_sessions);
  out.max_position_embeddings = static_cast<uint32_t>(i.max_position_embeddings);
  out.pages_shared = static_cast<uint32_t>(i.pages_shared);
  out.prefix_lookup_tokens = i.prefix_lookup_tokens;
  out.prefix_hit_tokens = i.prefix_hit_tokens;
  out.integrity_violations = i.integrity_violations;
  out.preemptions = i.preemptions;
  out.integrity_check_ns = i.integrity_check_ns;
  out.weight_bytes_f32 = i.resident_weight_bytes[llmrt::kWeightF32];
  out.weight_bytes_bf16 = i.resident_weight_bytes[llmrt::kWeightBf16];
  out.weight_bytes_fp8 = i.resident_weight_bytes[llmrt::kWeightFp8Block];
  out.weight_bytes_int4 = i.resident_weight_bytes[llmrt::kWeightInt4Group];
  out.prefill_weights = static_cast<int32_t>(i.policy.prefill_experts);
  out.decode_weights = static_cast<int32_t>(i.policy.decode_experts);
  out.workspace_bytes = i.workspace_bytes;
  out.tensor_parallel = static_cast<uint32_t>(i.tensor_parallel);
  out.expert_parallel = i.expert_parallel ? 1 : 0;
  out.rank_weight_bytes = i.rank_weight_bytes;
  out.rank_kv_capacity_tokens = i.rank_kv_capacity_tokens;
  out.collective_ns = i.collective_ns;
  out.kv_scale_source = i.kv_scale_source == llmrt::KvScaleSource::kCheckpoint   ? LLM_KV_SCALE_CHECKPOINT
                        : i.kv_scale_source == llmrt::KvScaleSource::kCalibrated ? LLM_KV_SCALE_CALIBRATED
                        : i.kv_scale_source == llmrt::KvScaleSource::kPerTile    ? LLM_KV_SCALE_PER_TILE
                                                                                 : LLM_KV_SCALE_NONE;
  WriteOut(out, info);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_convert_options_init(llm_convert_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->target = LLM_CONVERT_INT4;
}

LLM_API llm_status llm_convert_checkpoint(const char* in_dir, const char* out_dir, const llm_convert_options* options,
                                          char* summary, size_t capacity, size_t* out_len) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(in_dir);
  LLM_REQUIRE(out_dir);
  if (capacity > 0) LLM_REQUIRE(summary);
  llm_convert_options o;
  llm_convert_options_init(&o);
  if (!ReadOptions(options, &o)) return Fail(LLM_ERR_INVALID_ARGUMENT, "options->struct_size is invalid");
  llmrt::ConvertOptions co;
  switch (o.target) {
    case LLM_CONVERT_INT4: co.target = llmrt::ConvertOptions::Target::kInt4; break;
    case LLM_CONVERT_FP8_BLOCK: co.target = llmrt::ConvertOptions::Target::kFp8Block; break;
    default: return Fail(LLM_ERR_INVALID_ARGUMENT, "options->target is not an LLM_CONVERT_* value");
  }
  if (o.fp8_block != 0) co.fp8_block = o.fp8_block;
  if (o.int4_group != 0) co.int4_group = o.int4_group;
  co.int4_all_linears = o.int4_all_linears != 0;
  if (o.max_shard_bytes != 0) co.max_shard_bytes = o.max_shard_bytes;
  std::string text;
  const absl::Status st = llmrt::ConvertCheckpoint(in_dir, out_dir, co, &text);
  if (!st.ok()) return Report(st);
  if (out_len != nullptr) *out_len = text.size();
  if (capacity > 0) {
    const size_t n = std::min(text.size(), capacity - 1);
    std::memcpy(summary, text.data(), n);
    summary[n] = '\0';
  }
  return LLM_OK;
  LLM_GUARD_END
}

}  // extern "C"
