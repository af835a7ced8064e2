#include "src/model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/util/errors.h"
#include "src/util/log.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

using json = nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The deepest nesting of objects and arrays in `text`, counting no further than `limit + 1`.
// Run before parsing: nlohmann's DOM costs tens of bytes per bracket, so a few MiB of "[[[[" would
// otherwise cost gigabytes before any field is looked at. Brackets inside strings do not count.
int JsonDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (ch == '}' || ch == ']') {
      depth = std::max(depth - 1, 0);
    }
  }
  return deepest;
}

// The value of `key`, or nullptr when it is absent or null (transformers writes null for unset
// optional fields).
const json* Find(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// Checks an integer JSON value named `name` against [lo, hi]: FormatError for a non-integer or a
// value below lo (negative sizes are corrupt data), OutOfRangeError above hi (llmrt's bound).
absl::Status IntValue(const json& v, const std::string& name, int64_t lo, int64_t hi, int64_t* out,
                      const std::string& src) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      return absl::OutOfRangeError(absl::StrCat(src, ": \"", name, "\" is ", u, ", above llmrt's limit of ", hi));
    }
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return FormatError(absl::StrCat(src, ": \"", name, "\" must be an integer, not ", v.type_name()));
  }
  if (x < lo) return FormatError(absl::StrCat(src, ": \"", name, "\" is ", x, "; it must be at least ", lo));
  if (x > hi) {
    return absl::OutOfRangeError(absl::StrCat(src, ": \"", name, "\" is ", x, ", above llmrt's limit of ", hi));
  }
  *out = x;
  return absl::OkStatus();
}

// Reads integer field `key` into *out (left as is when absent and not required).
absl::Status GetInt(const json& j, const char* key, bool required, int64_t lo, int64_t hi, int64_t* out,
                    const std::string& src) {
  const json* v = Find(j, key);
  if (v == nullptr) {
    if (required) return FormatError(absl::StrCat(src, ": missing required field \"", key, "\""));
    return absl::OkStatus();
  }
  return IntValue(*v, key, lo, hi, out, src);
}

// Reads a finite number in [lo, hi] (or (lo, hi] when lo_open); FormatError for a non-number, a
// non-finite value or one below the range; above it OutOfRangeError when hi is llmrt's limit
// (hi_is_limit), FormatError when it is the field's own (a fraction above 1).
absl::Status GetDouble(const json& j, const char* key, double lo, double hi, double* out, const std::string& src,
                       bool lo_open = false, bool hi_is_limit = true) {
  const json* v = Find(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" must be a number, not ", v->type_name()));
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo)) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" is ", x, "; it must be a finite number ",
                                    lo_open ? "above " : "of at least ", lo));
  }
  if (x > hi && !hi_is_limit) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" is ", x, "; it must be at most ", hi));
  }
  if (x > hi) {
    return absl::OutOfRangeError(absl::StrCat(src, ": \"", key, "\" is ", x, ", above llmrt's limit of ", hi));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const char* key, bool* out, const std::string& src) {
  const json* v = Find(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" must be a boolean, not ", v->type_name()));
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

// Reads a string field; *present (optional) says whether the config set it.
absl::Status GetString(const json& j, const char* key, std::string* out, const std::string& src,
                       bool* present = nullptr) {
  const json* v = Find(j, key);
  if (present != nullptr) *present = v != nullptr;
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" must be a string, not ", v->type_name()));
  }
  *out = v->get<std::string>();
  return absl::OkStatus();
}

