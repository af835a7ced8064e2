// The engine against transformers' own forward pass (tools/make_golden_deepseek.py), and the
// batching invariances that must hold exactly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <set>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/util/safetensors.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

namespace fs = std::filesystem;

// With F32 KV the engine computes in float32 throughout, as the reference does; the remaining
// differences come from summation order (SIMD dot products, absorbed vs expanded attention).
// Over 3-4 layers with logits of magnitude ~5, observed differences are below 2e-5; 1e-4 leaves
// room for other SIMD widths while staying far below the smallest top-2 margin (5.9e-3).
constexpr float kF32Tolerance = 1e-4f;
// The BF16 KV reference is transformers with the cached latent and rope key rounded to bf16
// (tools/make_golden_deepseek.py, Bf16KvCache), so the same float32-summation-order argument
// applies. Rounding near a bf16 tie can still land on the other neighbour when the engine's
// float32 value differs in the last bits; such flips move logits by up to ~1.2e-3 here, and 2e-3
// leaves room for other SIMD widths while staying below the smallest reference margin (1e-2).
constexpr float kBf16KvTolerance = 2e-3f;

// A checkpoint and its golden file (tests/data/<golden>.golden.json).
struct ModelCase {
  const char* dir;     // relative to the repository root
  const char* golden;  // golden file stem under tests/data
  float bf16_tolerance = kBf16KvTolerance;
};

// The larger test models (GLM-5 DSA: four layers, three bf16-rounded parts per row; the
// quantized ones: hidden 128) are more sensitive to a single bf16 rounding flip: on the DSA
// model one flip in the prefill moves the last logits by a median 3.6e-5 but by 1.3e-2 at p90
// (300 random single flips of the reference's rounded values, prompt 0). The engine sees
// 1.0e-3 to 5.2e-3 on them; 1e-2 admits a typical flip (a p90 one could still exceed it), and
// tokens must match exactly.
constexpr float kWideBf16KvTolerance = 1e-2f;

std::ostream& operator<<(std::ostream& os, const ModelCase& m) { return os << m.golden; }

class GoldenTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  std::string dir() const { return std::string(LLMRT_SOURCE_DIR) + "/" + GetParam().dir; }
  const char* name() const { return GetParam().golden; }
  std::vector<GoldenCase> golden() const { return LoadGolden(TestData(std::string(GetParam().golden) + ".golden.json")); }
  static std::vector<std::vector<int32_t>> Prompts(const std::vector<GoldenCase>& g) {
    std::vector<std::vector<int32_t>> p;
    for (const auto& c : g) p.push_back(c.prompt);
    return p;
  }
};

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST_P(GoldenTest, BatchedF32KvMatchesTransformers) {
  const auto g = golden();
  RunConfig cfg;
  cfg.max_new_tokens = static_cast<uint32_t>(g[0].generated.size());
  const auto out = RunBatch(dir(), Prompts(g), cfg);
  ASSERT_EQ(out.size(), g.size());
  float worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(out[i].tokens, g[i].generated) << "prompt " << i;
    ASSERT_EQ(out[i].logits.size(), g[i].logits.size());
    for (size_t s = 0; s < g[i].logits.size(); ++s) {
      const float d = MaxAbsDiff(out[i].logits[s], g[i].logits[s]);
      worst = std::max(worst, d);
      EXPECT_LE(d, kF32Tolerance) << "prompt " << i << " step " << s;
    }
  }
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
  std::printf("[%s] F32 KV: max |logit - reference| = %.3g\n", name(), worst);
}

TEST_P(GoldenTest, BatchedBf16KvMatchesTransformersWithBf16Cache) {
  const auto g = golden();
  RunConfig cfg;
  cfg.kv_dtype = LLM_KV_DTYPE_BF16;
  cfg.max_new_tokens = static_cast<uint32_t>(g[0].generated.size());
  const auto out = RunBatch(dir(), Prompts(g), cfg);
  float worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(out[i].tokens, g[i].bf16_generated) << "prompt " << i;
    ASSERT_EQ(out[i].logits.size(), g[i].bf16_logits.size());
    for (size_t s = 0; s < g[i].bf16_logits.size(); ++s) {
      const float d = MaxAbsDiff(out[i].logits[s], g[i].bf16_logits[s]);
      worst = std::max(worst, d);
      EXPECT_LE(d, GetParam().bf16_tolerance) << "prompt " << i << " step " << s;
    }
  }
  std::printf("[%s] BF16 KV: max |logit - reference| = %.3g\n", name(), worst);
}

// llm_score (teacher forcing, all positions in one pass) against transformers' logits.
TEST_P(GoldenTest, ScoreMatchesTransformersLogProbs) {
  const auto g = golden();
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = LLM_KV_DTYPE_F32;
  llm_runtime* rt = nullptr;
  ASSERT_EQ(llm_runtime_create(dir().c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  for (const auto& c : g) {
    std::vector<int32_t> seq = c.prompt;
    seq.insert(seq.end(), c.generated.begin(), c.generated.end());
    std::vector<float> lp(seq.size() - 1);
    std::vector<int32_t> am(seq.size() - 1);
    ASSERT_EQ(llm_score(rt, seq.data(), seq.size(), lp.data(), am.data()), LLM_OK) << llm_last_error();
    for (size_t k = 0; k < c.generated.size(); ++k) {
      const std::vector<float>& row = c.logits[k];
      const float mx = *std::max_element(row.begin(), row.end());
      double sum = 0;
      for (float v : row) sum += std::exp(v - mx);
      const double want = row[c.generated[k]] - mx - std::log(sum);
      const size_t p = c.prompt.size() - 1 + k;
      EXPECT_NEAR(lp[p], want, kF32Tolerance) << "position " << p;
      EXPECT_EQ(am[p], c.generated[k]);
    }
  }
  llm_runtime_destroy(rt);
}

// Every token's computation is independent of what else is in the batch, so solo and batched
// runs, chunked prefill and any page size give bit-identical logits.
TEST_P(GoldenTest, BatchCompositionChunkingAndPageSizeDoNotChangeResults) {
  const auto g = golden();
  const auto prompts = Prompts(g);
  const auto batched = RunBatch(dir(), prompts, RunConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto solo = RunBatch(dir(), {prompts[i]}, RunConfig{});
    ASSERT_EQ(solo.size(), 1u);
    EXPECT_EQ(solo[0].tokens, batched[i].tokens);
    EXPECT_EQ(solo[0].logits, batched[i].logits) << "prompt " << i;
  }
  for (uint32_t budget : {1u, 5u}) {
    RunConfig cfg;
    cfg.max_tokens_per_step = budget;
    const auto chunked = RunBatch(dir(), prompts, cfg);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(chunked[i].tokens, batched[i].tokens) << "budget " << budget;
      EXPECT_EQ(chunked[i].logits, batched[i].logits) << "budget " << budget;
    }
  }
  for (uint32_t page : {1u, 7u, 64u}) {
    RunConfig cfg;
    cfg.page_size = page;
    const auto paged = RunBatch(dir(), prompts, cfg);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(paged[i].logits, batched[i].logits) << "page size " << page;
    }
  }
  RunConfig one_thread;
  one_thread.num_threads = 1;
  const auto single = RunBatch(dir(), prompts, one_thread);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(single[i].logits, batched[i].logits);
}

