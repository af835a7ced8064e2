// The INT8 activation policy (llm_runtime_options.quantized_activations) end to end on the
// shipped quantized tiny models: INT4 models follow the EXACT path's logits within a stated
// tolerance and its greedy tokens wherever the EXACT top-1 margin leaves room; FP8 weights are
// not affected (they keep the float32 path); a token's result does not depend on its batch or on
// prefill chunking; the option is validated and an older, shorter options struct still works.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

// INT8 rounds every activation feeding an INT4 matmul to 8 bits per 32 values: an error of at
// most max|x| / 254 per value, 0.1-0.4% of a typical product. Through the 3 layers of these
// models (hidden 128, logits of magnitude ~5-10) the logits move by at most 0.095 on the golden
// prompts (g32 and g128 alike; docs/quantization.md); 0.25 leaves room for other SIMD widths and
// compilers while a wrong scale, code or column moves logits by whole units. Tokens must match
// where the EXACT top-1 margin exceeds 0.5.
constexpr float kInt8LogitTolerance = 0.25f;

struct Comparison {
  int compared_steps = 0;
  int margin_steps = 0;  // steps whose EXACT top-1 margin exceeds 2 * tolerance
  float worst = 0;
};

// The top-1 minus top-2 logit of a row.
float Margin(const std::vector<float>& row) {
  std::vector<float> r = row;
  std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<float>());
  return r[0] - r[1];
}

// Compares INT8 with EXACT step by step while their token histories agree: logits within
// tolerance; the same token wherever the EXACT margin is over twice the tolerance (then no
// pair of logits can swap order).
Comparison CompareWithExact(const std::string& dir, const std::vector<std::vector<int32_t>>& prompts) {
  RunConfig exact_cfg;
  exact_cfg.max_new_tokens = 8;
  RunConfig int8_cfg = exact_cfg;
  int8_cfg.quantized_activations = LLM_ACTIVATIONS_INT8;
  const auto exact = RunBatch(dir, prompts, exact_cfg);
  const auto int8 = RunBatch(dir, prompts, int8_cfg);
  Comparison c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t steps = std::min(exact[i].logits.size(), int8[i].logits.size());
    EXPECT_GT(steps, 0u) << dir << " prompt " << i;
    for (size_t s = 0; s < steps; ++s) {
      const float d = MaxAbsDiff(exact[i].logits[s], int8[i].logits[s]);
      c.worst = std::max(c.worst, d);
      ++c.compared_steps;
      EXPECT_LE(d, kInt8LogitTolerance) << dir << " prompt " << i << " step " << s;
      if (Margin(exact[i].logits[s]) > 2 * kInt8LogitTolerance) {
        ++c.margin_steps;
        EXPECT_EQ(exact[i].tokens[s], int8[i].tokens[s]) << dir << " prompt " << i << " step " << s;
      }
      if (exact[i].tokens[s] != int8[i].tokens[s]) break;  // the histories differ from here on
    }
  }
  return c;
}

TEST(Int8Activations, Int4ModelsFollowTheExactPath) {
  for (const char* model : {"tiny_kimi_k2_int4_g32", "tiny_kimi_k2_int4_g128"}) {
    const Comparison c = CompareWithExact(TestData(model), GoldenPrompts(std::string(model) + ".golden.json"));
    std::printf("[%s] INT8 vs EXACT: max |logit diff| = %.3g over %d steps (%d with margin > %.2g)\n", model, c.worst,
                c.compared_steps, c.margin_steps, 2 * kInt8LogitTolerance);
    // Tokens were asserted somewhere (these small random models have many close calls: a
    // history may part from EXACT's at a step whose margin is under the bound, after which
    // that prompt is not compared further).
    EXPECT_GE(c.margin_steps, 6) << model;
    // The policy is in effect: INT4 matmuls round their activations.
    EXPECT_GT(c.worst, 0.0f) << model;
  }
}

