// Every model family against transformers' own forward pass (tools/make_golden_*.py), and the
// batching invariances that must hold exactly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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
// tiny_kimi_k2_qlora_yarn is the exception: on an AVX2-only CPU (Highway's 8-lane sums; an AMD
// Zen 3) one flip in prompt 2's prefill moves every later logit of that prompt by up to 5.4e-3
// (its F32 KV logits stay within 1e-4 there), so it takes the wider tolerance below. On the CUDA
// backend every model does: its float32 sums run in other orders (GEMV lane partials, the
// tensor-core attention), so its flips fall elsewhere; on an H200 they moved tiny_deepseek_noqlora_f32
// by 9.2e-3 at one step and tiny_kimi_k2_tp8 by 4.2e-3 (F32 KV within 2.6e-5 on both).
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
  llm_runtime_info info;
  cfg.info_out = &info;
  const auto out = RunBatch(dir(), Prompts(g), cfg);
  const float tol =
      info.backend == LLM_BACKEND_CUDA ? std::max(GetParam().bf16_tolerance, kWideBf16KvTolerance) : GetParam().bf16_tolerance;
  float worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(out[i].tokens, g[i].bf16_generated) << "prompt " << i;
    ASSERT_EQ(out[i].logits.size(), g[i].bf16_logits.size());
    for (size_t s = 0; s < g[i].bf16_logits.size(); ++s) {
      const float d = MaxAbsDiff(out[i].logits[s], g[i].bf16_logits[s]);
      worst = std::max(worst, d);
      EXPECT_LE(d, tol) << "prompt " << i << " step " << s;
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

// llm_score between steps gives what it gives on a fresh runtime, whatever the steps before it
// kept: after a step whose sessions keep no logits (LLM_SAMPLING_NO_LOGITS), scoring read the
// host logits buffer that step had left empty.
TEST_P(GoldenTest, ScoreAfterAStepThatKeptNoLogits) {
  const auto g = golden();
  std::vector<int32_t> seq = g[0].prompt;
  seq.insert(seq.end(), g[0].generated.begin(), g[0].generated.end());
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = LLM_KV_DTYPE_F32;
  llm_runtime* rt = nullptr;
  ASSERT_EQ(llm_runtime_create(dir().c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  std::vector<float> fresh(seq.size() - 1), after(seq.size() - 1);
  std::vector<int32_t> fresh_am(seq.size() - 1), after_am(seq.size() - 1);
  ASSERT_EQ(llm_score(rt, seq.data(), seq.size(), fresh.data(), fresh_am.data()), LLM_OK) << llm_last_error();
  // Another sequence scored: its logits are what a stale buffer would hold.
  std::vector<int32_t> other = g.back().prompt;
  other.insert(other.end(), g.back().generated.begin(), g.back().generated.end());
  std::vector<float> other_lp(other.size() - 1);
  ASSERT_EQ(llm_score(rt, other.data(), other.size(), other_lp.data(), nullptr), LLM_OK) << llm_last_error();
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.flags = LLM_SAMPLING_NO_LOGITS;
  so.max_new_tokens = 2;
  llm_session* s = nullptr;
  ASSERT_EQ(llm_session_create(rt, &so, &s), LLM_OK);
  ASSERT_EQ(llm_session_append_tokens(s, g[0].prompt.data(), g[0].prompt.size()), LLM_OK);
  llm_step_result res[1];
  size_t n = 0;
  ASSERT_EQ(llm_decode_step(rt, res, 1, &n), LLM_OK) << llm_last_error();
  ASSERT_EQ(llm_score(rt, seq.data(), seq.size(), after.data(), after_am.data()), LLM_OK) << llm_last_error();
  EXPECT_EQ(after, fresh);
  EXPECT_EQ(after_am, fresh_am);
  llm_session_destroy(s);
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
    ::testing::Values(ModelCase{"tests/data/tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn", kWideBf16KvTolerance},
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
                      // Eight query heads (GLM-4.5: and eight KV heads) for tensor parallelism at degree 8.
                      ModelCase{"tests/data/tiny_kimi_k2_tp8", "tiny_kimi_k2_tp8"},
                      ModelCase{"tests/data/tiny_glm4_moe_tp8", "tiny_glm4_moe_tp8"},
                      // The shipped trained model (tools/eval_hf.py --golden).
                      ModelCase{"models/kimi-k2-kjv-tiny", "kimi_k2_kjv_tiny"},
                      ModelCase{"models/glm4-moe-kjv-tiny", "glm4_moe_kjv_tiny"}),
    [](const auto& info) { return std::string(info.param.golden); });

}  // namespace
}  // namespace llmrt::testing
