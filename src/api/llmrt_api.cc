// The C ABI shim: handle structs, options translation, status mapping, and the catch-all that
// keeps every exception inside the library. No engine logic lives here.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "include/llmrt/llmrt.h"
#include "src/convert/convert.h"
#include "src/kv/kv_sizing.h"
#include "src/model/model.h"
#include "src/model/checkpoint.h"
#include "src/runtime/runtime.h"
#include "src/tokenizer/chat.h"
#include "src/tokenizer/detokenizer.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/log.h"
#include "src/util/file.h"
#include "src/util/status.h"

struct llm_runtime {
  std::unique_ptr<llmrt::Runtime> rep;
};

struct llm_tokenizer {
  std::unique_ptr<llmrt::Tokenizer> rep;
};

struct llm_detokenizer {
  llmrt::IncrementalDetokenizer rep;
  std::string ready;  // text produced and not yet handed out
};

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

thread_local std::string g_last_error;

llm_status Fail(llm_status code, std::string msg) {
  g_last_error = std::move(msg);
  return code;
}

// The one mapping from internal status codes to the ABI's (see src/util/errors.h).
llm_status ToLlmStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return LLM_OK;
    case absl::StatusCode::kInvalidArgument: return LLM_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound: return LLM_ERR_NOT_FOUND;
    case absl::StatusCode::kUnknown: return LLM_ERR_IO;
    case absl::StatusCode::kDataLoss: return LLM_ERR_FORMAT;
    case absl::StatusCode::kUnimplemented: return LLM_ERR_UNSUPPORTED;
    case absl::StatusCode::kResourceExhausted: return LLM_ERR_OUT_OF_MEMORY;
    case absl::StatusCode::kUnavailable: return LLM_ERR_KV_EXHAUSTED;
    case absl::StatusCode::kAborted: return LLM_ERR_KV_INTEGRITY;
    case absl::StatusCode::kCancelled: return LLM_ERR_CANCELLED;
    case absl::StatusCode::kFailedPrecondition: return LLM_ERR_INVALID_STATE;
    case absl::StatusCode::kOutOfRange: return LLM_ERR_OUT_OF_RANGE;
    default: return LLM_ERR_INTERNAL;
  }
}

llm_status Report(const absl::Status& s) {
  if (s.ok()) return LLM_OK;
  return Fail(ToLlmStatus(s), std::string(s.message()));
}

// Copies text into a caller buffer with a NUL terminator; BUFFER_TOO_SMALL when it does not fit.
llm_status WriteText(const std::string& t, char* out, size_t capacity, size_t* out_len) {
  *out_len = t.size();
  if (capacity < t.size() + 1) {
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, "text needs " + std::to_string(t.size() + 1) + " bytes");
  }
  std::memcpy(out, t.data(), t.size());
  out[t.size()] = '\0';
  return LLM_OK;
}

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

llmrt::Session* FromHandle(llm_session* s) { return reinterpret_cast<llmrt::Session*>(s); }
const llmrt::Session* FromHandle(const llm_session* s) { return reinterpret_cast<const llmrt::Session*>(s); }
llm_session* ToHandle(llmrt::Session* s) { return reinterpret_cast<llm_session*>(s); }

// Copies the caller's options struct, honouring a smaller struct_size from an older header.
template <typename T>
bool ReadOptions(const T* in, T* out) {
  if (in == nullptr) return true;
  const uint32_t size = in->struct_size;
  if (size < sizeof(uint32_t) || size > (1u << 16)) return false;
  std::memcpy(out, in, std::min<size_t>(size, sizeof(T)));
  out->struct_size = sizeof(T);
  return true;
}

// Copies a filled output struct to the caller's, which may be an older, shorter version.
template <typename T>
void WriteOut(const T& filled, T* out) {
  const uint32_t n = std::min<uint32_t>(out->struct_size, sizeof(T));
  std::memcpy(out, &filled, n);
  out->struct_size = n;
}

}  // namespace

