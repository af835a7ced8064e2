// The feed-forward block both MoE families share: a dense SwiGLU MLP, or routed experts
// (noaux_tc routing) plus shared experts (DeepseekV3MoE / Glm4MoeMoE in transformers).
#ifndef LLMRT_MODEL_ARCH_FFN_H_
#define LLMRT_MODEL_ARCH_FFN_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/pass.h"
#include "src/model/weights.h"

namespace llmrt {

struct FfnWeights {
  bool moe = false;
  ExpertWeights dense;                          // !moe: [inter, hidden] x2, [hidden, inter]
  Weight router, router_bias;                   // moe: [E, hidden], [E]
  std::unique_ptr<ExpertBank> experts;          // moe: E routed experts (prefill storage)
  std::unique_ptr<ExpertBank> experts_decode;   // decode storage when it differs, else null
  ExpertWeights shared;                         // moe: width moe_intermediate_size * n_shared_experts
  bool has_shared = false;
};

// Loads `prefix` ("model.layers.N.mlp.") as a dense MLP or as an MoE block.
absl::Status LoadFfn(WeightLoader& w, const ModelConfig& c, const std::string& prefix, bool moe, FfnWeights* out);

// Takes the buffers RunFfn uses for `tokens` tokens (see Workspace).
void TakeFfnScratch(Workspace& ws, const ModelConfig& c, const FfnWeights& f, int64_t tokens);

// out [T, hidden] = FFN(x [T, hidden]); a decode pass uses the decode storage of the experts.
absl::Status RunFfn(PassContext& ctx, const ModelConfig& c, const FfnWeights& f, const Tensor& x, const Tensor& out);

}  // namespace llmrt

#endif  // LLMRT_MODEL_ARCH_FFN_H_
