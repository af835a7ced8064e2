// Token sampling from one row of logits: greedy, or temperature with top-k, top-p and min-p
// filters, driven by a per-session random stream so equal seeds give equal samples.
#ifndef LLMRT_SCHED_SAMPLER_H_
#define LLMRT_SCHED_SAMPLER_H_

#include <array>
#include <cstdint>

#include "src/backend/sampling.h"

namespace llmrt {

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t Next();
  // The generator's state (KV export / import carries it so sampling continues identically).
  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::array<uint64_t, 4>& s) {
    for (int i = 0; i < 4; ++i) s_[i] = s[i];
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// Samples a token id from logits [n] (SampleRow, src/backend/sampling.h), taking one draw from
// rng when the parameters sample (SamplingDraws).
int32_t SampleToken(const float* logits, int64_t n, const SamplingParams& p, Rng& rng);

}  // namespace llmrt

#endif  // LLMRT_SCHED_SAMPLER_H_
