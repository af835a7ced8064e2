#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "src/sched/sampler.h"
#include "src/sched/scheduler.h"

namespace llmrt {
namespace {

TEST(Scheduler, DecodesFirstThenPrefillsInArrivalOrder) {
  std::vector<SchedCandidate> c = {{0, 10, false}, {1, 1, true}, {2, 7, false}, {3, 1, true}};
  auto plan = PlanStep(c, 8);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].key, 1);
  EXPECT_EQ(plan[1].key, 3);
  EXPECT_EQ(plan[2].key, 0);
  EXPECT_EQ(plan[2].num_tokens, 6);  // the budget left after two decodes
}

TEST(Scheduler, BudgetOfOneStillAdvancesSomeone) {
  auto plan = PlanStep({{0, 5, false}}, 1);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].num_tokens, 1);
  EXPECT_TRUE(PlanStep({}, 10).empty());
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  const float l[] = {0.1f, 3.0f, -1.0f, 3.0f};
  Rng rng(1);
  EXPECT_EQ(SampleToken(l, 4, SamplingParams{}, rng), 1);
}

TEST(Sampler, SameSeedSameSamples) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 1.3f) * 2;
  SamplingParams p;
  p.temperature = 1.0f;
  Rng a(42), b(42), c(43);
  std::vector<int> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(SampleToken(l.data(), 50, p, a));
    sb.push_back(SampleToken(l.data(), 50, p, b));
    sc.push_back(SampleToken(l.data(), 50, p, c));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, FiltersRestrictTheSupport) {
  // Probabilities at T=1 proportional to exp(logit): token 0 dominates, 1 and 2 follow.
  const float l[] = {3.0f, 2.0f, 1.0f, -5.0f, -6.0f};
  Rng rng(5);
  SamplingParams k2;
  k2.temperature = 1.0f;
  k2.top_k = 2;
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;  // token 0 alone has ~0.66, so tokens {0, 1}
  SamplingParams m;
  m.temperature = 1.0f;
  m.min_p = 0.3f;  // keeps tokens with p >= 0.3 * p0: {0, 1}
  std::map<int, int> hk, hp, hm;
  for (int i = 0; i < 2000; ++i) {
    hk[SampleToken(l, 5, k2, rng)]++;
    hp[SampleToken(l, 5, p, rng)]++;
    hm[SampleToken(l, 5, m, rng)]++;
  }
  for (auto* h : {&hk, &hp, &hm}) {
    EXPECT_EQ(h->size(), 2u);
    EXPECT_GT((*h)[0], (*h)[1]);
    EXPECT_GT((*h)[1], 0);
  }
  // Without filters, at T=1, token 0 has probability e^3 / sum = 0.665; 2000 draws put its
  // frequency within 0.665 +- 0.05 (more than 4 standard deviations).
  SamplingParams t;
  t.temperature = 1.0f;
  int zeros = 0;
  for (int i = 0; i < 2000; ++i) zeros += SampleToken(l, 5, t, rng) == 0;
  EXPECT_NEAR(zeros / 2000.0, 0.665, 0.05);
}

}  // namespace
}  // namespace llmrt