// A token id field: one id or a list of ids, each in [0, 2^31) since ids are int32 everywhere.
absl::Status GetTokenIds(const json& j, const char* key, std::vector<int32_t>* out, const std::string& src) {
  const json* v = Find(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) {
    int64_t id = 0;
    LLMRT_RETURN_IF_ERROR(IntValue(*v, key, 0, kInt32Max, &id, src));
    out->push_back(static_cast<int32_t>(id));
    return absl::OkStatus();
  }
  if (v->size() > 1024) {
    return absl::OutOfRangeError(
        absl::StrCat(src, ": \"", key, "\" lists ", v->size(), " ids, above llmrt's limit of 1024"));
  }
  for (const json& e : *v) {
    int64_t id = 0;
    LLMRT_RETURN_IF_ERROR(IntValue(e, absl::StrCat(key, "[]"), 0, kInt32Max, &id, src));
    out->push_back(static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

absl::Status GetTokenId(const json& j, const char* key, int32_t* out, const std::string& src) {
  const json* v = Find(j, key);
  if (v == nullptr) return absl::OkStatus();
  int64_t id = 0;
  LLMRT_RETURN_IF_ERROR(IntValue(*v, key, 0, kInt32Max, &id, src));
  *out = static_cast<int32_t>(id);
  return absl::OkStatus();
}

// rope_theta and rope_parameters / rope_scaling (transformers >= 5 writes rope_parameters;
// released checkpoints carry rope_scaling).
absl::Status ParseRope(const json& j, ModelConfig& c, const std::string& src) {
  RopeConfig& r = c.rope;
  // theta > 1: the frequencies are theta^(-2i/d), and YaRN divides by ln(theta).
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "rope_theta", 1.0, kMaxRopeTheta, &r.theta, src, /*lo_open=*/true));
  const json* rp = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json* v = Find(j, key);
    if (v == nullptr) continue;
    if (!v->is_object()) {
      return FormatError(absl::StrCat(src, ": \"", key, "\" must be an object, not ", v->type_name()));
    }
    rp = v;
    break;
  }
  if (rp == nullptr) return absl::OkStatus();
  const std::string rsrc = src + ": rope parameters";
  LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "rope_theta", 1.0, kMaxRopeTheta, &r.theta, rsrc, /*lo_open=*/true));
  std::string type = "default";
  bool has_type = false;
  LLMRT_RETURN_IF_ERROR(GetString(*rp, "rope_type", &type, rsrc, &has_type));
  if (!has_type) LLMRT_RETURN_IF_ERROR(GetString(*rp, "type", &type, rsrc));
  if (type != "default" && type != "yarn") {
    return UnsupportedError(
        absl::StrCat(src, ": rope type \"", absl::CHexEscape(type), "\" is not supported (default, yarn)"));
  }
  r.type = type;
  if (type == "yarn") {
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "factor", 0.0, kMaxScale, &r.factor, rsrc, /*lo_open=*/true));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "mscale", 0.0, kMaxScale, &r.mscale, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "mscale_all_dim", 0.0, kMaxScale, &r.mscale_all_dim, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "beta_fast", 0.0, kMaxScale, &r.beta_fast, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "beta_slow", 0.0, kMaxScale, &r.beta_slow, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "attention_factor", 0.0, kMaxScale, &r.attention_factor, rsrc));
    LLMRT_RETURN_IF_ERROR(GetBool(*rp, "truncate", &r.truncate, rsrc));
    // transformers treats 0/null beta as its default.
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    if (r.beta_slow == 0) r.beta_slow = 1.0;
    r.original_max_position_embeddings = c.max_position_embeddings;
    LLMRT_RETURN_IF_ERROR(GetInt(*rp, "original_max_position_embeddings", false, 1, kMaxPositions,
                                 &r.original_max_position_embeddings, rsrc));
  }
  return absl::OkStatus();
}

