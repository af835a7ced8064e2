// SampleTokens: the ids a backend samples are the ones the reference arithmetic
// (src/backend/sampling.h, SampleRow) picks from the same logits, parameters and draws. The
// reference is exact; the device's sums run in another order, which can move a token only for a
// draw within a few float64 ulps of a boundary between two cumulative masses, which the random
// draws here do not hit (the chance is about 1e-15 per row), so equality is asserted.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "src/backend/sampling.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

class SamplingOps : public BackendTest {
 protected:
  struct Row {
    std::vector<float> logits;
    SamplingParams params;
    double draw = 0.0;
  };
  // Samples every row in one call and compares each id with the reference.
  void ExpectReferenceTokens(const std::vector<Row>& rows, int64_t vocab) {
    const int64_t R = static_cast<int64_t>(rows.size());
    std::vector<float> logits;
    std::vector<int32_t> words(static_cast<size_t>(R * kSamplingWords));
    std::vector<int32_t> random;
    for (int64_t r = 0; r < R; ++r) {
      logits.insert(logits.end(), rows[r].logits.begin(), rows[r].logits.end());
      PackSamplingRow(rows[r].params, rows[r].draw, words.data() + r * kSamplingWords);
      if (SamplingDraws(rows[r].params, vocab)) random.push_back(static_cast<int32_t>(r));
    }
    Tensor l = F32(logits, {R, vocab});
    Tensor p = I32(words);
    Tensor holder = I32(random.empty() ? std::vector<int32_t>{0} : random);
    Tensor rr = holder.Rows(0, static_cast<int64_t>(random.size()));
    Tensor ids = NewTensor(DType::kI32, {R});
    be().SampleTokens(l, p, rr, ids);
    const std::vector<int32_t> got = ReadI32(ids);
    for (int64_t r = 0; r < R; ++r) {
      const Row& row = rows[r];
      EXPECT_EQ(got[r], SampleRow(row.logits.data(), vocab, row.params, row.draw))
          << "row " << r << ": temperature " << row.params.temperature << " top_k " << row.params.top_k << " top_p "
          << row.params.top_p << " min_p " << row.params.min_p << " draw " << row.draw;
    }
  }
};

// Greedy rows: the largest logit, the lowest index among equals, a NaN never but at index 0.
TEST_P(SamplingOps, GreedyIsTheFirstLargestLogit) {
  std::mt19937 rng(3);
  const int64_t V = 5000;  // more than one 4096-candidate tile of the device kernels
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<Row> rows;
  for (int i = 0; i < 6; ++i) rows.push_back({RandomNormal(V, rng), {}, 0.0});
  rows[1].logits[4000] = rows[1].logits[17] = 9.0f;  // a tie: 17
  rows[2].logits[0] = nan;                          // the scan starts at a NaN: 0
  rows[3].logits[123] = nan;                        // a NaN elsewhere never wins
  rows[3].logits[124] = 50.0f;
  rows[4].logits.assign(V, -inf);                   // all -inf: 0
  rows[4].logits[9] = nan;
  rows[5].logits.assign(V, -0.0f);                  // -0 and +0 are equal: the first
  rows[5].logits[2] = 0.0f;
  rows.push_back({RandomNormal(V, rng), {0.8f, 0, 1.0f, 0.0f}, 0.5});  // V > 1 draws; the others do not
  rows.back().params.temperature = 0.0f;
  ExpectReferenceTokens(rows, V);
  // A vocabulary of one never draws, whatever the temperature.
  ExpectReferenceTokens({{{1.5f}, {1.0f, 0, 0.9f, 0.1f}, 0.7}, {{-3.0f}, {}, 0.0}}, 1);
}

// Drawing rows: every filter alone and together, ties among logits (their order is by index),
// the extreme draws, and more drawing rows than the device sorts at once.
TEST_P(SamplingOps, DrawsPickTheReferenceToken) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t V = 5000;
  std::vector<Row> rows;
  const float temps[] = {0.3f, 0.7f, 1.0f, 1.6f};
  const int32_t top_ks[] = {0, 1, 7, 64, 4999, 6000};
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.01f};
  const float min_ps[] = {0.0f, 0.02f, 0.4f};
  int n = 0;
  for (float t : temps) {
    for (int32_t k : top_ks) {
      for (float p : top_ps) {
        for (float m : min_ps) {
          if (++n % 3 != 0) continue;  // a third of the grid keeps the test short
          std::vector<float> l = RandomNormal(V, rng, 2.0f);
          // Every other row has its logits in steps of 0.25: many ties, ordered by index.
          if (n % 2 == 0) {
            for (float& x : l) x = std::round(x * 4.0f) / 4.0f;
          }
          rows.push_back({std::move(l), {t, k, p, m}, uniform(rng)});
        }
      }
    }
  }
  rows[0].draw = 0.0;
  rows[1].draw = 0x1.fffffffffffffp-1;  // the largest double below 1
  ASSERT_GT(rows.size(), 40u);
  ExpectReferenceTokens(rows, V);
}

// Greedy and drawing rows in one call: each row samples by its own parameters.
TEST_P(SamplingOps, MixedRowsSampleByTheirOwnParameters) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t V = 300;
  std::vector<Row> rows;
  for (int i = 0; i < 20; ++i) {
    SamplingParams p;
    if (i % 3 != 0) p = {0.9f, i % 4 == 0 ? 20 : 0, i % 5 == 0 ? 0.8f : 1.0f, 0.0f};
    rows.push_back({RandomNormal(V, rng, 3.0f), p, uniform(rng)});
  }
  ExpectReferenceTokens(rows, V);
}

// Kimi K2's vocabulary of 163,840: rows a device samples from its best 2,048 candidates (peaked
// logits like a trained model's, with and without top_k, top_p and min_p; top_k past the
// candidates; flat logits cut to top_k 50) and rows it sorts whole (flat logits with the
// temperature alone, a top_p that the best 2,048 do not reach), in one call.
TEST_P(SamplingOps, FullVocabularyRowsOfEveryKind) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t V = 163840;
  const auto peaked = [&] {
    std::vector<float> l = RandomNormal(V, rng, 2.0f);
    std::normal_distribution<float> normal;
    for (int i = 0; i < 40; ++i) l[rng() % V] = 14.0f + 2.0f * normal(rng);
    return l;
  };
  std::vector<Row> rows;
  rows.push_back({peaked(), {1.0f, 0, 1.0f, 0.0f}, uniform(rng)});
  rows.push_back({peaked(), {0.7f, 50, 0.95f, 0.0f}, uniform(rng)});
  rows.push_back({peaked(), {0.9f, 0, 0.9f, 0.05f}, uniform(rng)});
  rows.push_back({peaked(), {1.2f, 3000, 1.0f, 0.0f}, uniform(rng)});
  rows.push_back({RandomNormal(V, rng, 0.05f), {1.0f, 0, 1.0f, 0.0f}, 0.5});
  rows.push_back({RandomNormal(V, rng, 0.05f), {1.0f, 0, 0.9f, 0.0f}, uniform(rng)});
  rows.push_back({RandomNormal(V, rng, 0.05f), {1.0f, 50, 1.0f, 0.0f}, uniform(rng)});
  rows.push_back({peaked(), {}, 0.0});  // greedy
  ExpectReferenceTokens(rows, V);
}

LLMRT_BACKEND_SUITE(SamplingOps);

}  // namespace
}  // namespace llmrt::conformance