// Every entry point runs its body through this: exceptions become statuses.
#define LLM_GUARD_BEGIN try {
#define LLM_GUARD_END                                                                   \
  }                                                                                     \
  catch (const std::bad_alloc&) {                                                       \
    return Fail(LLM_ERR_OUT_OF_MEMORY, "out of memory");                                \
  }                                                                                     \
  catch (const llmrt::InternalError& e) {                                               \
    return Fail(LLM_ERR_INTERNAL, e.what());                                            \
  }                                                                                     \
  catch (const std::exception& e) {                                                     \
    return Fail(LLM_ERR_INTERNAL, std::string("unexpected exception: ") + e.what());    \
  }                                                                                     \
  catch (...) {                                                                         \
    return Fail(LLM_ERR_INTERNAL, "unexpected exception");                              \
  }

#define LLM_REQUIRE(ptr)                                                                \
  do {                                                                                  \
    if ((ptr) == nullptr) return Fail(LLM_ERR_INVALID_ARGUMENT, #ptr " must not be NULL"); \
  } while (0)

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

LLM_API const char* llm_last_error(void) { return g_last_error.c_str(); }

LLM_API llm_status llm_set_log_callback(llm_log_fn fn, void* user, llm_log_level min_level) {
  if (min_level < LLM_LOG_DEBUG || min_level > LLM_LOG_OFF) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "min_level must be LLM_LOG_DEBUG..LLM_LOG_OFF");
  }
  llmrt::SetLogSink(fn, user, static_cast<llmrt::LogLevel>(min_level));
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

LLM_API llm_status llm_runtime_create(const char* model_dir, const llm_runtime_options* options,
                                      llm_runtime** out_runtime) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_runtime);
  *out_runtime = nullptr;
  LLM_REQUIRE(model_dir);
  llm_runtime_options o;
  llm_runtime_options_init(&o);
  if (!ReadOptions(options, &o)) return Fail(LLM_ERR_INVALID_ARGUMENT, "options->struct_size is invalid");
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
  if (o.tracker != nullptr) {
    llm_kv_tracker t;
    std::memset(&t, 0, sizeof(t));
    const uint32_t ts = o.tracker->struct_size;
    if (ts < sizeof(uint32_t) || ts > (1u << 16)) {
      return Fail(LLM_ERR_INVALID_ARGUMENT, "options->tracker->struct_size is invalid");
    }
    std::memcpy(&t, o.tracker, std::min<size_t>(ts, sizeof(t)));
    ro.tracker = std::make_shared<CallbackTracker>(t);
  } else if (o.kv_integrity == LLM_KV_INTEGRITY_TAGS) {
    ro.tracker = std::shared_ptr<llmrt::KvTracker>(llmrt::MakeTagChecker());
  } else if (o.kv_integrity != LLM_KV_INTEGRITY_OFF) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "options->kv_integrity is not an LLM_KV_INTEGRITY_* value");
  }
  auto rt = llmrt::Runtime::Create(model_dir, ro);
  if (!rt.ok()) return Report(rt.status());
  *out_runtime = new llm_runtime{std::move(rt).value()};
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_runtime_destroy(llm_runtime* runtime) {
  try {
    delete runtime;
  } catch (...) {
  }
}

LLM_API llm_status llm_model_kv_sizing(const char* model_dir, int32_t kv_dtype, uint64_t kv_budget_bytes,
                                       uint32_t page_size_tokens, uint32_t session_tokens, llm_kv_sizing* out) {
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
  const llmrt::KvSizing k = llmrt::SizeKvCache(*llmrt::FindKvCodec(codec), llmrt::ModelKvShape(*c), kv_budget_bytes,
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

LLM_API void llm_sampling_options_init(llm_sampling_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->top_p = 1.0f;
}

namespace {

// Sampling options from the ABI struct (NULL: defaults).
llm_status ToSessionOptions(const llm_sampling_options* options, llmrt::SessionOptions* so) {
  llm_sampling_options o;
  llm_sampling_options_init(&o);
  if (!ReadOptions(options, &o)) return Fail(LLM_ERR_INVALID_ARGUMENT, "options->struct_size is invalid");
  if (o.num_stop_tokens > 0 && o.stop_tokens == nullptr) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "stop_tokens is NULL but num_stop_tokens > 0");
  }
  so->sampling.temperature = o.temperature;
  so->sampling.top_k = o.top_k;
  so->sampling.top_p = o.top_p;
  so->sampling.min_p = o.min_p;
  so->max_new_tokens = o.max_new_tokens;
  so->seed = o.seed;
  so->stop_tokens.assign(o.stop_tokens, o.stop_tokens + o.num_stop_tokens);
  return LLM_OK;
}

}  // namespace

