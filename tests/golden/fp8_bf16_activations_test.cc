// The BF16 and FP8 activation policies on FP8 block-scaled checkpoints, end to end: FP8 matmuls
// (blocks of 64 or 128 columns) take bf16 dot products on their exact codes, with the activations
// rounded to bfloat16 (BF16) or quantized to e4m3 per row and column block (FP8), so the logits
// follow the EXACT FP8 path's within a stated tolerance per policy and greedy tokens follow
// wherever the EXACT top-1 margin leaves room; a token's result does not depend on its batch, on
// prefill chunking or on threads.
// The models: the random-weight FP8 fixture with 64 x 64 blocks, and the two shipped trained
// models converted to FP8 with 128 x 128 blocks (llm_convert_checkpoint, as the released FP8
// checkpoints are laid out) into a temporary directory.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

// BF16 rounds every activation feeding an FP8 (or BF16) matmul to 8 significant bits, as for
// BF16 weights (bf16_activations_test.cc): the logits of the converted shipped models moved by at
// most 0.081 on the golden prompts (docs/quantization.md); 0.3 leaves the same room as for BF16
// weights, while a wrong column order, scale block or lost subnormal code moves logits by whole
// units. FP8 keeps 4 significant bits per activation under a per-block scale (BF16 weights keep
// the BF16 policy): the converted shipped models' logits moved by at most 0.669 (Kimi) and 0.417
// (GLM-4.5); 0.75 holds them while a wrong scale, block or column order moves logits by units.
// The FP8 matmuls' bits are the same on every x86 CPU (the AVX-512 path and its scalar emulation
// agree bit for bit), so only the BF16 matmuls' AMX sums move these figures elsewhere, by far
// less. Tokens must match where the EXACT top-1 margin exceeds twice the tolerance: at least 4
// such steps per model under BF16, 3 under FP8 (its wider bound leaves GLM-4.5 three).
float LogitTolerance(int policy) { return policy == LLM_ACTIVATIONS_FP8 ? 0.75f : 0.3f; }
const char* PolicyName(int policy) { return policy == LLM_ACTIVATIONS_FP8 ? "FP8" : "BF16"; }

struct Model {
  std::string dir;
  std::string golden;  // the prompts
  // The random-weight fixture routes near ties: on 2 of its 22 steps the rounded activations
  // flip a discrete choice and that step's logits move by 1.6 and 3.6 (the same steps move by
  // the same amounts when its FP8 matmuls are computed in float64 from the rounded activations,
  // so the kernels are not the cause). For it the bound must hold on three quarters of the steps.
  bool discrete = false;
};

std::vector<Model> Fp8Models() {
  return {{TestData("tiny_kimi_k2_fp8"), "tiny_kimi_k2_fp8.golden.json", true},
          {ConvertedFp8Model("kimi-k2-kjv-tiny"), "kimi_k2_kjv_tiny.golden.json"},
          {ConvertedFp8Model("glm4-moe-kjv-tiny"), "glm4_moe_kjv_tiny.golden.json"}};
}

float Margin(const std::vector<float>& row) {
  std::vector<float> r = row;
  std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<float>());
  return r[0] - r[1];
}

class Fp8Bf16Activations : public ::testing::TestWithParam<int> {};

TEST_P(Fp8Bf16Activations, Fp8ModelsFollowTheExactFp8Path) {
  const float kLogitTolerance = LogitTolerance(GetParam());
  for (const Model& m : Fp8Models()) {
    // The random-weight fixture's routing scores are near ties everywhere: under e4m3 activations
    // its very first step routes differently (logits 3.1 off), so under FP8 it only serves the
    // invariance test below.
    if (m.discrete && GetParam() == LLM_ACTIVATIONS_FP8) continue;
    const auto prompts = GoldenPrompts(m.golden);
    RunConfig exact_cfg;
    exact_cfg.max_new_tokens = 8;
    RunConfig bf16_cfg = exact_cfg;
    bf16_cfg.quantized_activations = GetParam();
    const auto exact = RunBatch(m.dir, prompts, exact_cfg);
    const auto bf16 = RunBatch(m.dir, prompts, bf16_cfg);
    ASSERT_EQ(exact.size(), prompts.size());
    ASSERT_EQ(bf16.size(), prompts.size());
    int compared = 0, margin_steps = 0, same_tokens = 0, within = 0;
    float worst = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const size_t steps = std::min(exact[i].logits.size(), bf16[i].logits.size());
      EXPECT_GT(steps, 0u) << m.dir << " prompt " << i;
      for (size_t s = 0; s < steps; ++s) {
        const float d = MaxAbsDiff(exact[i].logits[s], bf16[i].logits[s]);
        worst = std::max(worst, d);
        ++compared;
        within += d <= kLogitTolerance;
        if (!m.discrete) {
          EXPECT_LE(d, kLogitTolerance) << m.dir << " prompt " << i << " step " << s;
        }
        if (Margin(exact[i].logits[s]) > 2 * kLogitTolerance && d <= kLogitTolerance) {
          ++margin_steps;
          EXPECT_EQ(exact[i].tokens[s], bf16[i].tokens[s]) << m.dir << " prompt " << i << " step " << s;
        }
        if (exact[i].tokens[s] != bf16[i].tokens[s]) break;  // the histories differ from here on
        ++same_tokens;
      }
    }
    std::printf("[%s] FP8 weights under %s vs EXACT: max |logit diff| = %.3g over %d steps (%d within %.2g, %d with "
                "margin > %.2g, %d same tokens)\n",
                m.dir.c_str(), PolicyName(GetParam()), worst, compared, within, kLogitTolerance, margin_steps,
                2 * kLogitTolerance, same_tokens);
    EXPECT_GE(4 * within, 3 * compared) << m.dir;
    EXPECT_GE(margin_steps, GetParam() == LLM_ACTIVATIONS_FP8 ? 3 : 4) << m.dir;
    EXPECT_GT(worst, 0.0f) << m.dir << ": the policy changed nothing";
  }
}

// Solo and batched runs, chunked prefill (a token budget smaller than the prompts: one-row and
// many-row calls meet the same rows) and one thread or several give bit-identical logits.
TEST_P(Fp8Bf16Activations, BatchCompositionChunkingAndThreadsDoNotChangeResults) {
  for (const Model& m : Fp8Models()) {
    const auto prompts = GoldenPrompts(m.golden);
    RunConfig cfg;
    cfg.quantized_activations = GetParam();
    cfg.max_new_tokens = 6;
    const auto batched = RunBatch(m.dir, prompts, cfg);
    RunConfig chunked = cfg;
    chunked.max_tokens_per_step = 5;
    chunked.num_threads = 1;
    const auto chunked_out = RunBatch(m.dir, prompts, chunked);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto solo = RunBatch(m.dir, {prompts[i]}, cfg);
      ASSERT_EQ(solo.size(), 1u);
      EXPECT_EQ(solo[0].tokens, batched[i].tokens) << m.dir << " prompt " << i;
      EXPECT_EQ(solo[0].logits, batched[i].logits) << m.dir << " prompt " << i;
      EXPECT_EQ(chunked_out[i].logits, batched[i].logits) << m.dir << " prompt " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, Fp8Bf16Activations, ::testing::Values(LLM_ACTIVATIONS_BF16, LLM_ACTIVATIONS_FP8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == LLM_ACTIVATIONS_FP8 ? "fp8" : "bf16");
                         });

}  // namespace
}  // namespace llmrt::testing
