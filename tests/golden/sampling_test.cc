// Sampling through the C ABI: sessions that keep no logits (LLM_SAMPLING_NO_LOGITS) decode the
// tokens of sessions that do, greedy and drawn from seeded streams; a session's stream does not
// depend on the sessions stepped with it; unknown flag bits are refused.
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

const char* const kModels[] = {"tiny_kimi_k2_qlora_yarn", "tiny_glm4_moe", "tiny_glm_moe_dsa"};
const char* const kGoldens[] = {"tiny_kimi_k2_qlora_yarn.golden.json", "tiny_glm4_moe.golden.json",
                                "tiny_glm_moe_dsa.golden.json"};

TEST(Sampling, NoLogitsSessionsDecodeTheSameTokens) {
  for (int m = 0; m < 3; ++m) {
    const std::string dir = TestData(kModels[m]);
    const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(kGoldens[m]);
    for (float temperature : {0.0f, 0.9f}) {
      RunConfig cfg;
      cfg.backend = LLM_BACKEND_CPU;
      cfg.max_new_tokens = 12;
      cfg.temperature = temperature;
      cfg.top_p = 0.95f;
      cfg.seed = 1234;
      const std::vector<RunOutput> kept = RunBatch(dir, prompts, cfg);
      cfg.sampling_flags = LLM_SAMPLING_NO_LOGITS;  // RunBatch checks get_logits is INVALID_STATE
      const std::vector<RunOutput> dropped = RunBatch(dir, prompts, cfg);
      ASSERT_EQ(kept.size(), dropped.size());
      for (size_t i = 0; i < kept.size(); ++i) {
        EXPECT_EQ(dropped[i].tokens, kept[i].tokens) << kModels[m] << " prompt " << i << " temperature " << temperature;
        EXPECT_EQ(kept[i].logits.size(), kept[i].tokens.size());
        EXPECT_TRUE(dropped[i].logits.empty());
        EXPECT_EQ(kept[i].tokens.size(), 12u);
      }
    }
  }
}

// Each session draws from its own stream: the same seeds give the same samples whether the
// sessions step together, alone, or with their prompts fed 3 tokens at a time.
TEST(Sampling, SeededDrawsDoNotDependOnTheBatch) {
  const std::string dir = TestData(kModels[0]);
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(kGoldens[0]);
  RunConfig cfg;
  cfg.backend = LLM_BACKEND_CPU;
  cfg.max_new_tokens = 16;
  cfg.temperature = 1.2f;
  cfg.top_k = 40;
  cfg.seed = 77;
  const std::vector<RunOutput> together = RunBatch(dir, prompts, cfg);
  ASSERT_EQ(together.size(), prompts.size());
  bool differs_from_greedy = false;
  RunConfig greedy = cfg;
  greedy.temperature = 0.0f;
  const std::vector<RunOutput> argmax = RunBatch(dir, prompts, greedy);
  for (size_t i = 0; i < prompts.size(); ++i) {
    RunConfig alone = cfg;
    alone.seed = cfg.seed + i;  // RunBatch seeds session j with seed + j
    alone.max_tokens_per_step = 3;
    const std::vector<RunOutput> one = RunBatch(dir, {prompts[i]}, alone);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].tokens, together[i].tokens) << "prompt " << i;
    differs_from_greedy = differs_from_greedy || together[i].tokens != argmax[i].tokens;
  }
  EXPECT_TRUE(differs_from_greedy) << "temperature 1.2 sampled the greedy tokens everywhere: nothing was drawn";
}

TEST(Sampling, UnknownFlagBitsAreRefused) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.backend = LLM_BACKEND_CPU;
  llm_runtime* rt = nullptr;
  ASSERT_EQ(llm_runtime_create(TestData(kModels[1]).c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  EXPECT_EQ(so.flags, 0u);
  so.flags = 0x2u;
  llm_session* s = nullptr;
  EXPECT_EQ(llm_session_create(rt, &so, &s), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(llm_last_error()).find("flags"), std::string::npos) << llm_last_error();
  so.flags = LLM_SAMPLING_NO_LOGITS;
  ASSERT_EQ(llm_session_create(rt, &so, &s), LLM_OK) << llm_last_error();
  // Before any step, and for good: no logits.
  float buf[4];
  size_t count = 0;
  EXPECT_EQ(llm_session_get_logits(s, buf, 4, &count), LLM_ERR_INVALID_STATE);
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
}

}  // namespace
}  // namespace llmrt::testing