// FP8 e4m3 KV (3 mantissa bits, one scale per layer) runs batched for every architecture and
// yields finite logits for every step. Its accuracy is measured on the trained model
// (Fp8Kv.HeldOutAccuracyStaysCloseToF32): on these random-weight models the deviation from the
// float32 reference (printed) ranges from 0.24 to 4.7 logits, largest for GLM-5 DSA, where
// quantized indexer keys change which positions are selected, so it is reported, not bounded.
TEST_P(GoldenTest, BatchedFp8KvRunsEveryArchitecture) {
  const auto g = golden();
  RunConfig cfg;
  cfg.kv_dtype = LLM_KV_DTYPE_FP8_E4M3;
  cfg.max_new_tokens = static_cast<uint32_t>(g[0].generated.size());
  const auto out = RunBatch(dir(), Prompts(g), cfg);
  float worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(out[i].tokens.size(), g[i].generated.size()) << "prompt " << i;
    for (const auto& row : out[i].logits) {
      for (float v : row) ASSERT_TRUE(std::isfinite(v)) << "prompt " << i;
    }
    worst = std::max(worst, MaxAbsDiff(out[i].logits[0], g[i].logits[0]));
  }
  std::printf("[%s] FP8 KV: max |prefill logit - f32 reference| = %.3g\n", name(), worst);
}

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenTest,
    ::testing::Values(ModelCase{"tests/data/tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn"},
                      ModelCase{"tests/data/tiny_deepseek_noqlora_f32", "tiny_deepseek_noqlora_f32"},
                      ModelCase{"tests/data/tiny_glm4_moe", "tiny_glm4_moe"},
                      // GLM-5 DSA, index_topk 8: sparse in prefill of the 41-token prompt and in decode.
                      ModelCase{"tests/data/tiny_glm_moe_dsa", "tiny_glm_moe_dsa", kWideBf16KvTolerance},
                      // Quantized weights (tools/make_golden_quant.py): FP8 e4m3 with 64x64 block scales on
                      // every decoder linear; INT4 pack-quantized routed experts, groups of 32 and 128.
                      ModelCase{"tests/data/tiny_kimi_k2_fp8", "tiny_kimi_k2_fp8", kWideBf16KvTolerance},
                      ModelCase{"tests/data/tiny_kimi_k2_int4_g32", "tiny_kimi_k2_int4_g32", kWideBf16KvTolerance},
                      ModelCase{"tests/data/tiny_kimi_k2_int4_g128", "tiny_kimi_k2_int4_g128", kWideBf16KvTolerance},
                      // GLM-4.5 and GLM-5 in the same FP8 format, 32x32 blocks (indexer wq_b/wk included).
                      ModelCase{"tests/data/tiny_glm4_moe_fp8", "tiny_glm4_moe_fp8"},
                      ModelCase{"tests/data/tiny_glm_moe_dsa_fp8", "tiny_glm_moe_dsa_fp8", kWideBf16KvTolerance},
                      // The shipped trained model (tools/eval_hf.py --golden).
                      ModelCase{"models/kimi-k2-kjv-tiny", "kimi_k2_kjv_tiny"},
                      ModelCase{"models/glm4-moe-kjv-tiny", "glm4_moe_kjv_tiny"}),
    [](const auto& info) { return std::string(info.param.golden); });

// ---- FP8 KV cache ------------------------------------------------------------------------------

llm_runtime* OpenShipped(int32_t kv_dtype, uint64_t budget = 0, uint32_t max_tokens_per_step = 0) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = kv_dtype;
  ro.kv_budget_bytes = budget;
  ro.max_tokens_per_step = max_tokens_per_step;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create((std::string(LLMRT_SOURCE_DIR) + "/models/kimi-k2-kjv-tiny").c_str(), &ro, &rt), LLM_OK)
      << llm_last_error();
  return rt;
}

TEST(Fp8Kv, HalvesBytesPerTokenAndDoublesCapacity) {
  const uint64_t budget = 18432ull * 1000;  // 1000 BF16 pages of 16 tokens: no rounding either way
  llm_runtime* bf16 = OpenShipped(LLM_KV_DTYPE_BF16, budget);
  llm_runtime* fp8 = OpenShipped(LLM_KV_DTYPE_FP8_E4M3, budget);
  ASSERT_NE(bf16, nullptr);
  ASSERT_NE(fp8, nullptr);
  llm_runtime_info a, b;
  a.struct_size = b.struct_size = sizeof(a);
  llm_runtime_get_info(bf16, &a);
  llm_runtime_get_info(fp8, &b);
  EXPECT_EQ(a.kv_bytes_per_token, 4u * (128 + 16) * 2);  // layers * (kv_lora + rope) * 2 bytes
  EXPECT_EQ(b.kv_bytes_per_token * 2, a.kv_bytes_per_token);
  EXPECT_EQ(b.kv_capacity_tokens, 2 * a.kv_capacity_tokens);
  EXPECT_EQ(b.kv_dtype, LLM_KV_DTYPE_FP8_E4M3);
  llm_runtime_destroy(bf16);
  llm_runtime_destroy(fp8);
}

