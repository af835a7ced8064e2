#include "src/model/rope.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/util/status.h"

namespace llmrt {
namespace {

// double -> float without undefined behaviour: a finite value beyond the float range saturates
// to +-inf (ParseModelConfig's bounds keep real configs far inside it).
float ToFloat(double x) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (x > kMax) return std::numeric_limits<float>::infinity();
  if (x < -kMax) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(x);
}

}  // namespace

double YarnGetMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

RopeParams ComputeRope(const RopeConfig& rope, int64_t dim, int64_t max_position_embeddings) {
  // A table of dim / 2 floats: ParseModelConfig bounds every rotary width by kMaxHeadDim.
  LLMRT_CHECK(dim >= 2 && dim <= kMaxHeadDim && dim % 2 == 0);
  RopeParams p;
  const int64_t half = dim / 2;
  p.inv_freq.resize(half);
  // pos_freqs = base ** (arange(0, dim, 2) / dim), computed in float32 by torch.
  std::vector<float> pos_freqs(half);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[i] = std::pow(static_cast<float>(rope.theta), expo);
  }
  if (rope.type != "yarn") {
    for (int64_t i = 0; i < half; ++i) p.inv_freq[i] = 1.0f / pos_freqs[i];
    p.attention_factor = 1.0f;
    return p;
  }
  const double factor = rope.factor;
  if (rope.attention_factor > 0) {
    p.attention_factor = ToFloat(rope.attention_factor);
  } else if (rope.mscale != 0 && rope.mscale_all_dim != 0) {
    p.attention_factor = ToFloat(YarnGetMscale(factor, rope.mscale) / YarnGetMscale(factor, rope.mscale_all_dim));
  } else {
    p.attention_factor = ToFloat(YarnGetMscale(factor, 1.0));
  }
  const double orig = static_cast<double>(rope.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(rope.theta));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const float extrap = 1.0f / pos_freqs[i];
    const float interp = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    // ramp computed in float32 as torch does.
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrap_factor = 1.0f - ramp;
    p.inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  (void)max_position_embeddings;
  return p;
}

float MlaSoftmaxScale(const ModelConfig& c) {
  // Both widths are at most kMaxHeadDim and the rope width at least 2: no overflow, no 0.
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim) + static_cast<double>(c.qk_rope_head_dim));
  if (c.rope.type != "default" && c.rope.mscale_all_dim != 0) {
    const double m = YarnGetMscale(c.rope.factor, c.rope.mscale_all_dim);
    scale *= m * m;
  }
  return ToFloat(scale);
}

}  // namespace llmrt
