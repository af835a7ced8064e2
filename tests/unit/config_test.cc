#include "src/model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "src/model/checkpoint.h"
#include "src/model/rope.h"

namespace llmrt {
namespace {

// Kimi K2's released config.json (abridged to the fields llmrt reads).
const char* kKimiK2 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
  "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
  "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "n_routed_experts": 384, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
  "first_k_dense_replace": 1, "moe_layer_freq": 1, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid",
  "topk_method": "noaux_tc", "norm_topk_prob": true, "rms_norm_eps": 1e-06, "max_position_embeddings": 131072,
  "rope_theta": 50000.0, "tie_word_embeddings": false, "hidden_act": "silu", "attention_bias": false,
  "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "bos_token_id": 163584, "eos_token_id": 163585
})";

TEST(Config, ParsesKimiK2) {
  auto c = ParseModelConfig(kKimiK2, "k2");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_layers, 61);
  EXPECT_EQ(c->KvWidth(), 576);
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_EQ(c->rope.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_EQ(c->prefix, "model.");
  // docs/models.md: K2 (factor 32) softmax scale 0.130861.
  EXPECT_NEAR(MlaSoftmaxScale(*c), 0.130861, 1e-6);
  // KV per token: 61 layers * 576 values * 2 bytes (BF16) = 70,272 bytes.
  EXPECT_EQ(c->num_layers * c->KvWidth() * 2, 70272);
}

TEST(Config, ParsesKimiK25NestedTextConfig) {
  std::string k25 = std::string(R"({"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "vision_config": {"hidden_size": 1152}, "text_config": )") + kKimiK2 + "}";
  auto c = ParseModelConfig(k25, "k25");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(c->model_type, "kimi_k2");
  EXPECT_EQ(c->prefix, "language_model.model.");
  EXPECT_EQ(c->lm_head_prefix, "language_model.lm_head.");
  EXPECT_EQ(c->hidden_size, 7168);
}

TEST(Config, RejectsUnknownArchitectureAndBadFields) {
  auto u = ParseModelConfig(R"({"architectures": ["LlamaForCausalLM"]})", "x");
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(u.status().message().find("LlamaForCausalLM"), std::string::npos);
  EXPECT_EQ(ParseModelConfig("{", "x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseModelConfig(R"({"model_type": "kimi_k2"})", "x").status().code(), absl::StatusCode::kDataLoss);
  std::string missing = kKimiK2;
  missing.replace(missing.find("\"kv_lora_rank\""), 14, "\"kv_lora_rankX\"");
  auto m = ParseModelConfig(missing, "x");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("kv_lora_rank"), std::string::npos) << m.status();
  std::string softmax = kKimiK2;
  softmax.replace(softmax.find("\"sigmoid\""), 9, "\"softmax\"");
  EXPECT_EQ(ParseModelConfig(softmax, "x").status().code(), absl::StatusCode::kUnimplemented);
  std::string groups = kKimiK2;
  groups.replace(groups.find("\"n_group\": 1"), 12, "\"n_group\": 5");
  EXPECT_EQ(ParseModelConfig(groups, "x").status().code(), absl::StatusCode::kDataLoss);
}

// GLM-4.5's released config.json (abridged).
const char* kGlm45 = R"({
  "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "vocab_size": 151552, "hidden_size": 5120,
  "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 92, "num_attention_heads": 96,
  "num_key_value_heads": 8, "head_dim": 128, "partial_rotary_factor": 0.5, "attention_bias": true,
  "use_qk_norm": true, "n_routed_experts": 160, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 1,
  "topk_group": 1, "first_k_dense_replace": 3, "routed_scaling_factor": 2.5, "norm_topk_prob": true,
  "rms_norm_eps": 1e-05, "max_position_embeddings": 131072, "rope_theta": 1000000, "hidden_act": "silu",
  "tie_word_embeddings": false, "eos_token_id": [151329, 151336, 151338]
})";

TEST(Config, ParsesGlm45) {
  auto c = ParseModelConfig(kGlm45, "glm45");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ArchFamily::kGlm4Moe);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 0.5);
  EXPECT_FALSE(c->rope_interleave);
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_TRUE(c->IsMoeLayer(3));
  EXPECT_EQ(c->eos_token_ids.size(), 3u);
  // docs/models.md: 2 * 8 * 128 values per layer, 376,832 bytes per token in BF16 over 92 layers.
  EXPECT_EQ(c->num_layers * c->KvWidth() * 2, 376832);
  std::string bad = kGlm45;
  bad.replace(bad.find("\"num_key_value_heads\": 8"), 24, "\"num_key_value_heads\": 7");
  EXPECT_EQ(ParseModelConfig(bad, "x").status().code(), absl::StatusCode::kDataLoss);
}

