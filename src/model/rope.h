// Rotary embedding parameters derived from the config: inverse frequencies (with YaRN), the
// cos/sin attention factor and the softmax scale of MLA.
#ifndef LLMRT_MODEL_ROPE_H_
#define LLMRT_MODEL_ROPE_H_

#include <vector>

#include "src/model/config.h"

namespace llmrt {

struct RopeParams {
  std::vector<float> inv_freq;  // [rot_dim / 2]
  float attention_factor = 1.0f;
};

// As transformers' _compute_default_rope_parameters / _compute_yarn_parameters for a rotary
// width of `dim`. REQUIRES: dim even, in [2, kMaxHeadDim] (ParseModelConfig guarantees it for
// every width a model derives from its config), and `rope` as ParseModelConfig left it.
RopeParams ComputeRope(const RopeConfig& rope, int64_t dim, int64_t max_position_embeddings);

// yarn_get_mscale of DeepSeek-V3: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
double YarnGetMscale(double scale, double mscale);

// MLA softmax scale: (nope + rope)^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 when
// the rope is scaled and mscale_all_dim is set (transformers' yarn_apply_mscale).
float MlaSoftmaxScale(const ModelConfig& c);

}  // namespace llmrt

#endif  // LLMRT_MODEL_ROPE_H_