// Scores `windows` held-out windows of 128 tokens with two runtimes of the shipped model.
struct HeldOut {
  double nll_ref = 0, nll = 0;
  size_t agree = 0, right_ref = 0, right = 0, count = 0;
};
HeldOut CompareHeldOut(llm_runtime* ref, llm_runtime* test, size_t windows) {
  HeldOut h;
  llm_tokenizer* tok = nullptr;
  EXPECT_EQ(llm_tokenizer_create((std::string(LLMRT_SOURCE_DIR) + "/models/kimi-k2-kjv-tiny").c_str(), &tok), LLM_OK);
  std::ifstream in(TestData("kjv_heldout.txt"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids(text.size());
  size_t n = 0;
  EXPECT_EQ(llm_tokenize(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n), LLM_OK);
  llm_tokenizer_destroy(tok);
  const size_t W = 128;
  std::vector<float> lr(W - 1), lq(W - 1);
  std::vector<int32_t> ar(W - 1), aq(W - 1);
  for (size_t w = 0; w < windows && (w + 1) * W <= n; ++w) {
    EXPECT_EQ(llm_score(ref, ids.data() + w * W, W, lr.data(), ar.data()), LLM_OK);
    EXPECT_EQ(llm_score(test, ids.data() + w * W, W, lq.data(), aq.data()), LLM_OK);
    for (size_t p = 0; p + 1 < W; ++p) {
      h.nll_ref -= lr[p];
      h.nll -= lq[p];
      h.agree += ar[p] == aq[p];
      h.right_ref += ar[p] == ids[w * W + p + 1];
      h.right += aq[p] == ids[w * W + p + 1];
      ++h.count;
    }
  }
  return h;
}

// On the trained model, FP8 KV keeps held-out perplexity within 1% of float32 KV and top-1
// accuracy within one point; the two agree on the top-1 token at more than 90% of positions
// (three mantissa bits move near-tied top-2 logits). Windows are scored 8 tokens per pass, so
// every position before a token's own pass is read from the FP8 cache as decode reads it (a
// pass's own positions are BF16 under the phase policy). The per-layer scale is calibrated on the
// first window.
TEST(Fp8Kv, HeldOutAccuracyStaysCloseToF32) {
  llm_runtime* ref = OpenShipped(LLM_KV_DTYPE_F32);
  llm_runtime* fp8 = OpenShipped(LLM_KV_DTYPE_FP8_E4M3, 0, /*max_tokens_per_step=*/8);
  const HeldOut h = CompareHeldOut(ref, fp8, 24);
  const double ppl_ref = std::exp(h.nll_ref / h.count), ppl_fp8 = std::exp(h.nll / h.count);
  const double acc_ref = static_cast<double>(h.right_ref) / h.count, acc_fp8 = static_cast<double>(h.right) / h.count;
  std::printf("[fp8 kv] perplexity %.4f vs %.4f (f32 kv), top-1 accuracy %.4f vs %.4f, agreement %.4f\n", ppl_fp8,
              ppl_ref, acc_fp8, acc_ref, static_cast<double>(h.agree) / h.count);
  EXPECT_LT(std::fabs(ppl_fp8 / ppl_ref - 1.0), 0.01);
  EXPECT_LT(std::fabs(acc_fp8 - acc_ref), 0.01);
  EXPECT_GT(static_cast<double>(h.agree) / h.count, 0.90);
  llm_runtime_destroy(ref);
  llm_runtime_destroy(fp8);
}

// ---- checkpoint layouts -------------------------------------------------------------------

class LayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("llmrt_layout_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

// Rewrites the tiny Kimi checkpoint as two shards with an index, and as a Kimi K2.5 checkpoint
// (nested text_config, language_model. prefix, plus a vision tensor that must be ignored).
TEST_F(LayoutTest, ShardedAndKimiK25LayoutsGiveIdenticalResults) {
  const std::string src = TestData("tiny_kimi_k2_qlora_yarn");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> all;
  for (const auto& [name, info] : file->tensors()) {
    all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
  }
  // Sharded.
  const fs::path sharded = tmp_ / "sharded";
  fs::create_directories(sharded);
  fs::copy_file(src + "/config.json", sharded / "config.json");
  std::vector<TensorToWrite> a(all.begin(), all.begin() + all.size() / 2), b(all.begin() + all.size() / 2, all.end());
  ASSERT_TRUE(WriteSafetensors((sharded / "model-00001-of-00002.safetensors").string(), a).ok());
  ASSERT_TRUE(WriteSafetensors((sharded / "model-00002-of-00002.safetensors").string(), b).ok());
  nlohmann::json index;
  for (const auto& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
  // Kimi K2.5.
  const fs::path k25 = tmp_ / "k25";
  fs::create_directories(k25);
  std::ifstream cfg_in(src + "/config.json");
  nlohmann::json text = nlohmann::json::parse(cfg_in);
  nlohmann::json cfg = {{"architectures", {"KimiK25ForConditionalGeneration"}},
                        {"model_type", "kimi_k25"},
                        {"vision_config", {{"hidden_size", 8}}},
                        {"text_config", text}};
  std::ofstream(k25 / "config.json") << cfg.dump();
  std::vector<TensorToWrite> renamed = all;
  std::vector<float> vision(8, 1.0f);
  for (auto& t : renamed) t.name = "language_model." + t.name;
  renamed.push_back({"vision_tower.patch_embed.weight", "F32", {8}, vision.data(), 32});
  ASSERT_TRUE(WriteSafetensors((k25 / "model.safetensors").string(), renamed).ok());

  const auto g = LoadGolden(TestData("tiny_kimi_k2_qlora_yarn.golden.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g) prompts.push_back(c.prompt);
  const auto base = RunBatch(src, prompts, RunConfig{});
  const auto s = RunBatch(sharded.string(), prompts, RunConfig{});
  const auto k = RunBatch(k25.string(), prompts, RunConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(s[i].logits, base[i].logits);
    EXPECT_EQ(k[i].logits, base[i].logits);
    EXPECT_EQ(base[i].tokens, g[i].generated);
  }
}

// A tensor in a dtype the engine does not run (here FP8 for the embedding table) is refused with
// LLM_ERR_UNSUPPORTED naming the tensor, not misread.
TEST_F(LayoutTest, UnsupportedDtypeIsRefusedNamingTheTensor) {
  const std::string src = TestData("tiny_kimi_k2_qlora_yarn");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  // F16 (a dtype llmrt does not load), then F8_E4M3 without an fp8 quantization_config.
  for (const char* dtype : {"F16", "F8_E4M3"}) {
    std::vector<TensorToWrite> all;
    std::vector<uint8_t> bytes;
    for (const auto& [name, info] : file->tensors()) {
      if (name == "model.embed_tokens.weight") {
        bytes.assign(static_cast<size_t>(info.numel()) * (std::string(dtype) == "F16" ? 2 : 1), 0x38);
        all.push_back({name, dtype, info.shape, bytes.data(), bytes.size()});
      } else {
        all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
      }
    }
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    fs::copy_file(src + "/config.json", tmp_ / "config.json");
    ASSERT_TRUE(WriteSafetensors((tmp_ / "model.safetensors").string(), all).ok());
    llm_runtime* rt = nullptr;
    const bool fp8 = std::string(dtype) == "F8_E4M3";
    EXPECT_EQ(llm_runtime_create(tmp_.c_str(), nullptr, &rt), fp8 ? LLM_ERR_FORMAT : LLM_ERR_UNSUPPORTED);
    EXPECT_EQ(rt, nullptr);
    const std::string err = llm_last_error();
    EXPECT_NE(err.find("model.embed_tokens.weight"), std::string::npos) << err;
    EXPECT_NE(err.find(dtype), std::string::npos) << err;
    if (fp8) {
      EXPECT_NE(err.find("quantization_config"), std::string::npos) << err;
    }
  }
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

void CollectLog(void* user, llm_log_level level, const char* message) {
  static_cast<std::vector<std::pair<int, std::string>>*>(user)->emplace_back(level, message);
}

// A GLM-5 checkpoint with its multi-token-prediction layer (model.layers.<num_layers>.*, as
// released) loads, logs that the layer is skipped, and generates exactly as without it.
TEST_F(LayoutTest, MtpLayerIsSkippedWithALogLine) {
  const std::string src = TestData("tiny_glm_moe_dsa");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> all;
  std::vector<std::string> names;
  for (const auto& [name, info] : file->tensors()) {
    all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
    // Layer 3's tensors, renamed as layer 4: the MTP layer (plus its own extra tensors).
    if (name.rfind("model.layers.3.", 0) == 0) names.push_back("model.layers.4." + name.substr(15));
  }
  const size_t n = all.size();
  for (size_t i = 0, j = 0; i < n; ++i) {
    if (all[i].name.rfind("model.layers.3.", 0) != 0) continue;
    TensorToWrite t = all[i];
    t.name = names[j++];
    all.push_back(t);
  }
  std::vector<uint16_t> eh(2 * 64, 0);
  all.push_back({"model.layers.4.eh_proj.weight", "BF16", {2, 64}, eh.data(), eh.size() * 2});
  const fs::path mtp = tmp_ / "mtp";
  fs::create_directories(mtp);
  std::ifstream cfg_in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(cfg_in);
  cfg["num_nextn_predict_layers"] = 1;
  std::ofstream(mtp / "config.json") << cfg.dump();
  ASSERT_TRUE(WriteSafetensors((mtp / "model.safetensors").string(), all).ok());

  std::vector<std::pair<int, std::string>> lines;
  ASSERT_EQ(llm_set_log_callback(CollectLog, &lines, LLM_LOG_INFO), LLM_OK);
  const auto g = LoadGolden(TestData("tiny_glm_moe_dsa.golden.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g) prompts.push_back(c.prompt);
  const auto with_mtp = RunBatch(mtp.string(), prompts, RunConfig{});
  ASSERT_EQ(llm_set_log_callback(nullptr, nullptr, LLM_LOG_INFO), LLM_OK);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, LLM_LOG_INFO);
  EXPECT_NE(lines[0].second.find("skipping 1 multi-token-prediction layer(s) from layer 4"), std::string::npos)
      << lines[0].second;
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(with_mtp[i].tokens, g[i].generated);
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

// Copies a checkpoint directory, editing its config.json and dropping/replacing tensors.
void CopyCheckpoint(const std::string& src, const fs::path& dst, const std::function<void(nlohmann::json&)>& edit_cfg,
                    const std::function<bool(TensorToWrite&)>& keep) {
  fs::remove_all(dst);
  fs::create_directories(dst);
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  edit_cfg(cfg);
  std::ofstream(dst / "config.json") << cfg.dump();
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> all;
  for (const auto& [name, info] : file->tensors()) {
    TensorToWrite t{name, info.dtype_name, info.shape, info.data, info.bytes};
    if (keep(t)) all.push_back(t);
  }
  ASSERT_TRUE(WriteSafetensors((dst / "model.safetensors").string(), all).ok());
}

llm_status Open(const fs::path& dir) {
  llm_runtime* rt = nullptr;
  const llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
  llm_runtime_destroy(rt);
  return st;
}

// Inconsistent quantized checkpoints are refused with a status and a message naming the problem.
TEST_F(LayoutTest, BadQuantizedCheckpointsAreClearErrors) {
  const std::string int4 = TestData("tiny_kimi_k2_int4_g32"), fp8 = TestData("tiny_kimi_k2_fp8");
  auto keep_all = [](TensorToWrite&) { return true; };
  auto group = [](int g) {
    return [g](nlohmann::json& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = g; };
  };
  struct Case {
    std::string what;
    std::string src;
    std::function<void(nlohmann::json&)> cfg;
    std::function<bool(TensorToWrite&)> keep;
    llm_status want;
    std::string message;
  };
  const std::vector<Case> cases = {
      // 96 is a multiple of 32 but does not divide the experts' 128 columns.
      {"group not dividing the row", int4, group(96), keep_all, LLM_ERR_FORMAT, "does not divide"},
      {"group not a multiple of 32", int4, group(48), keep_all, LLM_ERR_UNSUPPORTED, "group_size 48"},
      {"8-bit weights", int4,
       [](nlohmann::json& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8; },
       keep_all, LLM_ERR_UNSUPPORTED, "4-bit"},
      {"missing weight_scale", int4, [](nlohmann::json&) {},
       [](TensorToWrite& t) { return t.name != "model.layers.1.mlp.experts.3.up_proj.weight_scale"; },
       LLM_ERR_NOT_FOUND, "model.layers.1.mlp.experts.3.up_proj.weight_scale"},
      {"packed codes without quantization_config", int4, [](nlohmann::json& c) { c.erase("quantization_config"); },
       keep_all, LLM_ERR_FORMAT, "weight_packed"},
      {"unknown quant_method", fp8, [](nlohmann::json& c) { c["quantization_config"]["quant_method"] = "awq"; },
       keep_all, LLM_ERR_UNSUPPORTED, "awq"},
      {"per-tensor fp8", fp8, [](nlohmann::json& c) { c["quantization_config"].erase("weight_block_size"); },
       keep_all, LLM_ERR_UNSUPPORTED, "weight_block_size"},
      {"missing scale_inv", fp8, [](nlohmann::json&) {},
       [](TensorToWrite& t) { return t.name != "model.layers.2.self_attn.o_proj.weight_scale_inv"; },
       LLM_ERR_NOT_FOUND, "model.layers.2.self_attn.o_proj.weight_scale_inv"},
      // Blocks of 32 need a [4, 4] scale grid for o_proj, the file holds [2, 2].
      {"block size disagreeing with scale_inv", fp8,
       [](nlohmann::json& c) { c["quantization_config"]["weight_block_size"] = {32, 32}; }, keep_all, LLM_ERR_FORMAT,
       "_scale_inv"},
  };
  for (const Case& c : cases) {
    const fs::path dir = tmp_ / "bad";
    CopyCheckpoint(c.src, dir, c.cfg, c.keep);
    EXPECT_EQ(Open(dir), c.want) << c.what << ": " << llm_last_error();
    EXPECT_NE(std::string(llm_last_error()).find(c.message), std::string::npos) << c.what << ": " << llm_last_error();
  }
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

std::vector<std::vector<int32_t>> GoldenPrompts(const std::string& golden) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : LoadGolden(TestData(golden))) prompts.push_back(c.prompt);
  return prompts;
}

llm_runtime_info InfoOf(const std::string& dir, int32_t prefill, int32_t decode) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.prefill_weights = prefill;
  ro.decode_weights = decode;
  llm_runtime* rt = nullptr;
  llm_runtime_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  if (rt != nullptr) {
    EXPECT_EQ(llm_runtime_get_info(rt, &info), LLM_OK);
  }
  llm_runtime_destroy(rt);
  return info;
}

// INT4 at load (round to nearest, symmetric, bf16 group scales) from the BF16 model reproduces
// the INT4 checkpoint the reference tool quantized the same way: identical logits, hence the
// INT4 golden holds for it too.
TEST(WeightPolicy, Int4AtLoadEqualsTheInt4Checkpoint) {
  const auto prompts = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json");
  RunConfig int4;
  int4.prefill_weights = int4.decode_weights = LLM_WEIGHTS_INT4_G32;
  const auto at_load = RunBatch(TestData("tiny_kimi_k2_quant_base"), prompts, int4);
  const auto native = RunBatch(TestData("tiny_kimi_k2_int4_g32"), prompts, RunConfig{});
  const auto g = LoadGolden(TestData("tiny_kimi_k2_int4_g32.golden.json"));
  ASSERT_EQ(at_load.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(at_load[i].logits, native[i].logits) << "prompt " << i;
    EXPECT_EQ(at_load[i].tokens, g[i].generated) << "prompt " << i;
  }
  // An INT4 g32 checkpoint asked for g32 keeps its tensors; asked for g128 it is requantized.
  const llm_runtime_info same = InfoOf(TestData("tiny_kimi_k2_int4_g32"), LLM_WEIGHTS_INT4_G32, LLM_WEIGHTS_INT4_G32);
  const llm_runtime_info stored = InfoOf(TestData("tiny_kimi_k2_int4_g32"), LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_AS_STORED);
  EXPECT_EQ(same.weight_bytes_int4, stored.weight_bytes_int4);
  const llm_runtime_info g128 = InfoOf(TestData("tiny_kimi_k2_int4_g32"), LLM_WEIGHTS_INT4_G128, LLM_WEIGHTS_INT4_G128);
  EXPECT_LT(g128.weight_bytes_int4, stored.weight_bytes_int4);  // fewer scales
}

// Prefill with the experts as stored (BF16), decode with INT4 g32: both sets resident (memory
// reported by format); prefill logits are exactly the BF16 model's, decode logits those of INT4
// experts over the BF16-prefilled cache.
TEST(WeightPolicy, PrefillAndDecodeUseTheirOwnExpertStorage) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  const auto prompts = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json");
  RunConfig split;
  split.decode_weights = LLM_WEIGHTS_INT4_G32;
  const auto bf16 = RunBatch(base, prompts, RunConfig{});
  const auto mixed = RunBatch(base, prompts, split);
  size_t decode_steps_differing = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(mixed[i].logits.size(), bf16[i].logits.size());
    EXPECT_EQ(mixed[i].logits[0], bf16[i].logits[0]) << "prompt " << i << ": prefill must use the stored experts";
    for (size_t s = 1; s < mixed[i].logits.size(); ++s) decode_steps_differing += mixed[i].logits[s] != bf16[i].logits[s];
  }
  EXPECT_GT(decode_steps_differing, 0u) << "decode never used the INT4 experts";

  const llm_runtime_info one = InfoOf(base, LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_AS_STORED);
  const llm_runtime_info both = InfoOf(base, LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_INT4_G32);
  const llm_runtime_info int4 = InfoOf(base, LLM_WEIGHTS_INT4_G32, LLM_WEIGHTS_INT4_G32);
  // 2 MoE layers x 8 experts x 3 matrices of 128 x 128: BF16 2 B per weight; INT4 half a byte
  // plus a 2-byte scale per 32.
  const uint64_t expert_weights = 2ull * 8 * 3 * 128 * 128;
  EXPECT_EQ(one.weight_bytes_int4, 0u);
  EXPECT_EQ(both.weight_bytes_bf16, one.weight_bytes_bf16);
  EXPECT_EQ(both.weight_bytes_int4, expert_weights / 2 + expert_weights / 32 * 2);
  EXPECT_EQ(int4.weight_bytes_bf16, one.weight_bytes_bf16 - expert_weights * 2);
  EXPECT_EQ(both.prefill_weights, LLM_WEIGHTS_AS_STORED);
  EXPECT_EQ(both.decode_weights, LLM_WEIGHTS_INT4_G32);

  // FP8 checkpoints requantize to INT4 too.
  const llm_runtime_info fp8 = InfoOf(TestData("tiny_kimi_k2_fp8"), LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_INT4_G128);
  EXPECT_GT(fp8.weight_bytes_fp8, 0u);
  EXPECT_EQ(fp8.weight_bytes_int4, expert_weights / 2 + expert_weights / 128 * 2);

  // Bad values.
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.decode_weights = 9;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(base.c_str(), &ro, &rt), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

int32_t ScaleSource(const fs::path& dir, int32_t kv) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = kv;
  llm_runtime* rt = nullptr;
  if (llm_runtime_create(dir.c_str(), &ro, &rt) != LLM_OK) return -1;
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  llm_runtime_destroy(rt);
  return info.kv_scale_source;
}

// FP8 KV scales from the checkpoint (self_attn.k_scale per layer) make results independent of
// which request first writes a layer; without them the scale is calibrated and reported so.
TEST_F(LayoutTest, Fp8KvScalesFromTheCheckpoint) {
  const std::string src = TestData("tiny_kimi_k2_qlora_yarn");
  std::vector<float> scales = {0.02f, 0.03f, 0.025f};  // 3 layers; |latent| and |k_rope| stay below 448 * scale
  std::vector<TensorToWrite> extra;
  for (int i = 0; i < 3; ++i) {
    extra.push_back({"model.layers." + std::to_string(i) + ".self_attn.k_scale", "F32", {}, &scales[i], 4});
  }
  const fs::path with = tmp_ / "with_scales";
  CopyCheckpoint(src, with, [](nlohmann::json&) {}, [](TensorToWrite&) { return true; });
  {
    auto file = SafetensorsFile::Open((with / "model.safetensors").string());
    ASSERT_TRUE(file.ok());
    std::vector<TensorToWrite> all;
    for (const auto& [name, info] : file->tensors()) all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
    for (const auto& e : extra) all.push_back(e);
    ASSERT_TRUE(WriteSafetensors((tmp_ / "tmp.safetensors").string(), all).ok());
  }
  fs::rename(tmp_ / "tmp.safetensors", with / "model.safetensors");

  EXPECT_EQ(ScaleSource(with, LLM_KV_DTYPE_FP8_E4M3), LLM_KV_SCALE_CHECKPOINT);
  EXPECT_EQ(ScaleSource(src, LLM_KV_DTYPE_FP8_E4M3), LLM_KV_SCALE_CALIBRATED);
  EXPECT_EQ(ScaleSource(with, LLM_KV_DTYPE_BF16), LLM_KV_SCALE_NONE);

  // The logits of `prompt`'s greedy continuation, with or without another request prefilled
  // (and so writing every layer first) before it arrives.
  const auto prompts = GoldenPrompts("tiny_kimi_k2_qlora_yarn.golden.json");
  auto continuation = [](const std::string& dir, const std::vector<int32_t>* before, const std::vector<int32_t>& prompt) {
    llm_runtime_options ro;
    llm_runtime_options_init(&ro);
    ro.kv_dtype = LLM_KV_DTYPE_FP8_E4M3;
    llm_runtime* rt = nullptr;
    EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
    llm_sampling_options so;
    llm_sampling_options_init(&so);
    so.max_new_tokens = 6;
    std::vector<llm_step_result> res(2);
    size_t n = 0;
    llm_session* other = nullptr;
    if (before != nullptr) {
      llm_session_create(rt, &so, &other);
      llm_session_append_tokens(other, before->data(), before->size());
      llm_decode_step(rt, res.data(), res.size(), &n);  // prefills `before` alone
    }
    llm_session* s = nullptr;
    llm_session_create(rt, &so, &s);
    llm_session_append_tokens(s, prompt.data(), prompt.size());
    std::vector<float> logits, row(256);
    for (int step = 0; step < 6; ++step) {
      llm_decode_step(rt, res.data(), res.size(), &n);
      size_t count = 0;
      if (llm_session_get_logits(s, row.data(), row.size(), &count) == LLM_OK) logits.insert(logits.end(), row.begin(), row.end());
    }
    llm_session_destroy(s);
    if (other != nullptr) llm_session_destroy(other);
    llm_runtime_destroy(rt);
    return logits;
  };
  EXPECT_EQ(continuation(with.string(), nullptr, prompts[0]), continuation(with.string(), &prompts[2], prompts[0]));
  EXPECT_NE(continuation(src, nullptr, prompts[0]), continuation(src, &prompts[2], prompts[0]))
      << "calibration from the first write was expected to depend on which request came first";

  // Scales on some layers only, or not a positive scalar: refused.
  const fs::path partial = tmp_ / "partial";
  CopyCheckpoint(with.string(), partial, [](nlohmann::json&) {},
                 [](TensorToWrite& t) { return t.name != "model.layers.1.self_attn.k_scale"; });
  EXPECT_EQ(ScaleSource(partial, LLM_KV_DTYPE_FP8_E4M3), -1);
  EXPECT_NE(std::string(llm_last_error()).find("2 of 3 layers"), std::string::npos) << llm_last_error();
  float bad = -1.0f;
  const fs::path negative = tmp_ / "negative";
  CopyCheckpoint(with.string(), negative, [](nlohmann::json&) {}, [&](TensorToWrite& t) {
    if (t.name == "model.layers.2.self_attn.k_scale") t.data = &bad;
    return true;
  });
  EXPECT_EQ(ScaleSource(negative, LLM_KV_DTYPE_FP8_E4M3), -1);
  EXPECT_NE(std::string(llm_last_error()).find("positive"), std::string::npos) << llm_last_error();
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

// Every tensor of a checkpoint directory: model.safetensors, or the shards its index names.
absl::StatusOr<std::map<std::string, TensorInfo>> ReadCheckpointTensors(const std::string& dir) {
  std::vector<std::string> files;
  if (fs::exists(fs::path(dir) / "model.safetensors.index.json")) {
    std::ifstream in(fs::path(dir) / "model.safetensors.index.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    std::set<std::string> shards;
    for (const auto& [name, shard] : j.at("weight_map").items()) shards.insert(shard.get<std::string>());
    files.assign(shards.begin(), shards.end());
  } else {
    files.push_back("model.safetensors");
  }
  std::map<std::string, TensorInfo> all;
  for (const std::string& f : files) {
    auto file = SafetensorsFile::Open((fs::path(dir) / f).string());
    if (!file.ok()) return file.status();
    for (const auto& [name, info] : file->tensors()) all.emplace(name, info);
  }
  return all;
}

// Every tensor of `a` equals the same-named tensor of `b` byte for byte, and the names agree.
void ExpectSameTensors(const fs::path& a, const std::string& b) {
  auto ck_a = ReadCheckpointTensors(a.string());
  auto ck_b = ReadCheckpointTensors(b);
  ASSERT_TRUE(ck_a.ok()) << ck_a.status();
  ASSERT_TRUE(ck_b.ok()) << ck_b.status();
  ASSERT_EQ(ck_a->size(), ck_b->size());
  for (const auto& [name, ta] : *ck_a) {
    auto it = ck_b->find(name);
    ASSERT_NE(it, ck_b->end()) << name;
    const TensorInfo* tb = &it->second;
    EXPECT_EQ(ta.dtype_name, tb->dtype_name) << name;
    EXPECT_EQ(ta.shape, tb->shape) << name;
    ASSERT_EQ(ta.bytes, tb->bytes) << name;
    EXPECT_EQ(std::memcmp(ta.data, tb->data, ta.bytes), 0) << name;
  }
}

// llm-convert's converter reproduces the reference tools' checkpoints exactly: INT4 routed
// experts as compressed-tensors' pack_to_int32 packs them, FP8 blocks as torch casts them.
TEST_F(LayoutTest, ConverterWritesTheReferenceCheckpoints) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  auto convert = [&](const std::string& in, const fs::path& out, const llm_convert_options& o) {
    char summary[256];
    const llm_status st = llm_convert_checkpoint(in.c_str(), out.c_str(), &o, summary, sizeof(summary), nullptr);
    return std::make_pair(st, std::string(st == LLM_OK ? summary : llm_last_error()));
  };
  llm_convert_options int4;
  llm_convert_options_init(&int4);
  int4.int4_group = 32;
  ASSERT_EQ(convert(base, tmp_ / "int4", int4).first, LLM_OK) << llm_last_error();
  ExpectSameTensors(tmp_ / "int4", TestData("tiny_kimi_k2_int4_g32"));
  llm_convert_options fp8;
  llm_convert_options_init(&fp8);
  fp8.target = LLM_CONVERT_FP8_BLOCK;
  fp8.fp8_block = 64;
  fp8.max_shard_bytes = 400 << 10;  // several shards and an index
  const auto [fp8_status, summary] = convert(base, tmp_ / "fp8", fp8);
  ASSERT_EQ(fp8_status, LLM_OK) << summary;
  EXPECT_NE(summary.find("shard(s)"), std::string::npos);
  EXPECT_TRUE(fs::exists(tmp_ / "fp8" / "model.safetensors.index.json"));
  ExpectSameTensors(tmp_ / "fp8", TestData("tiny_kimi_k2_fp8"));
  const auto g = LoadGolden(TestData("tiny_kimi_k2_fp8.golden.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g) prompts.push_back(c.prompt);
  const auto out = RunBatch((tmp_ / "fp8").string(), prompts, RunConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(out[i].tokens, g[i].generated);
  // FP8 -> INT4 (the non-expert FP8 weights become BF16, as in K2-Thinking).
  ASSERT_EQ(convert((tmp_ / "fp8").string(), tmp_ / "fp8-int4", int4).first, LLM_OK) << llm_last_error();
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create((tmp_ / "fp8-int4").c_str(), nullptr, &rt), LLM_OK) << llm_last_error();
  llm_runtime_destroy(rt);

  // Errors.
  llm_convert_options bad_group = int4;
  bad_group.int4_group = 48;
  EXPECT_EQ(convert(base, tmp_ / "x", bad_group).first, LLM_ERR_INVALID_ARGUMENT);
  bad_group.int4_group = 96;  // a multiple of 32 that does not divide 128 columns
  EXPECT_EQ(convert(base, tmp_ / "y", bad_group).first, LLM_ERR_FORMAT);
  EXPECT_EQ(convert(TestData("tiny_kimi_k2_int4_g32"), tmp_ / "z", int4).first, LLM_ERR_UNSUPPORTED);
  EXPECT_EQ(convert(base, tmp_ / "int4", int4).first, LLM_ERR_INVALID_ARGUMENT);  // already a checkpoint there
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

// FP8 KV phase policy: a pass attends over the positions it writes itself in BF16, so a
// prompt prefilled in one chunk sees exactly what the BF16 codec gives it, for every
// architecture; decode then reads earlier positions in FP8, and its logits move.
TEST(Fp8KvPhasePolicy, PrefillAttendsOverItsOwnChunkInBf16) {
  for (const char* model : {"tiny_kimi_k2_qlora_yarn", "tiny_glm4_moe", "tiny_glm_moe_dsa"})
  for (int32_t codec : {LLM_KV_DTYPE_FP8_E4M3, LLM_KV_DTYPE_FP8_E4M3_TILED}) {
    const auto prompts = GoldenPrompts(std::string(model) + ".golden.json");
    RunConfig bf16, fp8;
    bf16.kv_dtype = LLM_KV_DTYPE_BF16;
    fp8.kv_dtype = codec;
    const auto a = RunBatch(TestData(model), prompts, bf16);
    const auto b = RunBatch(TestData(model), prompts, fp8);
    size_t moved = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(a[i].logits[0], b[i].logits[0]) << model << " prompt " << i;
      for (size_t s = 1; s < a[i].logits.size(); ++s) moved += a[i].logits[s] != b[i].logits[s];
    }
    EXPECT_GT(moved, 0u) << model << ": decode never read FP8";
  }
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

llm_runtime* OpenRole(const std::string& dir, int32_t kv, int32_t decode_weights, uint64_t budget = 0) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = kv;
  ro.decode_weights = decode_weights;
  ro.kv_budget_bytes = budget;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  return rt;
}

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// Steps `rt` until session `s` finishes (or `stop_after_first` and it produced its first token).
void RunSession(llm_runtime* rt, llm_session* s, Trace* t, bool stop_after_first = false) {
  llm_step_result res[4];
  size_t n = 0;
  std::vector<float> row(256);
  for (int guard = 0; guard < 100; ++guard) {
    ASSERT_EQ(llm_decode_step(rt, res, 4, &n), LLM_OK) << llm_last_error();
    bool finished = false;
    for (size_t i = 0; i < n; ++i) {
      if (res[i].session != s || res[i].token == LLM_TOKEN_NONE) continue;
      size_t count = 0;
      ASSERT_EQ(llm_session_get_logits(s, row.data(), row.size(), &count), LLM_OK);
      t->tokens.push_back(res[i].token);
      t->logits.push_back(row);
      finished = res[i].finish_reason != LLM_FINISH_NONE;
    }
    if (finished || (stop_after_first && !t->tokens.empty())) return;
  }
  FAIL() << "the session did not finish";
}

// The key of authenticated transfers in these tests.
const uint8_t kKey[32] = {7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2, 3, 5, 3, 6, 0, 2, 8, 7, 4, 7, 1, 3, 5, 2, 6, 6};

// Exports `s`, authenticated with kKey when `authenticated`.
std::vector<uint8_t> Export(llm_session* s, bool authenticated = false) {
  size_t size = 0;
  auto run = [&](void* buf, size_t cap) {
    return authenticated ? llm_session_export_kv_authenticated(s, kKey, sizeof(kKey), buf, cap, &size)
                         : llm_session_export_kv(s, buf, cap, &size);
  };
  EXPECT_EQ(run(nullptr, 0), LLM_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> blob(size);
  EXPECT_EQ(run(blob.data(), blob.size()), LLM_OK) << llm_last_error();
  return blob;
}

// Role split: a prefill-role runtime prefills and exports; a decode-role runtime (INT4 decode
// experts) imports and decodes. Tokens and logits equal one runtime with the same policies,
// for the BF16 and FP8 codecs.
TEST(KvExport, RoleSplitEqualsOneRuntimeWithTheSamePolicies) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  const auto prompts = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json");
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 8;
  so.temperature = 0.9f;  // sampling: the generator state travels with the export
  so.seed = 11;
  for (int32_t kv : {LLM_KV_DTYPE_BF16, LLM_KV_DTYPE_FP8_E4M3, LLM_KV_DTYPE_FP8_E4M3_TILED}) {
    llm_runtime* one = OpenRole(base, kv, LLM_WEIGHTS_INT4_G32);
    llm_runtime* prefill = OpenRole(base, kv, LLM_WEIGHTS_AS_STORED);
    llm_runtime* decode = OpenRole(base, kv, LLM_WEIGHTS_INT4_G32);
    for (const auto& prompt : prompts) {
      Trace want, got;
      llm_session* s = nullptr;
      ASSERT_EQ(llm_session_create(one, &so, &s), LLM_OK);
      ASSERT_EQ(llm_session_append_tokens(s, prompt.data(), prompt.size()), LLM_OK);
      RunSession(one, s, &want);
      llm_session_destroy(s);

      llm_session* p = nullptr;
      ASSERT_EQ(llm_session_create(prefill, &so, &p), LLM_OK);
      ASSERT_EQ(llm_session_append_tokens(p, prompt.data(), prompt.size()), LLM_OK);
      RunSession(prefill, p, &got, /*stop_after_first=*/true);
      // The decode runtime adopts the prefill runtime's FP8 layer scales: shared state, which
      // only an authenticated import may set.
      const std::vector<uint8_t> blob = Export(p, /*authenticated=*/true);
      llm_session_destroy(p);
      llm_session* d = nullptr;
      ASSERT_EQ(llm_session_import_kv_authenticated(decode, blob.data(), blob.size(), kKey, sizeof(kKey), &so, &d),
                LLM_OK)
          << llm_last_error();
      RunSession(decode, d, &got);
      llm_session_destroy(d);
      EXPECT_EQ(got.tokens, want.tokens) << "kv " << kv;
      EXPECT_EQ(got.logits, want.logits) << "kv " << kv;
    }
    llm_runtime_destroy(one);
    llm_runtime_destroy(prefill);
    llm_runtime_destroy(decode);
  }
}

// BF16 -> FP8 on import, and every way an import can be refused.
TEST(KvExport, ConvertsOnImportAndRefusesBadBlobs) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  const std::vector<int32_t> prompt = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json")[2];  // 41 tokens
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 6;
  llm_runtime* bf16 = OpenRole(base, LLM_KV_DTYPE_BF16, LLM_WEIGHTS_AS_STORED);
  llm_session* p = nullptr;
  ASSERT_EQ(llm_session_create(bf16, &so, &p), LLM_OK);
  ASSERT_EQ(llm_session_append_tokens(p, prompt.data(), prompt.size()), LLM_OK);
  Trace first;
  RunSession(bf16, p, &first, true);
  const std::vector<uint8_t> blob = Export(p);
  const std::vector<uint8_t> signed_blob = Export(p, /*authenticated=*/true);
  // The same session continued in place, as the reference for the converted import.
  Trace in_place;
  RunSession(bf16, p, &in_place);
  llm_session_destroy(p);

  llm_runtime* fp8 = OpenRole(base, LLM_KV_DTYPE_FP8_E4M3, LLM_WEIGHTS_AS_STORED);
  llm_session* d = nullptr;
  // The fresh FP8 runtime has no layer scales: an unauthenticated import may not set them.
  EXPECT_EQ(llm_session_import_kv(fp8, blob.data(), blob.size(), &so, &d), LLM_ERR_INVALID_STATE);
  EXPECT_EQ(d, nullptr);
  ASSERT_EQ(llm_session_import_kv_authenticated(fp8, signed_blob.data(), signed_blob.size(), kKey, sizeof(kKey), &so,
                                                &d),
            LLM_OK)
      << llm_last_error();
  Trace converted;
  RunSession(fp8, d, &converted);
  ASSERT_EQ(converted.tokens.size(), in_place.tokens.size());
  // FP8 rows (3 mantissa bits) against BF16 ones: the first decode step's logits stay close.
  EXPECT_LT(MaxAbsDiff(converted.logits[0], in_place.logits[0]), 0.5f);
  EXPECT_EQ(converted.tokens[0], in_place.tokens[0]);
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(fp8, &info);
  EXPECT_EQ(info.kv_scale_source, LLM_KV_SCALE_CALIBRATED);
  llm_session_destroy(d);

  // Altered, truncated, foreign, too large for the pool, NULLs.
  const uint32_t free_before = [&] {
    llm_runtime_get_info(fp8, &info);
    return info.pages_free;
  }();
  std::vector<uint8_t> bad = blob;
  bad[bad.size() / 2] ^= 0x01;
  EXPECT_EQ(llm_session_import_kv(fp8, bad.data(), bad.size(), &so, &d), LLM_ERR_FORMAT);
  EXPECT_NE(std::string(llm_last_error()).find("checksum"), std::string::npos) << llm_last_error();
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(llm_session_import_kv(fp8, blob.data(), blob.size() - 9, &so, &d), LLM_ERR_FORMAT);
  EXPECT_EQ(llm_session_import_kv(fp8, blob.data(), 5, &so, &d), LLM_ERR_FORMAT);
  llm_runtime* glm = OpenRole(TestData("tiny_glm4_moe"), LLM_KV_DTYPE_BF16, LLM_WEIGHTS_AS_STORED);
  EXPECT_EQ(llm_session_import_kv(glm, blob.data(), blob.size(), &so, &d), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_destroy(glm);
  // A pool of one 16-token page cannot hold 42 positions; nothing leaks.
  llm_runtime* tiny = OpenRole(base, LLM_KV_DTYPE_BF16, LLM_WEIGHTS_AS_STORED, 16ull * 3 * 144 * 2);
  llm_runtime_get_info(tiny, &info);
  const uint32_t tiny_free = info.pages_free;
  EXPECT_EQ(llm_session_import_kv(tiny, blob.data(), blob.size(), &so, &d), LLM_ERR_KV_EXHAUSTED);
  llm_runtime_get_info(tiny, &info);
  EXPECT_EQ(info.pages_free, tiny_free);
  EXPECT_EQ(info.num_sessions, 0u);
  llm_runtime_destroy(tiny);
  llm_runtime_get_info(fp8, &info);
  EXPECT_EQ(info.pages_free, free_before);
  size_t size = 0;
  EXPECT_EQ(llm_session_import_kv(fp8, nullptr, 10, &so, &d), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(llm_session_export_kv(nullptr, nullptr, 0, &size), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_destroy(fp8);
  llm_runtime_destroy(bf16);
}

}  // namespace
}  // namespace llmrt::testing

namespace llmrt::testing {
namespace {

// The tiled FP8 codec: 656 bytes per token per layer at Kimi K2's sizes (512 FP8 latent values,
// 4 tile scales, the 64-value rope key in BF16), and on the shipped model held-out accuracy
// closer to BF16 than the flat codec's (llm-eval --chunk 1 over all windows: perplexity +0.11%
// against +0.41%, top-1 agreement with BF16 KV 98.8% against 94.3%); scored here 8 tokens per
// pass.
TEST(Fp8TiledKv, SizesAndHeldOutAccuracy) {
  llm_kv_sizing k;
  k.struct_size = sizeof(k);
  ASSERT_EQ(llm_model_kv_sizing(TestData("configs/kimi-k2").c_str(), LLM_KV_DTYPE_FP8_E4M3_TILED, 1ull << 30, 16, 0, &k),
            LLM_OK);
  EXPECT_EQ(k.bytes_per_token, 61u * 656u);
  ASSERT_EQ(llm_model_kv_sizing(TestData("configs/glm-5").c_str(), LLM_KV_DTYPE_FP8_E4M3_TILED, 1ull << 30, 16, 0, &k),
            LLM_OK);
  EXPECT_EQ(k.bytes_per_token, 78u * (512u + 128u + 128u + 5u * 4u));  // + the index key's tile
  ASSERT_EQ(llm_model_kv_sizing(TestData("configs/glm-4.5").c_str(), LLM_KV_DTYPE_FP8_E4M3_TILED, 1ull << 30, 16, 0, &k),
            LLM_OK);
  EXPECT_EQ(k.bytes_per_token, 92u * (2048u + 16u * 4u));  // one scale per K and V head

  llm_runtime* ref = OpenShipped(LLM_KV_DTYPE_BF16);
  llm_runtime* tiled = OpenShipped(LLM_KV_DTYPE_FP8_E4M3_TILED, 0, /*max_tokens_per_step=*/8);
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(tiled, &info);
  EXPECT_EQ(info.kv_dtype, LLM_KV_DTYPE_FP8_E4M3_TILED);
  EXPECT_EQ(info.kv_scale_source, LLM_KV_SCALE_PER_TILE);
  EXPECT_EQ(info.kv_bytes_per_token, 4u * (128u + 16u * 2u + 4u));  // the shipped model's row
  const HeldOut h = CompareHeldOut(ref, tiled, 24);
  const double ratio = std::exp((h.nll - h.nll_ref) / h.count);
  std::printf("[fp8 tiled kv] perplexity ratio to BF16 KV %.5f, top-1 agreement %.4f\n", ratio,
              static_cast<double>(h.agree) / h.count);
  EXPECT_LT(std::fabs(ratio - 1.0), 0.005);
  EXPECT_GT(static_cast<double>(h.agree) / h.count, 0.97);
  llm_runtime_destroy(ref);
  llm_runtime_destroy(tiled);
}

}  // namespace
}  // namespace llmrt::testing
