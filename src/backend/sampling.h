// Token sampling from rows of logits: the arithmetic every backend's SampleTokens op follows, and
// the layout of the per-row parameters it reads from the step's metadata.
//
// One row: greedy (temperature <= 0, or a vocabulary of one) is the index of the largest logit,
// the lowest index among equals (a NaN never wins, except at index 0, where the scan starts).
// Otherwise the candidates are sorted by logit, descending, ties by index; top_k keeps the first
// k; the survivors get softmax probabilities at the temperature (in float64); top_p keeps the
// shortest prefix whose mass reaches top_p (at least one token); min_p then drops the tokens
// whose probability is below min_p times the first's; and the token is the first whose
// cumulative probability exceeds draw * (the kept mass), where `draw` is a uniform number in
// [0, 1) the caller took from the session's random stream. The draw is an input so that a
// device backend samples exactly what the host would from the same stream: the host draws,
// the device sorts and sums.
#ifndef LLMRT_BACKEND_SAMPLING_H_
#define LLMRT_BACKEND_SAMPLING_H_

#include <cstdint>
#include <cstring>

namespace llmrt {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
};

// Whether sampling a row of n logits with p takes a draw from the random stream.
inline bool SamplingDraws(const SamplingParams& p, int64_t n) { return p.temperature > 0.0f && n > 1; }

// Index of the largest logit (the lowest index among equals).
int32_t Argmax(const float* logits, int64_t n);

// The token the arithmetic above picks from logits [n] with `draw` (ignored when greedy).
int32_t SampleRow(const float* logits, int64_t n, const SamplingParams& p, double draw);

// The parameters of one row as the SampleTokens op reads them: kSamplingWords 32-bit words,
// [temperature, top_k, top_p, min_p, draw low word, draw high word] (the floats and the double by
// their bits).
constexpr int64_t kSamplingWords = 6;
inline void PackSamplingRow(const SamplingParams& p, double draw, int32_t* words) {
  std::memcpy(words + 0, &p.temperature, 4);
  std::memcpy(words + 1, &p.top_k, 4);
  std::memcpy(words + 2, &p.top_p, 4);
  std::memcpy(words + 3, &p.min_p, 4);
  std::memcpy(words + 4, &draw, 8);
}
inline void UnpackSamplingRow(const int32_t* words, SamplingParams* p, double* draw) {
  std::memcpy(&p->temperature, words + 0, 4);
  std::memcpy(&p->top_k, words + 1, 4);
  std::memcpy(&p->top_p, words + 2, 4);
  std::memcpy(&p->min_p, words + 3, 4);
  std::memcpy(draw, words + 4, 8);
}

}  // namespace llmrt

#endif  // LLMRT_BACKEND_SAMPLING_H_