// quantization_config of DeepSeek-style FP8 and compressed-tensors INT4 checkpoints (docs/models.md, section 4).
absl::Status ParseQuantConfig(const json& j, QuantConfig& q, const std::string& src) {
  const json* qcp = Find(j, "quantization_config");
  if (qcp == nullptr) return absl::OkStatus();
  if (!qcp->is_object()) {
    return FormatError(absl::StrCat(src, ": \"quantization_config\" must be an object, not ", qcp->type_name()));
  }
  const json& qc = *qcp;
  const std::string qsrc = src + ": quantization_config";
  std::string method;
  LLMRT_RETURN_IF_ERROR(GetString(qc, "quant_method", &method, qsrc));
  if (method == "fp8") {
    std::string fmt = "e4m3";
    LLMRT_RETURN_IF_ERROR(GetString(qc, "fmt", &fmt, qsrc));
    if (fmt != "e4m3") {
      return UnsupportedError(
          absl::StrCat(src, ": fp8 format \"", absl::CHexEscape(fmt), "\" is not supported (e4m3)"));
    }
    const json* b = Find(qc, "weight_block_size");
    if (b == nullptr) {
      return UnsupportedError(absl::StrCat(src, ": fp8 quantization needs weight_block_size [rows, cols] "
                                                "(per-tensor FP8 is not supported)"));
    }
    if (!b->is_array() || b->size() != 2) {
      return FormatError(absl::StrCat(qsrc, ": \"weight_block_size\" must be [rows, cols]"));
    }
    LLMRT_RETURN_IF_ERROR(IntValue((*b)[0], "weight_block_size[0]", 1, kMaxQuantBlock, &q.block_rows, qsrc));
    LLMRT_RETURN_IF_ERROR(IntValue((*b)[1], "weight_block_size[1]", 1, kMaxQuantBlock, &q.block_cols, qsrc));
    q.method = QuantConfig::Method::kFp8Block;
    return absl::OkStatus();
  }
  if (method == "compressed-tensors") {
    std::string format;
    LLMRT_RETURN_IF_ERROR(GetString(qc, "format", &format, qsrc));
    if (format != "pack-quantized") {
      return UnsupportedError(absl::StrCat(src, ": compressed-tensors format \"", absl::CHexEscape(format),
                                           "\" is not supported (pack-quantized)"));
    }
    const json* groups = Find(qc, "config_groups");
    if (groups == nullptr || !groups->is_object() || groups->size() != 1) {
      return UnsupportedError(absl::StrCat(src, ": compressed-tensors needs exactly one config group"));
    }
    const json& g = groups->begin().value();
    const std::string gsrc = absl::StrCat(qsrc, ": config group \"", groups->begin().key(), "\"");
    if (!g.is_object()) return FormatError(absl::StrCat(gsrc, " must be an object"));
    const json* w = Find(g, "weights");
    if (w == nullptr || !w->is_object()) return FormatError(absl::StrCat(gsrc, " has no \"weights\" object"));
    const std::string wsrc = gsrc + ": weights";
    int64_t bits = 0, gs = 0;
    std::string type, strategy;
    bool symmetric = false;
    LLMRT_RETURN_IF_ERROR(GetInt(*w, "num_bits", false, 0, 64, &bits, wsrc));
    LLMRT_RETURN_IF_ERROR(GetString(*w, "type", &type, wsrc));
    LLMRT_RETURN_IF_ERROR(GetBool(*w, "symmetric", &symmetric, wsrc));
    LLMRT_RETURN_IF_ERROR(GetString(*w, "strategy", &strategy, wsrc));
    if (bits != 4 || type != "int" || !symmetric || strategy != "group") {
      return UnsupportedError(absl::StrCat(src, ": compressed-tensors weights must be 4-bit symmetric int with the "
                                                "group strategy"));
    }
    LLMRT_RETURN_IF_ERROR(GetInt(*w, "group_size", false, 0, kMaxQuantBlock, &gs, wsrc));
    if (gs <= 0 || gs % 32 != 0) {
      return UnsupportedError(absl::StrCat(src, ": INT4 group_size ", gs, " is not supported (a multiple of 32)"));
    }
    if (Find(g, "input_activations") != nullptr) {
      return UnsupportedError(absl::StrCat(src, ": quantized input activations are not supported (weight-only)"));
    }
    q.method = QuantConfig::Method::kCompressedInt4;
    q.group_size = gs;
    return absl::OkStatus();
  }
  return UnsupportedError(absl::StrCat(src, ": quant_method \"", absl::CHexEscape(method),
                                       "\" is not supported (fp8, compressed-tensors)"));
}