namespace {

llm_status ExportKv(llm_session* session, const void* key, size_t key_len, void* buffer, size_t capacity,
                    size_t* out_size) {
  LLM_REQUIRE(session);
  LLM_REQUIRE(out_size);
  llmrt::Session* s = FromHandle(session);
  std::vector<uint8_t> blob;
  const absl::Status st =
      s->runtime()->ExportKv(s, absl::MakeConstSpan(static_cast<const uint8_t*>(key), key_len), &blob);
  if (!st.ok()) return Report(st);
  *out_size = blob.size();
  if (buffer == nullptr || capacity < blob.size()) {
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, "the export needs " + std::to_string(blob.size()) + " bytes");
  }
  std::memcpy(buffer, blob.data(), blob.size());
  return LLM_OK;
}

llm_status ImportKv(llm_runtime* runtime, const void* data, size_t size, const void* key, size_t key_len,
                    const llm_sampling_options* options, llm_session** out_session) {
  LLM_REQUIRE(out_session);
  *out_session = nullptr;
  LLM_REQUIRE(runtime);
  LLM_REQUIRE(data);
  llmrt::SessionOptions so;
  if (const llm_status st = ToSessionOptions(options, &so); st != LLM_OK) return st;
  auto s = runtime->rep->ImportKv(absl::MakeConstSpan(static_cast<const uint8_t*>(data), size),
                                  absl::MakeConstSpan(static_cast<const uint8_t*>(key), key_len), so);
  if (!s.ok()) return Report(s.status());
  *out_session = ToHandle(*s);
  return LLM_OK;
}

}  // namespace

LLM_API llm_status llm_session_export_kv(llm_session* session, void* buffer, size_t capacity, size_t* out_size) {
  LLM_GUARD_BEGIN
  return ExportKv(session, nullptr, 0, buffer, capacity, out_size);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_import_kv(llm_runtime* runtime, const void* data, size_t size,
                                         const llm_sampling_options* options, llm_session** out_session) {
  LLM_GUARD_BEGIN
  return ImportKv(runtime, data, size, nullptr, 0, options, out_session);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_export_kv_authenticated(llm_session* session, const void* key, size_t key_len,
                                                       void* buffer, size_t capacity, size_t* out_size) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(key);
  if (key_len == 0) return Fail(LLM_ERR_INVALID_ARGUMENT, "key_len must not be 0");
  return ExportKv(session, key, key_len, buffer, capacity, out_size);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_import_kv_authenticated(llm_runtime* runtime, const void* data, size_t size,
                                                       const void* key, size_t key_len,
                                                       const llm_sampling_options* options, llm_session** out_session) {
  LLM_GUARD_BEGIN
  if (out_session != nullptr) *out_session = nullptr;
  LLM_REQUIRE(key);
  if (key_len == 0) return Fail(LLM_ERR_INVALID_ARGUMENT, "key_len must not be 0");
  return ImportKv(runtime, data, size, key, key_len, options, out_session);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_create(llm_runtime* runtime, const llm_sampling_options* options,
                                      llm_session** out_session) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_session);
  *out_session = nullptr;
  LLM_REQUIRE(runtime);
  llmrt::SessionOptions so;
  if (const llm_status st = ToSessionOptions(options, &so); st != LLM_OK) return st;
  auto s = runtime->rep->CreateSession(so);
  if (!s.ok()) return Report(s.status());
  *out_session = ToHandle(*s);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_session_destroy(llm_session* session) {
  if (session == nullptr) return;
  try {
    llmrt::Session* s = FromHandle(session);
    s->runtime()->DestroySession(s);
  } catch (...) {
  }
}

LLM_API llm_status llm_session_append_tokens(llm_session* session, const int32_t* tokens, size_t num_tokens) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  if (num_tokens > 0) LLM_REQUIRE(tokens);
  llmrt::Session* s = FromHandle(session);
  return Report(s->runtime()->Append(s, absl::Span<const int32_t>(tokens, num_tokens)));
  LLM_GUARD_END
}

LLM_API llm_status llm_session_cancel(llm_session* session) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  llmrt::Session* s = FromHandle(session);
  return Report(s->runtime()->Cancel(s));
  LLM_GUARD_END
}