// GLM-5's released config.json (abridged; tests/data/configs/glm-5).
const char* kGlm5 = R"({
  "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
  "vocab_size": 154880, "hidden_size": 6144, "intermediate_size": 12288, "moe_intermediate_size": 2048,
  "num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 64,
  "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
  "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
  "first_k_dense_replace": 3, "routed_scaling_factor": 2.5, "norm_topk_prob": true, "rms_norm_eps": 1e-05,
  "max_position_embeddings": 202752, "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "tie_word_embeddings": false, "hidden_act": "silu", "attention_bias": false,
  "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32, "num_nextn_predict_layers": 1
})";

TEST(Config, ParsesGlm5Dsa) {
  auto c = ParseModelConfig(kGlm5, "glm5");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ArchFamily::kGlmMoeDsa);
  EXPECT_TRUE(c->HasIndexer());
  EXPECT_EQ(c->index_topk, 2048);
  EXPECT_TRUE(c->rope_interleave);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  ASSERT_EQ(c->indexer_full.size(), 78u);
  for (uint8_t f : c->indexer_full) EXPECT_TRUE(f);  // index_topk_freq defaults to 1: all full
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_TRUE(c->IsMoeLayer(3));
  // docs/models.md: 576 (MLA) + 128 (indexer key) values; the MLA part is 89,856 B per token in BF16.
  EXPECT_EQ(c->KvWidth(), 704);
  EXPECT_EQ(c->num_layers * 576 * 2, 89856);
  EXPECT_EQ(c->num_layers * c->KvWidth() * 2, 109824);
  // No YaRN: the softmax scale is (192 + 64)^-0.5.
  EXPECT_NEAR(MlaSoftmaxScale(*c), 1.0 / 16.0, 1e-7);
}

TEST(Config, Glm5IndexerAndMlpLayerPatterns) {
  auto with = [](const std::string& extra) {
    std::string j = kGlm5;
    j.insert(j.rfind('}'), ", " + extra);
    return ParseModelConfig(j, "glm5");
  };
  // transformers' derived pattern: full when max(i - offset + 1, 0) % freq == 0.
  auto c = with(R"("index_topk_freq": 4, "index_skip_topk_offset": 3)");
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 12; ++i) {
    const bool full = std::max(i - 3 + 1, 0) % 4 == 0;
    EXPECT_EQ(c->indexer_full[i] != 0, full) << "layer " << i;
  }
  std::string pattern(78, 'S');
  pattern[0] = 'F';
  pattern[40] = 'F';
  c = with("\"index_topk_pattern\": \"" + pattern + "\"");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->indexer_full[40]);
  EXPECT_FALSE(c->indexer_full[41]);
  // An explicit list wins; layer 0 cannot be shared.
  std::string types = "\"indexer_types\": [\"shared\"";
  for (int i = 1; i < 78; ++i) types += ", \"full\"";
  EXPECT_EQ(with(types + "]").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with(R"("indexer_types": ["full"])").status().code(), absl::StatusCode::kDataLoss);
  // mlp_layer_types overrides first_k_dense_replace.
  std::string mlp = "\"mlp_layer_types\": [\"sparse\"";
  for (int i = 1; i < 78; ++i) mlp += i == 5 ? ", \"dense\"" : ", \"sparse\"";
  c = with(mlp + "]");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->IsMoeLayer(0));
  EXPECT_FALSE(c->IsMoeLayer(5));
  EXPECT_EQ(with(R"("mlp_layer_types": ["moe"])").status().code(), absl::StatusCode::kDataLoss);
  // The indexer reads the q LoRA output; its key must hold the rotary part.
  std::string no_lora = kGlm5;
  no_lora.replace(no_lora.find("\"q_lora_rank\": 2048"), 19, "\"q_lora_rank\": null");
  EXPECT_EQ(ParseModelConfig(no_lora, "x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with(R"("index_head_dim": 32)").status().code(), absl::StatusCode::kDataLoss);
}

// The released configs (tests/data/configs) parse well inside the bounds.
TEST(Config, ReleasedConfigsParse) {
  for (const char* name : {"kimi-k2", "glm-4.5", "glm-5"}) {
    const std::string path = std::string(LLMRT_TEST_DATA) + "/configs/" + name + "/config.json";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    auto c = ParseModelConfig(text.str(), path);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_LE(c->num_layers * 8, kMaxLayers) << name;
    EXPECT_LE(c->n_routed_experts * 8, kMaxRoutedExperts) << name;
    EXPECT_LE(c->vocab_size * 8, kMaxVocabSize) << name;
  }
}

// A bound is inclusive: the bound itself parses, one more is out of range naming the field;
// below the field's minimum is a format error.
TEST(Config, BoundsAreInclusiveAndNamed) {
  auto with = [](const char* base, const std::string& key, const std::string& value) {
    std::string j = base;
    const size_t at = j.find("\"" + key + "\": ");
    EXPECT_NE(at, std::string::npos) << key;
    const size_t begin = at + key.size() + 4, end = j.find_first_of(",}", begin);
    j.replace(begin, end - begin, value);
    return ParseModelConfig(j, "cfg");
  };
  struct Case {
    const char* base;
    const char* key;
    int64_t bound;
  } cases[] = {
      {kKimiK2, "num_hidden_layers", kMaxLayers},   {kKimiK2, "vocab_size", kMaxVocabSize},
      {kKimiK2, "hidden_size", kMaxHiddenSize},     {kKimiK2, "kv_lora_rank", kMaxHiddenSize},
      {kKimiK2, "qk_rope_head_dim", kMaxHeadDim},   {kKimiK2, "v_head_dim", kMaxHeadDim},
      {kKimiK2, "num_attention_heads", kMaxHeads},  {kKimiK2, "max_position_embeddings", kMaxPositions},
      {kGlm45, "head_dim", kMaxHeadDim},            {kGlm45, "intermediate_size", kMaxIntermediateSize},
      {kGlm5, "index_head_dim", kMaxHeadDim},       {kGlm5, "index_topk", kMaxPositions},
  };
  for (const Case& k : cases) {
    auto at = with(k.base, k.key, std::to_string(k.bound));
    EXPECT_TRUE(at.ok()) << k.key << ": " << at.status();
    auto over = with(k.base, k.key, std::to_string(k.bound + 1));
    EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange) << k.key << ": " << over.status();
    EXPECT_NE(over.status().message().find(k.key), std::string::npos) << over.status();
    auto neg = with(k.base, k.key, "-1");
    EXPECT_EQ(neg.status().code(), absl::StatusCode::kDataLoss) << k.key << ": " << neg.status();
    auto typed = with(k.base, k.key, "\"8\"");
    EXPECT_EQ(typed.status().code(), absl::StatusCode::kDataLoss) << k.key << ": " << typed.status();
    EXPECT_NE(typed.status().message().find(k.key), std::string::npos) << typed.status();
  }
  // Nesting: 32 levels parse (the field is ignored), 33 do not; nor do 4 MiB.
  std::string j = kKimiK2;
  j.insert(j.rfind('}'), ", \"x\": " + std::string(31, '[') + std::string(31, ']'));
  EXPECT_TRUE(ParseModelConfig(j, "cfg").ok());
  j = kKimiK2;
  j.insert(j.rfind('}'), ", \"x\": " + std::string(32, '[') + std::string(32, ']'));
  EXPECT_EQ(ParseModelConfig(j, "cfg").status().code(), absl::StatusCode::kDataLoss);
  j = kKimiK2;
  j.insert(j.rfind('}'), ", \"x\": \"" + std::string(4 << 20, 'a') + "\"");
  EXPECT_EQ(ParseModelConfig(j, "cfg").status().code(), absl::StatusCode::kOutOfRange);
}