// hidden_act: only SiLU MLPs are implemented.
absl::Status CheckActivation(const json& j, const std::string& src) {
  std::string act = "silu";
  LLMRT_RETURN_IF_ERROR(GetString(j, "hidden_act", &act, src));
  if (act != "silu")
    return UnsupportedError(absl::StrCat(src, ": hidden_act \"", absl::CHexEscape(act), "\" is not supported (silu)"));
  return absl::OkStatus();
}

// Fields both MoE families share: expert counts and sizes, grouped top-k, the quantization.
absl::Status ParseMoeCommon(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(GetInt(j, "n_routed_experts", false, 0, kMaxRoutedExperts, &c.n_routed_experts, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "n_shared_experts", false, 0, kMaxSharedExperts, &c.n_shared_experts, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_experts_per_tok", false, 0, kMaxRoutedExperts, &c.num_experts_per_tok, src));
  LLMRT_RETURN_IF_ERROR(
      GetInt(j, "moe_intermediate_size", false, 0, kMaxIntermediateSize, &c.moe_intermediate_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "n_group", false, 0, kMaxRoutedExperts, &c.n_group, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "topk_group", false, 0, kMaxRoutedExperts, &c.topk_group, src));
  // Compared with layer indices only; transformers clamps it to num_hidden_layers.
  LLMRT_RETURN_IF_ERROR(GetInt(j, "first_k_dense_replace", false, 0, kInt64Max, &c.first_k_dense_replace, src));
  double scale = 1.0;
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "routed_scaling_factor", 0.0, kMaxScale, &scale, src, /*lo_open=*/true));
  c.routed_scaling_factor = static_cast<float>(scale);
  LLMRT_RETURN_IF_ERROR(GetBool(j, "norm_topk_prob", &c.norm_topk_prob, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_nextn_predict_layers", false, 0, kMaxLayers, &c.num_nextn_predict_layers, src));
  LLMRT_RETURN_IF_ERROR(ParseQuantConfig(j, c.quant, src));
  return absl::OkStatus();
}

// The router (src/backend/cpu/moe.cc) scores with a sigmoid, keeps the topk_group best of n_group
// equal groups and takes the num_experts_per_tok best experts of those: it indexes per-token
// arrays of num_experts_per_tok entries with expert ids, so every one of these must hold.
absl::Status ValidateRouting(const ModelConfig& c, const std::string& src) {
  if (c.n_routed_experts == 0) return absl::OkStatus();  // dense model
  const int64_t e = c.n_routed_experts, k = c.num_experts_per_tok, g = c.n_group, tg = c.topk_group;
  const std::string fields =
      absl::StrCat(" (n_routed_experts=", e, ", n_group=", g, ", topk_group=", tg, ", num_experts_per_tok=", k, ")");
  if (g < 1 || e % g != 0) {
    return FormatError(absl::StrCat(src, ": inconsistent routing: n_group must divide n_routed_experts", fields));
  }
  if (tg < 1 || tg > g) {
    return FormatError(absl::StrCat(src, ": inconsistent routing: topk_group must be in [1, n_group]", fields));
  }
  if (k < 1 || k > (e / g) * tg) {
    return FormatError(absl::StrCat(src, ": inconsistent routing: num_experts_per_tok must be in [1, ",
                                    "n_routed_experts / n_group * topk_group]", fields));
  }
  if (c.moe_intermediate_size < 1) {
    return FormatError(absl::StrCat(src, ": a MoE model needs moe_intermediate_size > 0"));
  }
  return absl::OkStatus();
}

// Logs `message` the first time `key` is seen in this process: a host that loads one checkpoint
// many times (several runtimes, llm_model_kv_sizing first) hears about it once.
void LogOnce(LogLevel level, const std::string& key, const std::string& message) {
  static std::mutex* mu = new std::mutex();
  static std::set<std::string>* seen = new std::set<std::string>();
  {
    std::lock_guard<std::mutex> lock(*mu);
    if (seen->size() < 4096 && !seen->insert(key).second) return;
  }
  Log(level, message);
}

// scoring_func and topk_method, which only some configs carry: transformers' DeepseekV3Config,
// Glm4MoeConfig and GlmMoeDsaConfig have neither (their routers always use sigmoid scores with
// e_score_correction_bias, i.e. noaux_tc), so transformers drops them when it saves a config,
// while the DeepSeek-V3, Kimi K2 and GLM-5 release configs say "sigmoid" and "noaux_tc".
// Functions llmrt does not implement are refused. A DeepSeek-family config without them is
// ambiguous to other tools (DeepSeek-V2 routed with softmax, and llama.cpp reads a missing
// field as softmax), so the assumption is logged; GLM models have only ever used sigmoid.
absl::Status ParseRoutingFunction(const json& j, const ModelConfig& c, const std::string& src) {
  std::string scoring = "sigmoid", topk = "noaux_tc";
  bool has_scoring = false, has_topk = false;
  LLMRT_RETURN_IF_ERROR(GetString(j, "scoring_func", &scoring, src, &has_scoring));
  LLMRT_RETURN_IF_ERROR(GetString(j, "topk_method", &topk, src, &has_topk));
  if (scoring != "sigmoid") {
    return UnsupportedError(
        absl::StrCat(src, ": scoring_func \"", absl::CHexEscape(scoring), "\" is not supported (sigmoid)"));
  }
  if (topk != "noaux_tc") {
    return UnsupportedError(
        absl::StrCat(src, ": topk_method \"", absl::CHexEscape(topk), "\" is not supported (noaux_tc)"));
  }
  if (c.family != ArchFamily::kDeepseekV3 || c.n_routed_experts == 0 || (has_scoring && has_topk)) {
    return absl::OkStatus();
  }
  const char* missing = !has_scoring ? (!has_topk ? "scoring_func and topk_method" : "scoring_func") : "topk_method";
  LogOnce(LogLevel::kWarning, src,
          absl::StrCat(src, ": no ", missing, "; routing experts with sigmoid scores and noaux_tc grouped top-k, ",
                       "as transformers' DeepseekV3 does and the DeepSeek-V3 and Kimi K2 releases say (softmax ",
                       "routing, DeepSeek-V2's, is not supported)"));
  return absl::OkStatus();
}

absl::Status ParseDeepseekV3(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(GetInt(j, "vocab_size", true, 1, kMaxVocabSize, &c.vocab_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "hidden_size", true, 1, kMaxHiddenSize, &c.hidden_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "intermediate_size", true, 1, kMaxIntermediateSize, &c.intermediate_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", true, 1, kMaxLayers, &c.num_layers, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", true, 1, kMaxHeads, &c.num_heads, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "q_lora_rank", false, 0, kMaxHiddenSize, &c.q_lora_rank, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "kv_lora_rank", true, 1, kMaxHiddenSize, &c.kv_lora_rank, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "qk_nope_head_dim", true, 0, kMaxHeadDim, &c.qk_nope_head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "qk_rope_head_dim", true, 2, kMaxHeadDim, &c.qk_rope_head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "v_head_dim", true, 1, kMaxHeadDim, &c.v_head_dim, src));
  LLMRT_RETURN_IF_ERROR(ParseMoeCommon(j, c, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "moe_layer_freq", false, 1, kInt64Max, &c.moe_layer_freq, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", true, 1, kMaxPositions, &c.max_position_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", 0.0, 1.0, &c.rms_norm_eps, src, /*lo_open=*/true,
                                  /*hi_is_limit=*/false));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", &c.tie_word_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "rope_interleave", &c.rope_interleave, src));
  LLMRT_RETURN_IF_ERROR(ParseRope(j, c, src));
  LLMRT_RETURN_IF_ERROR(CheckActivation(j, src));
  LLMRT_RETURN_IF_ERROR(ParseRoutingFunction(j, c, src));
  bool attention_bias = false;
  LLMRT_RETURN_IF_ERROR(GetBool(j, "attention_bias", &attention_bias, src));
  if (attention_bias) return UnsupportedError(absl::StrCat(src, ": attention_bias=true is not supported"));
  LLMRT_RETURN_IF_ERROR(GetTokenIds(j, "eos_token_id", &c.eos_token_ids, src));
  LLMRT_RETURN_IF_ERROR(GetTokenId(j, "bos_token_id", &c.bos_token_id, src));
  // The rotary pairs (x[2i], x[2i+1]) or (x[i], x[i + d/2]) need an even width.
  if (c.qk_rope_head_dim % 2 != 0) return FormatError(absl::StrCat(src, ": qk_rope_head_dim must be even"));
  return ValidateRouting(c, src);
}

absl::Status ParseGlm4Moe(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(GetInt(j, "vocab_size", true, 1, kMaxVocabSize, &c.vocab_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "hidden_size", true, 1, kMaxHiddenSize, &c.hidden_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "intermediate_size", true, 1, kMaxIntermediateSize, &c.intermediate_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", true, 1, kMaxLayers, &c.num_layers, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", true, 1, kMaxHeads, &c.num_heads, src));
  c.num_kv_heads = c.num_heads;
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_key_value_heads", false, 1, kMaxHeads, &c.num_kv_heads, src));
  // transformers' default head_dim is hidden_size / num_attention_heads; both are bounded, so
  // the quotient is checked like an explicit value.
  c.head_dim = c.hidden_size / c.num_heads;
  LLMRT_RETURN_IF_ERROR(GetInt(j, "head_dim", false, 1, kMaxHeadDim, &c.head_dim, src));
  if (c.head_dim < 1 || c.head_dim > kMaxHeadDim) {
    return absl::OutOfRangeError(absl::StrCat(src, ": head_dim (hidden_size / num_attention_heads) is ", c.head_dim,
                                              ", outside [1, ", kMaxHeadDim, "]"));
  }
  LLMRT_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", true, 1, kMaxPositions, &c.max_position_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", 0.0, 1.0, &c.rms_norm_eps, src, /*lo_open=*/true,
                                  /*hi_is_limit=*/false));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", &c.tie_word_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "use_qk_norm", &c.use_qk_norm, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "attention_bias", &c.attention_bias, src));
  LLMRT_RETURN_IF_ERROR(ParseMoeCommon(j, c, src));
  LLMRT_RETURN_IF_ERROR(ParseRope(j, c, src));
  if (c.rope.type != "default") {
    return UnsupportedError(
        absl::StrCat(src, ": rope type \"", absl::CHexEscape(c.rope.type), "\" is not supported for glm4_moe"));
  }
  // GLM rotates half of each head by default (transformers' Glm4MoeConfig).
  c.partial_rotary_factor = 0.5;
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "partial_rotary_factor", 0.0, 1.0, &c.partial_rotary_factor, src,
                                  /*lo_open=*/true, /*hi_is_limit=*/false));
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (const json* rp = Find(j, key); rp != nullptr) {  // an object: ParseRope checked
      LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "partial_rotary_factor", 0.0, 1.0, &c.partial_rotary_factor,
                                      src + ": rope parameters", /*lo_open=*/true, /*hi_is_limit=*/false));
    }
  }
  c.rope_interleave = false;  // NeoX rotate_half
  LLMRT_RETURN_IF_ERROR(CheckActivation(j, src));
  LLMRT_RETURN_IF_ERROR(ParseRoutingFunction(j, c, src));
  if (c.num_heads % c.num_kv_heads != 0) {
    return FormatError(absl::StrCat(src, ": inconsistent attention sizes (heads ", c.num_heads, ", kv heads ",
                                    c.num_kv_heads, ", head_dim ", c.head_dim, ")"));
  }
  // int(head_dim * partial_rotary_factor) as transformers computes it; both factors are bounded.
  const int64_t rot = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  if (rot <= 0 || rot > c.head_dim || rot % 2 != 0) {
    return FormatError(
        absl::StrCat(src, ": partial_rotary_factor ", c.partial_rotary_factor, " gives rotary width ", rot));
  }
  LLMRT_RETURN_IF_ERROR(GetTokenIds(j, "eos_token_id", &c.eos_token_ids, src));
  LLMRT_RETURN_IF_ERROR(GetTokenId(j, "bos_token_id", &c.bos_token_id, src));
  return ValidateRouting(c, src);
}