LLM_API llm_status llm_session_get_info(const llm_session* session, llm_session_info* info) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  LLM_REQUIRE(info);
  if (info->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "info->struct_size is not set");
  const llmrt::Session* s = FromHandle(session);
  const auto snap = s->runtime()->Snapshot(s);
  llm_session_info out;
  std::memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  switch (snap.state) {
    case llmrt::SessionState::kIdle: out.state = LLM_SESSION_IDLE; break;
    case llmrt::SessionState::kPrefill: out.state = LLM_SESSION_PREFILL; break;
    case llmrt::SessionState::kDecoding: out.state = LLM_SESSION_DECODING; break;
    case llmrt::SessionState::kFinished: out.state = LLM_SESSION_FINISHED; break;
    case llmrt::SessionState::kCancelled: out.state = LLM_SESSION_CANCELLED; break;
    case llmrt::SessionState::kFailed: out.state = LLM_SESSION_FAILED; break;
  }
  out.id = snap.id;
  out.num_tokens = snap.num_tokens;
  out.num_pending = snap.num_pending;
  out.num_generated = snap.num_generated;
  out.num_pages = snap.num_pages;
  WriteOut(out, info);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_session_get_logits(const llm_session* session, float* out, size_t capacity,
                                          size_t* out_count) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  LLM_REQUIRE(out_count);
  if (capacity > 0) LLM_REQUIRE(out);
  const llmrt::Session* s = FromHandle(session);
  absl::Status st = s->runtime()->CopyLogits(s, out, capacity, out_count);
  if (st.code() == absl::StatusCode::kResourceExhausted) return Fail(LLM_ERR_BUFFER_TOO_SMALL, std::string(st.message()));
  return Report(st);
  LLM_GUARD_END
}

LLM_API llm_status llm_decode_step(llm_runtime* runtime, llm_step_result* results, size_t capacity,
                                   size_t* out_count) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_count);
  *out_count = 0;
  LLM_REQUIRE(runtime);
  if (capacity > 0) LLM_REQUIRE(results);
  std::vector<llmrt::StepResult> rs;
  size_t needed = 0;
  absl::Status st = runtime->rep->Step(&rs, capacity, &needed);
  if (st.code() == absl::StatusCode::kOutOfRange) {
    *out_count = needed;
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, std::string(st.message()));
  }
  if (!st.ok()) return Report(st);
  LLMRT_CHECK(rs.size() <= capacity);
  for (size_t i = 0; i < rs.size(); ++i) {
    llm_step_result& r = results[i];
    std::memset(&r, 0, sizeof(r));
    r.session = ToHandle(rs[i].session);
    r.session_id = rs[i].session_id;
    r.token = rs[i].token;
    r.status = ToLlmStatus(rs[i].status);
    r.num_prefilled = rs[i].num_prefilled;
    r.failed_page = rs[i].failed_pages.empty() ? -1 : rs[i].failed_pages[0];
    r.num_failed_pages = static_cast<uint32_t>(rs[i].failed_pages.size());
    switch (rs[i].finish) {
      case llmrt::FinishReason::kNone: r.finish_reason = LLM_FINISH_NONE; break;
      case llmrt::FinishReason::kStop: r.finish_reason = LLM_FINISH_STOP; break;
      case llmrt::FinishReason::kLength: r.finish_reason = LLM_FINISH_LENGTH; break;
      case llmrt::FinishReason::kCancelled: r.finish_reason = LLM_FINISH_CANCELLED; break;
      case llmrt::FinishReason::kError: r.finish_reason = LLM_FINISH_ERROR; break;
    }
  }
  *out_count = rs.size();
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_score(llm_runtime* runtime, const int32_t* tokens, size_t num_tokens, float* logprobs,
                             int32_t* argmax) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(runtime);
  LLM_REQUIRE(tokens);
  LLM_REQUIRE(logprobs);
  return Report(runtime->rep->Score(absl::Span<const int32_t>(tokens, num_tokens), logprobs, argmax));
  LLM_GUARD_END
}

