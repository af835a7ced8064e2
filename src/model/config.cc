#include "src/model/config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

using json = nlohmann::json;

// Reads an integer field; `required` fields must exist and be non-negative integers.
absl::Status GetInt(const json& j, const char* key, bool required, int64_t* out,
                    const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return FormatError(absl::StrCat(src, ": missing required field \"", key, "\""));
    return absl::OkStatus();
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return FormatError(absl::StrCat(src, ": field \"", key, "\" must be a non-negative integer"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& j, const char* key, double* out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return FormatError(absl::StrCat(src, ": field \"", key, "\" must be a number"));
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const char* key, bool* out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return FormatError(absl::StrCat(src, ": field \"", key, "\" must be a boolean"));
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status ParseRope(const json& j, ModelConfig& c, const std::string& src) {
  RopeConfig& r = c.rope;
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "rope_theta", &r.theta, src));
  // transformers >= 5 writes rope_parameters; released checkpoints carry rope_scaling.
  const json* rp = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_object()) {
      rp = &*it;
      break;
    }
  }
  if (rp == nullptr) return absl::OkStatus();
  const std::string rsrc = src + " rope parameters";
  LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "rope_theta", &r.theta, rsrc));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = rp->find(key);
    if (it != rp->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type != "default" && type != "yarn") {
    return UnsupportedError(absl::StrCat(src, ": rope type \"", type, "\" is not supported (default, yarn)"));
  }
  r.type = type;
  if (type == "yarn") {
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "factor", &r.factor, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "mscale", &r.mscale, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "mscale_all_dim", &r.mscale_all_dim, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "beta_fast", &r.beta_fast, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "beta_slow", &r.beta_slow, rsrc));
    LLMRT_RETURN_IF_ERROR(GetDouble(*rp, "attention_factor", &r.attention_factor, rsrc));
    LLMRT_RETURN_IF_ERROR(GetBool(*rp, "truncate", &r.truncate, rsrc));
    // transformers treats 0/null beta as its default.
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    if (r.beta_slow == 0) r.beta_slow = 1.0;
    r.original_max_position_embeddings = c.max_position_embeddings;
    LLMRT_RETURN_IF_ERROR(GetInt(*rp, "original_max_position_embeddings", false,
                                 &r.original_max_position_embeddings, rsrc));
    if (r.factor <= 0 || r.original_max_position_embeddings <= 0) {
      return FormatError(absl::StrCat(src, ": yarn needs factor > 0 and original_max_position_embeddings > 0"));
    }
  }
  return absl::OkStatus();
}

