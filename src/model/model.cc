#include "src/model/model.h"

#include "src/model/arch/deepseek_v3.h"
#include "src/model/arch/glm4_moe.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ck, Backend& backend, const LoadOptions& options) {
  // The loaders size per-layer state from num_hidden_layers before they reach the last layer.
  LLMRT_RETURN_IF_ERROR(ck.ValidateLayerCount());
  switch (ck.config().family) {
    case ArchFamily::kDeepseekV3:
    case ArchFamily::kGlmMoeDsa:  // MLA with the DSA indexer: same attention block
      return LoadDeepseekV3(ck, backend, options);
    case ArchFamily::kGlm4Moe:
      return LoadGlm4Moe(ck, backend, options);
  }
  return absl::InternalError("unknown architecture family");
}

KvShape ModelKvShape(const ModelConfig& c) {
  return c.family == ArchFamily::kGlm4Moe ? Glm4MoeKvShape(c) : DeepseekV3KvShape(c);
}

}  // namespace llmrt