LLM_API llm_status llm_tokenizer_create(const char* model_dir, llm_tokenizer** out_tokenizer) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_tokenizer);
  *out_tokenizer = nullptr;
  LLM_REQUIRE(model_dir);
  auto t = llmrt::Tokenizer::Load(model_dir);
  if (!t.ok()) return Report(t.status());
  *out_tokenizer = new llm_tokenizer{std::move(t).value()};
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_tokenizer_destroy(llm_tokenizer* tokenizer) { delete tokenizer; }

LLM_API llm_status llm_tokenizer_get_info(const llm_tokenizer* tokenizer, llm_tokenizer_info* info) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(info);
  if (info->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "info->struct_size is not set");
  llm_tokenizer_info out;
  std::memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  out.family = tokenizer->rep->family() == llmrt::TokenizerFamily::kKimi ? LLM_TOKENIZER_KIMI : LLM_TOKENIZER_GLM;
  out.vocab_size = static_cast<uint32_t>(tokenizer->rep->vocab_size());
  out.bos_id = tokenizer->rep->bos_id();
  out.eos_id = tokenizer->rep->eos_id();
  WriteOut(out, info);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_tokenize(const llm_tokenizer* tokenizer, const char* text, size_t text_len,
                                int32_t parse_special, int32_t* tokens, size_t capacity, size_t* out_count) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(out_count);
  if (text_len > 0) LLM_REQUIRE(text);
  if (capacity > 0) LLM_REQUIRE(tokens);
  auto encoded = tokenizer->rep->Encode(std::string_view(text, text_len), parse_special != 0);
  if (!encoded.ok()) return Report(encoded.status());
  const std::vector<int32_t>& ids = *encoded;
  *out_count = ids.size();
  if (capacity < ids.size()) {
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, "the text encodes to " + std::to_string(ids.size()) + " tokens");
  }
  std::copy(ids.begin(), ids.end(), tokens);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_detokenize(const llm_tokenizer* tokenizer, const int32_t* tokens, size_t num_tokens,
                                  int32_t skip_special, char* text, size_t capacity, size_t* out_len) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(out_len);
  if (num_tokens > 0) LLM_REQUIRE(tokens);
  if (capacity > 0) LLM_REQUIRE(text);
  auto s = llmrt::Decode(*tokenizer->rep, absl::Span<const int32_t>(tokens, num_tokens), skip_special != 0);
  if (!s.ok()) return Report(s.status());
  return WriteText(*s, text, capacity, out_len);
  LLM_GUARD_END
}

LLM_API llm_status llm_tokenizer_special_id(const llm_tokenizer* tokenizer, const char* text, int32_t* out_id) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(text);
  LLM_REQUIRE(out_id);
  *out_id = tokenizer->rep->SpecialId(text);
  if (*out_id < 0) return Fail(LLM_ERR_NOT_FOUND, std::string("no special token \"") + text + "\"");
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_detokenizer_create(const llm_tokenizer* tokenizer, int32_t skip_special,
                                          llm_detokenizer** out_detokenizer) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_detokenizer);
  *out_detokenizer = nullptr;
  LLM_REQUIRE(tokenizer);
  *out_detokenizer = new llm_detokenizer{llmrt::IncrementalDetokenizer(*tokenizer->rep, skip_special != 0), {}};
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_detokenizer_destroy(llm_detokenizer* detokenizer) { delete detokenizer; }

