// The GLM-4.5 / 4.6 / 4.7 architecture (Glm4MoeForCausalLM): grouped-query attention with q/k/v
// biases, optional per-head q/k RMSNorm and partial NeoX rotary over a paged per-KV-head K/V
// cache; dense-then-MoE feed-forward shared with DeepSeek-V3.
#ifndef LLMRT_MODEL_ARCH_GLM4_MOE_H_
#define LLMRT_MODEL_ARCH_GLM4_MOE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/model/model.h"
#include "src/quant/kv_codec.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<Model>> LoadGlm4Moe(const Checkpoint& ck, Backend& backend, const LoadOptions& options);

// What the architecture caches per token per layer on each of `tp` tensor-parallel ranks.
KvShape Glm4MoeKvShape(const ModelConfig& c, int tp = 1);
// KV heads each of `tp` ranks holds: num_kv_heads / tp, or one (replicated) when tp exceeds them.
int64_t Glm4MoeRankKvHeads(const ModelConfig& c, int tp);

}  // namespace llmrt

#endif  // LLMRT_MODEL_ARCH_GLM4_MOE_H_