// FP8 block weights keep the float32 path under INT8: the same logits, bit for bit.
TEST(Int8Activations, Fp8WeightsAreUnaffected) {
  const char* model = "tiny_kimi_k2_fp8";
  const auto prompts = GoldenPrompts(std::string(model) + ".golden.json");
  RunConfig exact_cfg;
  exact_cfg.max_new_tokens = 4;
  RunConfig int8_cfg = exact_cfg;
  int8_cfg.quantized_activations = LLM_ACTIVATIONS_INT8;
  const auto exact = RunBatch(TestData(model), prompts, exact_cfg);
  const auto int8 = RunBatch(TestData(model), prompts, int8_cfg);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(exact[i].logits, int8[i].logits) << "prompt " << i;
}

// Solo and batched runs, chunked prefill (a token budget smaller than the prompts) and one
// thread or several give bit-identical INT8 logits: activations are rounded per token row and
// every row of a matmul is computed the same way wherever the thread split falls.
TEST(Int8Activations, BatchCompositionChunkingAndThreadsDoNotChangeResults) {
  for (const char* model : {"tiny_kimi_k2_int4_g32", "tiny_kimi_k2_int4_g128"}) {
    const std::string dir = TestData(model);
    const auto prompts = GoldenPrompts(std::string(model) + ".golden.json");
    RunConfig cfg;
    cfg.quantized_activations = LLM_ACTIVATIONS_INT8;
    cfg.max_new_tokens = 6;
    const auto batched = RunBatch(dir, prompts, cfg);
    RunConfig chunked = cfg;
    chunked.max_tokens_per_step = 5;
    chunked.num_threads = 1;
    const auto chunked_out = RunBatch(dir, prompts, chunked);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto solo = RunBatch(dir, {prompts[i]}, cfg);
      ASSERT_EQ(solo.size(), 1u);
      EXPECT_EQ(solo[0].tokens, batched[i].tokens) << model << " prompt " << i;
      EXPECT_EQ(solo[0].logits, batched[i].logits) << model << " prompt " << i;
      EXPECT_EQ(chunked_out[i].logits, batched[i].logits) << model << " prompt " << i;
    }
  }
}

TEST(Int8Activations, OptionIsValidatedAndOlderStructsReadAsExact) {
  const std::string dir = TestData("tiny_kimi_k2_int4_g32");
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  EXPECT_EQ(ro.quantized_activations, LLM_ACTIVATIONS_EXACT);
  llm_runtime* rt = nullptr;
  for (int32_t bad : {-1, LLM_ACTIVATIONS_FP8 + 1, 1000}) {
    ro.quantized_activations = bad;
    EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(llm_last_error()).find("quantized_activations"), std::string::npos) << llm_last_error();
    EXPECT_EQ(rt, nullptr);
  }
  // A caller built against the header before the field: struct_size ends before it, and the
  // bytes after are not read (here INT8): it scores exactly as EXACT does, not as INT8.
  const std::vector<int32_t> seq = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json")[0];
  auto score = [&](int32_t policy, uint32_t struct_size) {
    llm_runtime_options o;
    llm_runtime_options_init(&o);
    o.quantized_activations = policy;
    o.struct_size = struct_size;
    llm_runtime* r = nullptr;
    std::vector<float> lp(seq.size() - 1);
    std::vector<int32_t> am(seq.size() - 1);
    EXPECT_EQ(llm_runtime_create(dir.c_str(), &o, &r), LLM_OK) << llm_last_error();
    if (r != nullptr) {
      EXPECT_EQ(llm_score(r, seq.data(), seq.size(), lp.data(), am.data()), LLM_OK) << llm_last_error();
    }
    llm_runtime_destroy(r);
    return lp;
  };
  const std::vector<float> exact = score(LLM_ACTIVATIONS_EXACT, sizeof(llm_runtime_options));
  const std::vector<float> int8 = score(LLM_ACTIVATIONS_INT8, sizeof(llm_runtime_options));
  const std::vector<float> old = score(LLM_ACTIVATIONS_INT8, offsetof(llm_runtime_options, quantized_activations));
  EXPECT_EQ(old, exact);
  EXPECT_NE(int8, exact);
}

}  // namespace
}  // namespace llmrt::testing