LLM_API llm_status llm_detokenizer_push(llm_detokenizer* d, int32_t token, char* text, size_t capacity,
                                        size_t* out_len) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(d);
  LLM_REQUIRE(out_len);
  if (capacity > 0) LLM_REQUIRE(text);
  if (token != LLM_TOKEN_NONE) {
    absl::Status st = d->rep.Push(token, &d->ready);
    if (!st.ok()) return Report(st);
  }
  llm_status rc = WriteText(d->ready, text, capacity, out_len);
  if (rc == LLM_OK) d->ready.clear();
  return rc;
  LLM_GUARD_END
}

LLM_API llm_status llm_detokenizer_flush(llm_detokenizer* d, char* text, size_t capacity, size_t* out_len) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(d);
  LLM_REQUIRE(out_len);
  if (capacity > 0) LLM_REQUIRE(text);
  d->rep.Flush(&d->ready);
  llm_status rc = WriteText(d->ready, text, capacity, out_len);
  if (rc == LLM_OK) d->ready.clear();
  return rc;
  LLM_GUARD_END
}

LLM_API llm_status llm_chat_apply_template(const llm_tokenizer* tokenizer, const llm_chat_message* messages,
                                           size_t num_messages, int32_t add_generation_prompt,
                                           int32_t enable_thinking, char* text, size_t capacity, size_t* out_len) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(out_len);
  if (num_messages > 0) LLM_REQUIRE(messages);
  if (capacity > 0) LLM_REQUIRE(text);
  // The lengths are checked before anything is copied: the text limit bounds the rendering.
  size_t total = 0;
  for (size_t i = 0; i < num_messages; ++i) {
    if (messages[i].role == nullptr || messages[i].content == nullptr) {
      return Fail(LLM_ERR_INVALID_ARGUMENT, "message " + std::to_string(i) + " has a NULL role or content");
    }
    total += std::strlen(messages[i].role) + std::strlen(messages[i].content) + 16;  // + the tags around it
    if (total > llmrt::kMaxTextBytes) {
      return Fail(LLM_ERR_OUT_OF_RANGE, "the messages hold more than the " + std::to_string(llmrt::kMaxTextBytes) +
                                            "-byte text limit (message " + std::to_string(i) + ")");
    }
  }
  std::vector<llmrt::ChatMessage> m;
  m.reserve(num_messages);
  for (size_t i = 0; i < num_messages; ++i) m.push_back({messages[i].role, messages[i].content});
  auto s = llmrt::ApplyChatTemplate(tokenizer->rep->family(), m, add_generation_prompt != 0, enable_thinking != 0);
  if (!s.ok()) return Report(s.status());
  return WriteText(*s, text, capacity, out_len);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_get_failed_pages(const llm_session* session, uint32_t* pages, size_t capacity,
                                                size_t* out_count) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  LLM_REQUIRE(out_count);
  if (capacity > 0) LLM_REQUIRE(pages);
  const llmrt::Session* s = FromHandle(session);
  const std::vector<int32_t> failed = s->runtime()->FailedPages(s);
  *out_count = failed.size();
  for (size_t i = 0; i < failed.size() && i < capacity; ++i) pages[i] = static_cast<uint32_t>(failed[i]);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_test_control(llm_runtime* runtime, int32_t op, const int64_t* args, size_t num_args) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(runtime);
  if (num_args > 0) LLM_REQUIRE(args);
  std::vector<int64_t> a(args, args + num_args);
  switch (op) {
    case LLM_TESTCTL_KV_FREE_MAPPED_PAGE:
      return Report(runtime->rep->InjectKvFault(llmrt::KvFault::kFreeMappedPage, a));
    case LLM_TESTCTL_KV_CORRUPT_ENTRY:
      return Report(runtime->rep->InjectKvFault(llmrt::KvFault::kCorruptEntry, a));
    case LLM_TESTCTL_KV_SWAP_PAGES:
      return Report(runtime->rep->InjectKvFault(llmrt::KvFault::kSwapPages, a));
    default:
      return Fail(LLM_ERR_INVALID_ARGUMENT, "unknown llm_test_control op " + std::to_string(op));
  }
  LLM_GUARD_END
}

}  // extern "C"
