// Config, tensor list and byte accounting of the generated bench models (bench_model.h).
#include "tools/make_bench_model/bench_model.h"

#include <algorithm>

namespace llmrt::bench {

namespace {

// Bytes one weight matrix of `shape` occupies in its storage format (codes plus scales).
double StoredBytes(const BenchConfig& c, const std::string& name, const std::vector<int64_t>& shape, bool f32) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  if (!IsQuantized(c, name, shape)) return n * (f32 ? 4.0 : 2.0);
  if (c.weights == "fp8") {
    return n + 4.0 * static_cast<double>(((shape[0] + 127) / 128) * ((shape[1] + 127) / 128));
  }
  return n / 2 + 2.0 * static_cast<double>(shape[0] * (shape[1] / Int4Group(c)));
}

nlohmann::json ConfigJsonUnquantized(const BenchConfig& c) {
  if (c.gqa) {
    return {{"architectures", {"Glm4MoeForCausalLM"}},
            {"model_type", "glm4_moe"},
            {"vocab_size", c.vocab},
            {"hidden_size", c.hidden},
            {"intermediate_size", c.inter},
            {"moe_intermediate_size", c.moe_inter},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_heads},
            {"head_dim", c.head_dim},
            {"partial_rotary_factor", 0.5},
            {"attention_bias", true},
            {"use_qk_norm", true},
            {"n_routed_experts", c.experts},
            {"num_experts_per_tok", c.top_k},
            {"n_shared_experts", c.shared},
            {"n_group", 1},
            {"topk_group", 1},
            {"first_k_dense_replace", c.dense},
            {"routed_scaling_factor", 2.5},
            {"norm_topk_prob", true},
            {"rms_norm_eps", 1e-5},
            {"max_position_embeddings", 131072},
            {"rope_theta", 1000000.0},
            {"tie_word_embeddings", false}};
  }
  if (c.dsa) {
    nlohmann::json j = ConfigJsonUnquantized(BenchConfig{c.vocab, c.hidden, c.layers, c.heads, c.q_lora, c.kv_lora, c.nope,
                                              c.rope, c.v, c.inter, c.moe_inter, c.experts, c.top_k, c.shared,
                                              c.dense});
    j["architectures"] = {"GlmMoeDsaForCausalLM"};
    j["model_type"] = "glm_moe_dsa";
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    j["index_topk"] = c.index_topk;
    j["index_n_heads"] = c.index_heads;
    j["index_head_dim"] = c.index_dim;
    return j;
  }
  // model_type deepseek_v3 (Kimi K2's own config says kimi_k2, a remote-code type): llama.cpp's
  // converter loads the tokenizer through transformers' AutoTokenizer, which reads config.json
  // and knows deepseek_v3 but not kimi_k2. llmrt runs both the same.
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v3"},
          {"vocab_size", c.vocab},
          {"hidden_size", c.hidden},
          {"intermediate_size", c.inter},
          {"moe_intermediate_size", c.moe_inter},
          {"num_hidden_layers", c.layers},
          {"num_attention_heads", c.heads},
          {"num_key_value_heads", c.heads},
          {"q_lora_rank", c.q_lora},
          {"kv_lora_rank", c.kv_lora},
          {"qk_nope_head_dim", c.nope},
          {"qk_rope_head_dim", c.rope},
          {"v_head_dim", c.v},
          {"n_routed_experts", c.experts},
          {"num_experts_per_tok", c.top_k},
          {"n_shared_experts", c.shared},
          {"n_group", 1},
          {"topk_group", 1},
          {"first_k_dense_replace", c.dense},
          {"routed_scaling_factor", 2.827},
          // As in Kimi K2's and DeepSeek-V3's configs; llama.cpp's converter reads scoring_func
          // for the router's gating function and assumes softmax without it.
          {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"},
          {"norm_topk_prob", true},
          {"rms_norm_eps", 1e-6},
          {"max_position_embeddings", 131072},
          {"rope_theta", 50000.0},
          {"rope_scaling",
           {{"type", "yarn"}, {"factor", 32.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
            {"original_max_position_embeddings", 4096}, {"beta_fast", 1.0}, {"beta_slow", 1.0}}},
          {"tie_word_embeddings", false}};
}

}  // namespace