// Reads an optional per-layer list of strings, each of which must be `a` (-> 1) or `b` (-> 0).
absl::Status GetLayerKinds(const json& j, const char* key, const char* a, const char* b, int64_t layers,
                           std::vector<uint8_t>* out, const std::string& src) {
  const json* v = Find(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array() || static_cast<int64_t>(v->size()) != layers) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" must list one entry per layer (", layers, ")"));
  }
  out->clear();
  for (const json& e : *v) {
    if (!e.is_string() || (e.get_ref<const std::string&>() != a && e.get_ref<const std::string&>() != b)) {
      return FormatError(absl::StrCat(src, ": \"", key, "\" entries must be \"", a, "\" or \"", b, "\""));
    }
    out->push_back(e.get_ref<const std::string&>() == a ? 1 : 0);
  }
  return absl::OkStatus();
}

// GLM-5.x: the DeepSeek-V3 fields plus the DSA indexer (transformers' GlmMoeDsaConfig).
absl::Status ParseGlmMoeDsa(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(ParseDeepseekV3(j, c, src));
  // GlmMoeDsaAttention applies the interleaved rotary layout unconditionally.
  c.rope_interleave = true;
  c.index_topk = 2048;
  c.index_head_dim = 128;
  c.index_n_heads = 32;
  LLMRT_RETURN_IF_ERROR(GetInt(j, "index_topk", false, 1, kMaxPositions, &c.index_topk, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "index_head_dim", false, 1, kMaxHeadDim, &c.index_head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "index_n_heads", false, 1, kMaxHeads, &c.index_n_heads, src));
  if (c.index_head_dim < c.qk_rope_head_dim) {
    return FormatError(absl::StrCat(src, ": DSA indexer needs index_topk > 0, index_n_heads > 0 and index_head_dim >= "
                                         "qk_rope_head_dim (got ", c.index_topk, ", ", c.index_n_heads, ", ",
                                    c.index_head_dim, ")"));
  }
  if (c.q_lora_rank <= 0) {
    return FormatError(absl::StrCat(src, ": glm_moe_dsa needs q_lora_rank (the indexer reads the q LoRA output)"));
  }
  // indexer_types, else the pattern transformers derives from index_topk_pattern (a string of F
  // and S, or a list like indexer_types) or from index_topk_freq / index_skip_topk_offset.
  c.indexer_full.assign(c.num_layers, 1);
  const json* pattern = Find(j, "index_topk_pattern");
  if (Find(j, "indexer_types") != nullptr) {
    LLMRT_RETURN_IF_ERROR(GetLayerKinds(j, "indexer_types", "full", "shared", c.num_layers, &c.indexer_full, src));
  } else if (pattern != nullptr && pattern->is_array()) {
    LLMRT_RETURN_IF_ERROR(GetLayerKinds(j, "index_topk_pattern", "full", "shared", c.num_layers, &c.indexer_full, src));
  } else if (pattern != nullptr) {
    if (!pattern->is_string() || static_cast<int64_t>(pattern->get_ref<const std::string&>().size()) != c.num_layers ||
        pattern->get_ref<const std::string&>().find_first_not_of("FS") != std::string::npos) {
      return FormatError(absl::StrCat(src, ": index_topk_pattern must be one F or S per layer"));
    }
    const std::string& p = pattern->get_ref<const std::string&>();
    for (int64_t i = 0; i < c.num_layers; ++i) c.indexer_full[i] = p[i] == 'F';
  } else {
    int64_t freq = 1, offset = 2;
    LLMRT_RETURN_IF_ERROR(GetInt(j, "index_topk_freq", false, 0, kInt64Max, &freq, src));
    LLMRT_RETURN_IF_ERROR(GetInt(j, "index_skip_topk_offset", false, 0, kInt64Max, &offset, src));
    freq = std::max<int64_t>(freq, 1);
    // i < kMaxLayers and offset >= 0: i - offset + 1 cannot overflow.
    for (int64_t i = 0; i < c.num_layers; ++i) c.indexer_full[i] = std::max<int64_t>(i - offset + 1, 0) % freq == 0;
  }
  if (!c.indexer_full[0]) {
    return FormatError(absl::StrCat(src, ": layer 0 is a shared-indexer layer; it has no earlier selection to reuse"));
  }
  LLMRT_RETURN_IF_ERROR(GetLayerKinds(j, "mlp_layer_types", "sparse", "dense", c.num_layers, &c.moe_layers, src));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source) {
  if (static_cast<int64_t>(json_text.size()) > kMaxConfigJsonBytes) {
    return absl::OutOfRangeError(absl::StrCat(source, ": ", json_text.size(), " bytes, above llmrt's limit of ",
                                              kMaxConfigJsonBytes, " for config.json"));
  }
  if (JsonDepth(json_text, kMaxConfigJsonDepth) > kMaxConfigJsonDepth) {
    return FormatError(absl::StrCat(source, ": JSON nested deeper than ", kMaxConfigJsonDepth, " levels"));
  }
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return FormatError(absl::StrCat(source, ": not a valid JSON object"));
  }
  ModelConfig c;
  const json* arch = Find(j, "architectures");
  if (arch == nullptr || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    return FormatError(absl::StrCat(source, ": missing \"architectures\" (a list of class names)"));
  }
  c.architecture = (*arch)[0].get<std::string>();
  const json* text = &j;
  if (c.architecture == "KimiK25ForConditionalGeneration") {
    text = Find(j, "text_config");
    if (text == nullptr || !text->is_object()) {
      return FormatError(absl::StrCat(source, ": KimiK25ForConditionalGeneration without text_config"));
    }
    c.prefix = "language_model.model.";
    c.lm_head_prefix = "language_model.lm_head.";
    c.family = ArchFamily::kDeepseekV3;
  } else if (c.architecture == "DeepseekV3ForCausalLM") {
    c.family = ArchFamily::kDeepseekV3;
  } else if (c.architecture == "Glm4MoeForCausalLM") {
    c.family = ArchFamily::kGlm4Moe;
  } else if (c.architecture == "GlmMoeDsaForCausalLM") {
    c.family = ArchFamily::kGlmMoeDsa;
  } else {
    return UnsupportedError(absl::StrCat(source, ": architecture \"", absl::CHexEscape(c.architecture),
                                         "\" is not supported (DeepseekV3ForCausalLM, "
                                         "KimiK25ForConditionalGeneration, GlmMoeDsaForCausalLM, "
                                         "Glm4MoeForCausalLM)"));
  }
  LLMRT_RETURN_IF_ERROR(GetString(*text, "model_type", &c.model_type, source));
  switch (c.family) {
    case ArchFamily::kGlm4Moe:
      LLMRT_RETURN_IF_ERROR(ParseGlm4Moe(j, c, source));
      break;
    case ArchFamily::kGlmMoeDsa:
      LLMRT_RETURN_IF_ERROR(ParseGlmMoeDsa(j, c, source));
      break;
    case ArchFamily::kDeepseekV3:
      LLMRT_RETURN_IF_ERROR(ParseDeepseekV3(*text, c, source));
      if (text != &j && c.quant.method == QuantConfig::Method::kNone) {
        LLMRT_RETURN_IF_ERROR(ParseQuantConfig(j, c.quant, source));  // K2.5 keeps it at the top level
      }
      break;
  }
  return c;
}

}  // namespace llmrt
