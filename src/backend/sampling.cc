#include "src/backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace llmrt {

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t SampleRow(const float* logits, int64_t n, const SamplingParams& p, double draw) {
  if (!SamplingDraws(p, n)) return Argmax(logits, n);
  // A NaN logit is never a candidate: it sorts as -infinity.
  auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  // Candidates sorted by logit, descending (ties by id for determinism).
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = n;
  if (p.top_k > 0 && p.top_k < n) keep = p.top_k;
  auto cmp = [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
  if (keep < n) {
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), cmp);
    ids.resize(static_cast<size_t>(keep));
  } else {
    std::sort(ids.begin(), ids.end(), cmp);
  }
  // Softmax over the survivors at the given temperature.
  std::vector<double> prob(ids.size());
  const double mx = key(ids[0]);
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    prob[i] = std::exp((key(ids[i]) - mx) / p.temperature);
    sum += prob[i];
  }
  for (auto& q : prob) q /= sum;
  size_t cut = ids.size();
  if (p.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double acc = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      acc += prob[i];
      if (acc >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * prob[0];
    size_t i = 1;
    while (i < cut && prob[i] >= floor) ++i;
    cut = i;
  }
  double total = 0;
  for (size_t i = 0; i < cut; ++i) total += prob[i];
  double r = draw * total;
  for (size_t i = 0; i < cut; ++i) {
    r -= prob[i];
    if (r < 0) return ids[i];
  }
  return ids[cut - 1];
}

}  // namespace llmrt
