// The DeepSeek-V3 architecture (Kimi K2, K2-Thinking, K2.5+ text model): MLA attention with
// weight absorption over a paged latent cache, dense-then-MoE feed-forward with noaux_tc routing.
#ifndef LLMRT_MODEL_ARCH_DEEPSEEK_V3_H_
#define LLMRT_MODEL_ARCH_DEEPSEEK_V3_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/model/model.h"
#include "src/quant/kv_codec.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<Model>> LoadDeepseekV3(const Checkpoint& ck, Backend& backend, const LoadOptions& options);

// What the architecture caches per token per layer.
KvShape DeepseekV3KvShape(const ModelConfig& c);

}  // namespace llmrt

#endif  // LLMRT_MODEL_ARCH_DEEPSEEK_V3_H_