// quantization_config of DeepSeek-style FP8 and compressed-tensors INT4 checkpoints (MODELS.md 4).
absl::Status ParseQuantConfig(const json& j, QuantConfig& q, const std::string& src) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return FormatError(absl::StrCat(src, ": quantization_config must be an object"));
  const json& qc = *it;
  const std::string method = qc.value("quant_method", "");
  if (method == "fp8") {
    if (auto f = qc.find("fmt"); f != qc.end() && f->is_string() && f->get<std::string>() != "e4m3") {
      return UnsupportedError(absl::StrCat(src, ": fp8 format \"", f->get<std::string>(), "\" is not supported (e4m3)"));
    }
    auto b = qc.find("weight_block_size");
    if (b == qc.end() || !b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
        !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 || (*b)[1].get<int64_t>() <= 0) {
      return UnsupportedError(absl::StrCat(src, ": fp8 quantization needs weight_block_size [rows, cols] "
                                                "(per-tensor FP8 is not supported)"));
    }
    q.method = QuantConfig::Method::kFp8Block;
    q.block_rows = (*b)[0].get<int64_t>();
    q.block_cols = (*b)[1].get<int64_t>();
    return absl::OkStatus();
  }
  if (method == "compressed-tensors") {
    if (qc.value("format", "") != "pack-quantized") {
      return UnsupportedError(absl::StrCat(src, ": compressed-tensors format \"", qc.value("format", ""),
                                           "\" is not supported (pack-quantized)"));
    }
    auto groups = qc.find("config_groups");
    if (groups == qc.end() || !groups->is_object() || groups->size() != 1) {
      return UnsupportedError(absl::StrCat(src, ": compressed-tensors needs exactly one config group"));
    }
    const json& g = groups->begin().value();
    auto w = g.find("weights");
    if (w == g.end() || !w->is_object()) return FormatError(absl::StrCat(src, ": config group without \"weights\""));
    if (w->value("num_bits", 0) != 4 || w->value("type", "") != "int" || !w->value("symmetric", false) ||
        w->value("strategy", "") != "group") {
      return UnsupportedError(absl::StrCat(src, ": compressed-tensors weights must be 4-bit symmetric int with the "
                                                "group strategy"));
    }
    const int64_t gs = w->value("group_size", int64_t{0});
    if (gs <= 0 || gs % 32 != 0) {
      return UnsupportedError(absl::StrCat(src, ": INT4 group_size ", gs, " is not supported (a multiple of 32)"));
    }
    if (auto ia = g.find("input_activations"); ia != g.end() && !ia->is_null()) {
      return UnsupportedError(absl::StrCat(src, ": quantized input activations are not supported (weight-only)"));
    }
    q.method = QuantConfig::Method::kCompressedInt4;
    q.group_size = gs;
    return absl::OkStatus();
  }
  return UnsupportedError(absl::StrCat(src, ": quant_method \"", method,
                                       "\" is not supported (fp8, compressed-tensors)"));
}