bool IsKnownWeights(const std::string& weights) {
  for (const char* w : {"bf16", "fp8", "int4-g32", "int4-g128", "int4-g32-all"}) {
    if (weights == w) return true;
  }
  return false;
}

BenchConfig ContextConfig(bool dsa, bool gqa) {
  BenchConfig c;
  c.vocab = 8192;
  c.hidden = 1024;
  c.heads = 16;
  c.q_lora = 512;
  c.inter = 2816;
  c.moe_inter = 512;
  c.experts = 8;
  c.top_k = 2;
  c.dsa = dsa;
  c.index_topk = 512;
  c.gqa = gqa;
  c.heads = gqa ? 8 : c.heads;  // GLM-4.5's 96 query heads over 8 KV heads of 128, scaled down
  return c;
}

BenchConfig SizedConfig(const std::string& structure, int64_t layers, int64_t hidden) {
  BenchConfig c;
  c.layers = layers;
  c.hidden = hidden;
  // Every width follows hidden as in the default (hidden 4096): heads of 128, q LoRA rank and
  // expert width hidden / 4, dense FFN 2 x hidden.
  c.heads = std::max<int64_t>(1, hidden / 128);
  c.q_lora = std::max<int64_t>(128, hidden / 4);
  c.moe_inter = std::max<int64_t>(128, hidden / 4);
  c.inter = 2 * hidden;
  c.dsa = structure == "glm5";
  c.gqa = structure == "glm45";
  // GLM-4.5 has 96 query heads over 8 KV heads; keep that ratio where the heads allow.
  c.kv_heads = std::max<int64_t>(1, c.heads / 8);
  return c;
}

bool RealConfig(const std::string& structure, int64_t layers, int64_t experts, BenchConfig* c) {
  BenchConfig r;
  if (structure == "k2-real") {
    r.vocab = 163840, r.hidden = 7168, r.heads = 64, r.q_lora = 1536, r.kv_lora = 512, r.nope = 128, r.rope = 64;
    r.v = 128, r.inter = 18432, r.moe_inter = 2048, r.dense = 1;
  } else if (structure == "glm5-real") {
    r.vocab = 154880, r.hidden = 6144, r.heads = 64, r.q_lora = 2048, r.kv_lora = 512, r.nope = 192, r.rope = 64;
    r.v = 256, r.inter = 12288, r.moe_inter = 2048, r.dense = 3;
    r.dsa = true, r.index_topk = 2048, r.index_heads = 32, r.index_dim = 128;
  } else if (structure == "glm45-real") {
    r.vocab = 151552, r.hidden = 5120, r.heads = 96, r.kv_heads = 8, r.head_dim = 128, r.inter = 12288;
    r.moe_inter = 1536, r.dense = 3, r.gqa = true;
  } else {
    return false;
  }
  r.layers = layers;
  r.experts = experts;
  r.top_k = std::min<int64_t>(8, experts);
  r.shared = 1;
  r.dense = std::min(r.dense, layers - 1);
  *c = r;
  return true;
}

int64_t Int4Group(const BenchConfig& c) {
  return c.weights.rfind("int4-g128", 0) == 0 ? 128 : 32;
}

bool IsQuantized(const BenchConfig& c, const std::string& name, const std::vector<int64_t>& shape) {
  if (c.weights == "bf16" || shape.size() != 2 || name.rfind("model.layers.", 0) != 0) return false;
  if (name.find("mlp.gate.weight") != std::string::npos || name.find(".indexer.") != std::string::npos) return false;
  if (c.weights == "fp8") return true;
  if (c.weights == "int4-g32-all") return name.find("kv_b_proj") == std::string::npos;
  return name.find(".mlp.experts.") != std::string::npos;
}

nlohmann::json ConfigJson(const BenchConfig& c) {
  nlohmann::json j = ConfigJsonUnquantized(c);
  if (c.weights == "fp8") {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}}};
  } else if (c.weights != "bf16") {
    j["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "pack-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", Int4Group(c)}}}}}}}};
  }
  return j;
}

