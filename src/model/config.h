// ModelConfig: the architecture description read from a checkpoint's config.json.
#ifndef LLMRT_MODEL_CONFIG_H_
#define LLMRT_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/quant/quant_config.h"

namespace llmrt {

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

// Parses and validates config.json text. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);

}  // namespace llmrt

#endif  // LLMRT_MODEL_CONFIG_H_
