// ModelConfig: the architecture description read from a checkpoint's config.json.
#ifndef LLMRT_MODEL_CONFIG_H_
#define LLMRT_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/quant/quant_config.h"

namespace llmrt {

// Bounds on config.json values. Every one is far above the largest released Kimi K2.x, GLM-4.5
// to 5.x and DeepSeek-V3 value (in brackets), and small enough that every size the loaders, the
// forward pass and the KV sizing form from them stays far inside int64 (and inside int32 where a
// value becomes an int32 id or position). ParseModelConfig refuses a value above its bound with
// absl::OutOfRangeError naming the field, so nothing is allocated from an absurd value; the
// checkpoint's tensors then confirm each dimension. The "Limits" paragraph of llm_runtime_create
// (include/llmrt/llmrt.h) states them for hosts.
inline constexpr int64_t kMaxConfigJsonBytes = int64_t{4} << 20;   // config.json [~5 KiB]
inline constexpr int kMaxConfigJsonDepth = 32;                     // JSON nesting [4]
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;         // [163,840]
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 16;        // hidden_size, LoRA ranks [7,168]
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 18;  // dense and expert MLPs [18,432]
inline constexpr int64_t kMaxLayers = 1024;                        // num_hidden_layers [92]
inline constexpr int64_t kMaxHeads = 1024;                         // attention, KV and indexer heads [128]
inline constexpr int64_t kMaxHeadDim = 4096;                       // every per-head width [256]
inline constexpr int64_t kMaxRoutedExperts = 8192;                 // n_routed_experts [384]
inline constexpr int64_t kMaxSharedExperts = 64;                   // n_shared_experts [1]
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;         // max_position_embeddings [262,144]
inline constexpr int64_t kMaxQuantBlock = int64_t{1} << 16;        // FP8 blocks, INT4 groups [128]
// Real-valued fields (YaRN factor, mscales, betas, routed_scaling_factor) lie in [0, kMaxScale]
// so that no value the rope and router derive from them leaves the float range.
inline constexpr double kMaxScale = 1e6;
inline constexpr double kMaxRopeTheta = 1e12;  // [1e6]

struct RopeConfig {
  std::string type = "default";  // "default" or "yarn"
  double theta = 10000.0;
  // YaRN (rope_scaling / rope_parameters of DeepSeek-V3 and Kimi K2).
  double factor = 1.0;
  double mscale = 0.0;          // 0 when absent
  double mscale_all_dim = 0.0;  // 0 when absent
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
  bool truncate = true;
  double attention_factor = 0.0;  // 0 when absent (derived)
};

enum class ArchFamily {
  kDeepseekV3,  // DeepseekV3ForCausalLM / KimiK25ForConditionalGeneration: MLA + MoE
  kGlm4Moe,     // Glm4MoeForCausalLM (GLM-4.5 to 4.7): GQA + MoE
  kGlmMoeDsa,   // GlmMoeDsaForCausalLM (GLM-5.x): MLA + DeepSeek Sparse Attention + MoE
};

struct ModelConfig {
  ArchFamily family = ArchFamily::kDeepseekV3;
  std::string architecture;  // architectures[0] of the top-level config
  std::string model_type;    // of the language model config
  // Tensor name prefixes: "model." and "lm_head." for DeepseekV3ForCausalLM,
  // "language_model.model." and "language_model.lm_head." for KimiK25ForConditionalGeneration.
  std::string prefix = "model.";
  std::string lm_head_prefix = "lm_head.";

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: no q LoRA (q_proj)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // GQA (GLM-4.5): key/value heads, per-head width, rotary fraction, q/k norm, q/k/v biases.
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double partial_rotary_factor = 1.0;
  bool use_qk_norm = false;
  bool attention_bias = false;
  int64_t n_routed_experts = 0;  // 0: dense model
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  float routed_scaling_factor = 1.0f;
  bool norm_topk_prob = true;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool rope_interleave = true;
  RopeConfig rope;
  QuantConfig quant;
  // DeepSeek Sparse Attention (GLM-5): the lightning indexer's heads, width and top-k; which
  // layers run their own indexer ("full") and which reuse the previous full layer's selection
  // ("shared", transformers' indexer_types).
  int64_t index_topk = 0;  // 0: dense MLA (no indexer)
  int64_t index_head_dim = 0;
  int64_t index_n_heads = 0;
  std::vector<uint8_t> indexer_full;  // [num_layers], DSA only
  // Per-layer MLP kind from mlp_layer_types (1 = MoE); empty: first_k_dense_replace decides.
  std::vector<uint8_t> moe_layers;
  // Multi-token-prediction layers stored after the last decoder layer (not run).
  int64_t num_nextn_predict_layers = 0;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;

  // REQUIRES: 0 <= layer < num_layers (ParseModelConfig sized moe_layers and indexer_full so).
  bool IsMoeLayer(int64_t layer) const {
    if (!moe_layers.empty()) return n_routed_experts > 0 && moe_layers[layer] != 0;
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  bool HasIndexer() const { return index_topk > 0; }
  // Elements cached per token per layer: MLA, the latent plus the shared rope key, then (DSA) the
  // indexer key; GQA, the keys then the values of every KV head.
  int64_t KvWidth() const {
    if (family == ArchFamily::kGlm4Moe) return 2 * num_kv_heads * head_dim;
    return kv_lora_rank + qk_rope_head_dim + (HasIndexer() ? index_head_dim : 0);
  }
};

// Parses and validates config.json text. `source` names the file in error messages. Every field
// read is checked for its JSON type and its range (the bounds above) and the routing for
// consistency (top-k within the experts and the selected groups); errors name the field:
// FormatError for a wrong type or an inconsistent value, OutOfRangeError past a bound,
// UnsupportedError for a valid setting llmrt does not implement (softmax routing, another rope).
// Logs what it assumes for a MoE config without scoring_func / topk_method.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);

}  // namespace llmrt

#endif  // LLMRT_MODEL_CONFIG_H_