// Routing is validated in both parsers: GLM-4.5 used to accept any top-k.
TEST(Config, RoutingIsValidatedForGlm) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string j = kGlm45;
    j.replace(j.find(from), from.size(), to);
    return ParseModelConfig(j, "glm45");
  };
  EXPECT_EQ(with("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 161").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(with("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 160").ok());
  EXPECT_EQ(with("\"n_group\": 1,", "\"n_group\": 7,").status().code(), absl::StatusCode::kDataLoss);
  // 160 experts in 8 groups, 2 of them selected: at most 40 per token.
  auto grouped = [&](int k) {
    std::string j = kGlm45;
    j.replace(j.find("\"n_group\": 1"), 12, "\"n_group\": 8");
    j.replace(j.find("\"topk_group\": 1"), 15, "\"topk_group\": 2");
    j.replace(j.find("\"num_experts_per_tok\": 8"), 24, "\"num_experts_per_tok\": " + std::to_string(k));
    return ParseModelConfig(j, "glm45");
  };
  EXPECT_TRUE(grouped(40).ok()) << grouped(40).status();
  EXPECT_EQ(grouped(41).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with("\"norm_topk_prob\": true", "\"scoring_func\": \"softmax\"").status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(Rope, YarnMatchesTransformersFormulas) {
  RopeConfig r;
  r.type = "yarn";
  r.theta = 50000.0;
  r.factor = 32.0;
  r.mscale = 1.0;
  r.mscale_all_dim = 1.0;
  r.beta_fast = 32;
  r.beta_slow = 1;
  r.original_max_position_embeddings = 4096;
  RopeParams p = ComputeRope(r, 64, 131072);
  ASSERT_EQ(p.inv_freq.size(), 32u);
  EXPECT_FLOAT_EQ(p.attention_factor, 1.0f);  // mscale == mscale_all_dim
  // Dimensions below the ramp keep the original frequency, those above are divided by factor.
  EXPECT_FLOAT_EQ(p.inv_freq[0], 1.0f);
  const double last = std::pow(50000.0, -62.0 / 64.0) / 32.0;
  EXPECT_NEAR(p.inv_freq[31], last, last * 1e-5);
  for (size_t i = 1; i < p.inv_freq.size(); ++i) EXPECT_LT(p.inv_freq[i], p.inv_freq[i - 1]);
  r.mscale_all_dim = 0.8;
  EXPECT_NEAR(ComputeRope(r, 64, 131072).attention_factor,
              (0.1 * std::log(32.0) + 1) / (0.08 * std::log(32.0) + 1), 1e-6);
}

}  // namespace
}  // namespace llmrt