// Fields both MoE families share: sizes, routing, norms, positions, tokens.
absl::Status ParseMoeCommon(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(GetInt(j, "n_routed_experts", false, &c.n_routed_experts, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "n_shared_experts", false, &c.n_shared_experts, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_experts_per_tok", false, &c.num_experts_per_tok, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "moe_intermediate_size", false, &c.moe_intermediate_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "n_group", false, &c.n_group, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "topk_group", false, &c.topk_group, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "first_k_dense_replace", false, &c.first_k_dense_replace, src));
  double scale = 1.0;
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "routed_scaling_factor", &scale, src));
  c.routed_scaling_factor = static_cast<float>(scale);
  LLMRT_RETURN_IF_ERROR(GetBool(j, "norm_topk_prob", &c.norm_topk_prob, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_nextn_predict_layers", false, &c.num_nextn_predict_layers, src));
  LLMRT_RETURN_IF_ERROR(ParseQuantConfig(j, c.quant, src));
  return absl::OkStatus();
}

absl::Status ParseDeepseekV3(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(GetInt(j, "vocab_size", true, &c.vocab_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "hidden_size", true, &c.hidden_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "intermediate_size", true, &c.intermediate_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", true, &c.num_layers, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", true, &c.num_heads, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "q_lora_rank", false, &c.q_lora_rank, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "kv_lora_rank", true, &c.kv_lora_rank, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "qk_nope_head_dim", true, &c.qk_nope_head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "qk_rope_head_dim", true, &c.qk_rope_head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "v_head_dim", true, &c.v_head_dim, src));
  LLMRT_RETURN_IF_ERROR(ParseMoeCommon(j, c, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "moe_layer_freq", false, &c.moe_layer_freq, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", true, &c.max_position_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", &c.rms_norm_eps, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", &c.tie_word_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "rope_interleave", &c.rope_interleave, src));
  LLMRT_RETURN_IF_ERROR(ParseRope(j, c, src));

  auto str_field = [&](const char* key, const char* def) {
    auto it = j.find(key);
    return (it != j.end() && it->is_string()) ? it->get<std::string>() : std::string(def);
  };
  if (auto act = str_field("hidden_act", "silu"); act != "silu") {
    return UnsupportedError(absl::StrCat(src, ": hidden_act \"", act, "\" is not supported (silu)"));
  }
  if (auto sf = str_field("scoring_func", "sigmoid"); sf != "sigmoid") {
    return UnsupportedError(absl::StrCat(src, ": scoring_func \"", sf, "\" is not supported (sigmoid)"));
  }
  if (auto tm = str_field("topk_method", "noaux_tc"); tm != "noaux_tc") {
    return UnsupportedError(absl::StrCat(src, ": topk_method \"", tm, "\" is not supported (noaux_tc)"));
  }
  bool attention_bias = false;
  LLMRT_RETURN_IF_ERROR(GetBool(j, "attention_bias", &attention_bias, src));
  if (attention_bias) return UnsupportedError(absl::StrCat(src, ": attention_bias=true is not supported"));

  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) c.eos_token_ids.push_back(it->get<int32_t>());
    if (it->is_array()) {
      for (const auto& e : *it) {
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
      }
    }
  }
  if (auto it = j.find("bos_token_id"); it != j.end() && it->is_number_integer()) {
    c.bos_token_id = it->get<int32_t>();
  }

  // Consistency.
  auto positive = [&](int64_t v, const char* name) -> absl::Status {
    if (v <= 0) return FormatError(absl::StrCat(src, ": ", name, " must be positive"));
    return absl::OkStatus();
  };
  LLMRT_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  LLMRT_RETURN_IF_ERROR(positive(c.hidden_size, "hidden_size"));
  LLMRT_RETURN_IF_ERROR(positive(c.num_layers, "num_hidden_layers"));
  LLMRT_RETURN_IF_ERROR(positive(c.num_heads, "num_attention_heads"));
  LLMRT_RETURN_IF_ERROR(positive(c.kv_lora_rank, "kv_lora_rank"));
  LLMRT_RETURN_IF_ERROR(positive(c.qk_rope_head_dim, "qk_rope_head_dim"));
  LLMRT_RETURN_IF_ERROR(positive(c.v_head_dim, "v_head_dim"));
  LLMRT_RETURN_IF_ERROR(positive(c.max_position_embeddings, "max_position_embeddings"));
  LLMRT_RETURN_IF_ERROR(positive(c.moe_layer_freq, "moe_layer_freq"));
  if (c.qk_rope_head_dim % 2 != 0) return FormatError(absl::StrCat(src, ": qk_rope_head_dim must be even"));
  if (c.n_routed_experts > 0) {
    LLMRT_RETURN_IF_ERROR(positive(c.num_experts_per_tok, "num_experts_per_tok"));
    LLMRT_RETURN_IF_ERROR(positive(c.moe_intermediate_size, "moe_intermediate_size"));
    LLMRT_RETURN_IF_ERROR(positive(c.n_group, "n_group"));
    if (c.n_routed_experts % c.n_group != 0 || c.topk_group < 1 || c.topk_group > c.n_group ||
        c.num_experts_per_tok > (c.n_routed_experts / c.n_group) * c.topk_group) {
      return FormatError(absl::StrCat(src, ": inconsistent routing: n_routed_experts=", c.n_routed_experts,
                                      " n_group=", c.n_group, " topk_group=", c.topk_group,
                                      " num_experts_per_tok=", c.num_experts_per_tok));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseGlm4Moe(const json& j, ModelConfig& c, const std::string& src) {
  LLMRT_RETURN_IF_ERROR(GetInt(j, "vocab_size", true, &c.vocab_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "hidden_size", true, &c.hidden_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "intermediate_size", true, &c.intermediate_size, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", true, &c.num_layers, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", true, &c.num_heads, src));
  c.num_kv_heads = c.num_heads;
  LLMRT_RETURN_IF_ERROR(GetInt(j, "num_key_value_heads", false, &c.num_kv_heads, src));
  if (c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  LLMRT_RETURN_IF_ERROR(GetInt(j, "head_dim", false, &c.head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", true, &c.max_position_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", &c.rms_norm_eps, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", &c.tie_word_embeddings, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "use_qk_norm", &c.use_qk_norm, src));
  LLMRT_RETURN_IF_ERROR(GetBool(j, "attention_bias", &c.attention_bias, src));
  LLMRT_RETURN_IF_ERROR(ParseMoeCommon(j, c, src));
  LLMRT_RETURN_IF_ERROR(ParseRope(j, c, src));
  if (c.rope.type != "default") {
    return UnsupportedError(absl::StrCat(src, ": rope type \"", c.rope.type, "\" is not supported for glm4_moe"));
  }
  // GLM rotates half of each head by default (transformers' Glm4MoeConfig).
  c.partial_rotary_factor = 0.5;
  LLMRT_RETURN_IF_ERROR(GetDouble(j, "partial_rotary_factor", &c.partial_rotary_factor, src));
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (auto it = j.find(key); it != j.end() && it->is_object()) {
      LLMRT_RETURN_IF_ERROR(GetDouble(*it, "partial_rotary_factor", &c.partial_rotary_factor, src));
    }
  }
  c.rope_interleave = false;  // NeoX rotate_half
  if (auto it = j.find("hidden_act"); it != j.end() && it->is_string() && it->get<std::string>() != "silu") {
    return UnsupportedError(absl::StrCat(src, ": hidden_act \"", it->get<std::string>(), "\" is not supported (silu)"));
  }
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.head_dim <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return FormatError(absl::StrCat(src, ": inconsistent attention sizes (heads ", c.num_heads, ", kv heads ",
                                    c.num_kv_heads, ", head_dim ", c.head_dim, ")"));
  }
  const int64_t rot = static_cast<int64_t>(c.head_dim * c.partial_rotary_factor);
  if (rot <= 0 || rot > c.head_dim || rot % 2 != 0) {
    return FormatError(absl::StrCat(src, ": partial_rotary_factor ", c.partial_rotary_factor, " gives rotary width ", rot));
  }
  if (c.n_routed_experts > 0 && (c.num_experts_per_tok <= 0 || c.moe_intermediate_size <= 0 || c.n_group <= 0 ||
                                 c.n_routed_experts % c.n_group != 0 || c.topk_group > c.n_group)) {
    return FormatError(absl::StrCat(src, ": inconsistent routing"));
  }
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) c.eos_token_ids.push_back(it->get<int32_t>());
    if (it->is_array()) {
      for (const auto& e : *it) {
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
      }
    }
  }
  return absl::OkStatus();
}

// Reads an optional list of strings, each of which must be one of `a` (-> 1) or `b` (-> 0).
absl::Status GetLayerKinds(const json& j, const char* key, const char* a, const char* b, int64_t layers,
                           std::vector<uint8_t>* out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array() || static_cast<int64_t>(it->size()) != layers) {
    return FormatError(absl::StrCat(src, ": \"", key, "\" must list one entry per layer (", layers, ")"));
  }
  out->clear();
  for (const auto& e : *it) {
    if (!e.is_string() || (e.get<std::string>() != a && e.get<std::string>() != b)) {
      return FormatError(absl::StrCat(src, ": \"", key, "\" entries must be \"", a, "\" or \"", b, "\""));
    }
    out->push_back(e.get<std::string>() == a ? 1 : 0);
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
  LLMRT_RETURN_IF_ERROR(GetInt(j, "index_topk", false, &c.index_topk, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "index_head_dim", false, &c.index_head_dim, src));
  LLMRT_RETURN_IF_ERROR(GetInt(j, "index_n_heads", false, &c.index_n_heads, src));
  if (c.index_topk <= 0 || c.index_n_heads <= 0 || c.index_head_dim < c.qk_rope_head_dim) {
    return FormatError(absl::StrCat(src, ": DSA indexer needs index_topk > 0, index_n_heads > 0 and index_head_dim >= "
                                         "qk_rope_head_dim (got ", c.index_topk, ", ", c.index_n_heads, ", ",
                                    c.index_head_dim, ")"));
  }
  if (c.q_lora_rank <= 0) {
    return FormatError(absl::StrCat(src, ": glm_moe_dsa needs q_lora_rank (the indexer reads the q LoRA output)"));
  }
  // indexer_types, else the pattern transformers derives from index_topk_pattern or
  // index_topk_freq / index_skip_topk_offset.
  c.indexer_full.assign(c.num_layers, 1);
  if (auto it = j.find("indexer_types"); it != j.end() && !it->is_null()) {
    LLMRT_RETURN_IF_ERROR(GetLayerKinds(j, "indexer_types", "full", "shared", c.num_layers, &c.indexer_full, src));
  } else if (auto pt = j.find("index_topk_pattern"); pt != j.end() && pt->is_string()) {
    const std::string pattern = pt->get<std::string>();
    if (static_cast<int64_t>(pattern.size()) != c.num_layers ||
        pattern.find_first_not_of("FS") != std::string::npos) {
      return FormatError(absl::StrCat(src, ": index_topk_pattern must be one F or S per layer"));
    }
    for (int64_t i = 0; i < c.num_layers; ++i) c.indexer_full[i] = pattern[i] == 'F';
  } else {
    int64_t freq = 1, offset = 2;
    LLMRT_RETURN_IF_ERROR(GetInt(j, "index_topk_freq", false, &freq, src));
    LLMRT_RETURN_IF_ERROR(GetInt(j, "index_skip_topk_offset", false, &offset, src));
    freq = std::max<int64_t>(freq, 1);
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
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return FormatError(absl::StrCat(source, ": not a valid JSON object"));
  }
  ModelConfig c;
  auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    return FormatError(absl::StrCat(source, ": missing \"architectures\""));
  }
  c.architecture = (*arch)[0].get<std::string>();
  const json* text = &j;
  if (c.architecture == "KimiK25ForConditionalGeneration") {
    auto tc = j.find("text_config");
    if (tc == j.end() || !tc->is_object()) {
      return FormatError(absl::StrCat(source, ": KimiK25ForConditionalGeneration without text_config"));
    }
    text = &*tc;
    c.prefix = "language_model.model.";
    c.lm_head_prefix = "language_model.lm_head.";
  } else if (c.architecture == "Glm4MoeForCausalLM") {
    if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) c.model_type = mt->get<std::string>();
    c.family = ArchFamily::kGlm4Moe;
    LLMRT_RETURN_IF_ERROR(ParseGlm4Moe(j, c, source));
    return c;
  } else if (c.architecture == "GlmMoeDsaForCausalLM") {
    if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) c.model_type = mt->get<std::string>();
    c.family = ArchFamily::kGlmMoeDsa;
    LLMRT_RETURN_IF_ERROR(ParseGlmMoeDsa(j, c, source));
    return c;
  } else if (c.architecture != "DeepseekV3ForCausalLM") {
    return UnsupportedError(absl::StrCat(source, ": architecture \"", c.architecture,
                                         "\" is not supported (DeepseekV3ForCausalLM, "
                                         "KimiK25ForConditionalGeneration, GlmMoeDsaForCausalLM, "
                                         "Glm4MoeForCausalLM)"));
  }
  if (auto mt = text->find("model_type"); mt != text->end() && mt->is_string()) {
    c.model_type = mt->get<std::string>();
  }
  c.family = ArchFamily::kDeepseekV3;
  LLMRT_RETURN_IF_ERROR(ParseDeepseekV3(*text, c, source));
  if (text != &j && c.quant.method == QuantConfig::Method::kNone) {
    LLMRT_RETURN_IF_ERROR(ParseQuantConfig(j, c.quant, source));  // K2.5 keeps it at the top level
  }
  return c;
}

}  // namespace llmrt
