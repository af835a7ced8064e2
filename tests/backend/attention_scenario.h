// A paged-cache scenario for the attention tests: a KvStore of some codec and row shape, a pass
// of several sequences (each with cached history and new tokens, several pages, partial last
// pages), the history encoded into the pages by the codec's scalar reference, the pass's own
// rows written by the backend's KvWrite (which also fills the phase policy's BF16 rows), and the
// values every position reads as under KvCacheView's rule.
#ifndef LLMRT_TESTS_BACKEND_ATTENTION_SCENARIO_H_
#define LLMRT_TESTS_BACKEND_ATTENTION_SCENARIO_H_

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/kv/kv_store.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {

struct ScenarioSpec {
  const KvCodec* codec = nullptr;
  KvShape shape;
  int64_t page_size = 4;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (cached history, new tokens) per sequence
  bool fresh = false;  // lossy codecs: the pass attends over its own rows in BF16
  int64_t layer = 1;
  // Optional: rewrites the values of position p of sequence s (width values) before encoding.
  std::function<void(int64_t s, int64_t p, float* row)> shape_values;
  std::string Describe() const;
};

struct Scenario {
  std::unique_ptr<KvStore> store;
  HostBatch hb;
  AttentionBatch batch;
  float layer_scale = 1.0f;
  // [seq][position] -> width values: what was written, and what attention reads back:
  // DecodeRow(EncodeRow(x)) from pages, or BF16(x) from the fresh rows for the positions this
  // pass writes itself when fresh_rows > 0.
  std::vector<std::vector<std::vector<float>>> values, read;
  // Whether position p of sequence s is read from the fresh rows.
  std::vector<std::vector<bool>> from_fresh;
  const KvCacheView& view() const { return store->view(); }
};

// Builds the scenario on the fixture's backend (throws on a setup failure).
class ScenarioBuilder {
 public:
  explicit ScenarioBuilder(Backend& be) : be_(be) {}
  Scenario Build(const ScenarioSpec& spec, std::mt19937& rng);

 private:
  Backend& be_;
};

// The error bound of softmax attention over n positions computed in float32 (any order), for
// one output element: 2 * sum_p prob_p |v_p| * (2 E + (2 n + 16) u), where E bounds the score
// errors (a D-term dot product: (D + 4) u times its magnitude, scale included). Derivation:
// a score error e moves exp(s - max) by a relative e (and the max by at most E), so each
// probability has relative error at most 2E plus the exponential's, the normalizing sum's (n u)
// and the division's roundings; the weighted sum of values adds n u of sum_p prob_p |v_p|. The
// factor 2 is headroom over this first-order bound.
double AttentionTolerance(double weighted_abs_values, double max_score_error, int64_t n);

}  // namespace llmrt::conformance

#endif  // LLMRT_TESTS_BACKEND_ATTENTION_SCENARIO_H_
