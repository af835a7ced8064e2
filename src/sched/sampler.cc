#include "src/sched/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace llmrt {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = SplitMix64(seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t SampleToken(const float* logits, int64_t n, const SamplingParams& p, Rng& rng) {
  if (p.temperature <= 0.0f || n == 1) return Argmax(logits, n);
  // Candidates sorted by logit, descending (ties by id for determinism).
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = n;
  if (p.top_k > 0 && p.top_k < n) keep = p.top_k;
  auto cmp = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (keep < n) {
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), cmp);
    ids.resize(keep);
  } else {
    std::sort(ids.begin(), ids.end(), cmp);
  }
  // Softmax over the survivors at the given temperature.
  std::vector<double> prob(ids.size());
  const double mx = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    prob[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
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
  double r = rng.Uniform() * total;
  for (size_t i = 0; i < cut; ++i) {
    r -= prob[i];
    if (r < 0) return ids[i];
  }
  return ids[cut - 1];
}

}  // namespace llmrt