std::vector<TensorSpec> Tensors(const BenchConfig& c) {
  std::vector<TensorSpec> t;
  const int64_t qk = c.nope + c.rope;
  t.push_back({"model.embed_tokens.weight", {c.vocab, c.hidden}});
  t.push_back({"model.norm.weight", {c.hidden}, false, true});
  t.push_back({"lm_head.weight", {c.vocab, c.hidden}});
  auto mlp = [&](const std::string& p, int64_t inter) {
    t.push_back({p + "gate_proj.weight", {inter, c.hidden}});
    t.push_back({p + "up_proj.weight", {inter, c.hidden}});
    t.push_back({p + "down_proj.weight", {c.hidden, inter}});
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", {c.hidden}, false, true});
    t.push_back({p + "post_attention_layernorm.weight", {c.hidden}, false, true});
    if (c.gqa) {
      const std::string a = p + "self_attn.";
      t.push_back({a + "q_proj.weight", {c.heads * c.head_dim, c.hidden}});
      t.push_back({a + "k_proj.weight", {c.kv_heads * c.head_dim, c.hidden}});
      t.push_back({a + "v_proj.weight", {c.kv_heads * c.head_dim, c.hidden}});
      t.push_back({a + "q_proj.bias", {c.heads * c.head_dim}});
      t.push_back({a + "k_proj.bias", {c.kv_heads * c.head_dim}});
      t.push_back({a + "v_proj.bias", {c.kv_heads * c.head_dim}});
      t.push_back({a + "o_proj.weight", {c.hidden, c.heads * c.head_dim}});
      t.push_back({a + "q_norm.weight", {c.head_dim}, false, true});
      t.push_back({a + "k_norm.weight", {c.head_dim}, false, true});
    } else {
      t.push_back({p + "self_attn.q_a_proj.weight", {c.q_lora, c.hidden}});
      t.push_back({p + "self_attn.q_a_layernorm.weight", {c.q_lora}, false, true});
      t.push_back({p + "self_attn.q_b_proj.weight", {c.heads * qk, c.q_lora}});
      t.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora + c.rope, c.hidden}});
      t.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora}, false, true});
      t.push_back({p + "self_attn.kv_b_proj.weight", {c.heads * (c.nope + c.v), c.kv_lora}});
      t.push_back({p + "self_attn.o_proj.weight", {c.hidden, c.heads * c.v}});
    }
    if (c.dsa) {
      const std::string x = p + "self_attn.indexer.";
      t.push_back({x + "wq_b.weight", {c.index_heads * c.index_dim, c.q_lora}});
      t.push_back({x + "wk.weight", {c.index_dim, c.hidden}});
      t.push_back({x + "k_norm.weight", {c.index_dim}, false, true});
      t.push_back({x + "k_norm.bias", {c.index_dim}});
      t.push_back({x + "weights_proj.weight", {c.index_heads, c.hidden}});
    }
    if (i < c.dense) {
      mlp(p + "mlp.", c.inter);
    } else {
      t.push_back({p + "mlp.gate.weight", {c.experts, c.hidden}});
      t.push_back({p + "mlp.gate.e_score_correction_bias", {c.experts}, true});
      for (int64_t e = 0; e < c.experts; ++e) mlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe_inter);
      mlp(p + "mlp.shared_experts.", c.moe_inter * c.shared);
    }
  }
  return t;
}

double WeightBytesPerToken(const BenchConfig& c) {
  double bytes = 0;
  double experts = 0;
  for (const auto& t : Tensors(c)) {
    if (t.name == "model.embed_tokens.weight") {
      bytes += c.hidden * 2.0;
      continue;
    }
    const double b = StoredBytes(c, t.name, t.shape, t.f32);
    if (t.name.find(".mlp.experts.") != std::string::npos) {
      experts += b;
    } else {
      bytes += b;
    }
  }
  return bytes + experts * static_cast<double>(c.top_k) / static_cast<double>(c.experts);
}

}  // namespace llmrt::bench
