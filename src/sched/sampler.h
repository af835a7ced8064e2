// Token sampling from one row of logits: greedy, or temperature with top-k, top-p and min-p
// filters, driven by a per-session random stream so equal seeds give equal samples.
#ifndef LLMRT_SCHED_SAMPLER_H_
#define LLMRT_SCHED_SAMPLER_H_

#include <array>
#include <cstdint>

namespace llmrt {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
};

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

// Index of the largest logit (the lowest index among equals).
int32_t Argmax(const float* logits, int64_t n);

// Samples a token id from logits [n].
int32_t SampleToken(const float* logits, int64_t n, const SamplingParams& p, Rng& rng);

}  // namespace llmrt

#endif  // LLMRT_SCHED_SAMPLER_H_
