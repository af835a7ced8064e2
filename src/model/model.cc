#include "src/model/model.h"

#include "src/model/arch/deepseek_v3.h"
#include "src/model/arch/glm4_moe.h"
#include "absl/strings/str_cat.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ck, Backend& backend, const LoadOptions& options) {
  // The loaders size per-layer state from num_hidden_layers before they reach the last layer.
  LLMRT_RETURN_IF_ERROR(ck.ValidateLayerCount());
  LLMRT_RETURN_IF_ERROR(CheckShardable(ck.config(), options.shard));
  switch (ck.config().family) {
    case ArchFamily::kDeepseekV3:
    case ArchFamily::kGlmMoeDsa:  // MLA with the DSA indexer: same attention block
      return LoadDeepseekV3(ck, backend, options);
    case ArchFamily::kGlm4Moe:
      return LoadGlm4Moe(ck, backend, options);
  }
  return absl::InternalError("unknown architecture family");
}

KvShape ModelKvShape(const ModelConfig& c, int tp) {
  return c.family == ArchFamily::kGlm4Moe ? Glm4MoeKvShape(c, tp) : DeepseekV3KvShape(c);
}

absl::Status CheckShardable(const ModelConfig& c, const ShardPlan& p) {
  if (p.size < 1 || p.rank < 0 || p.rank >= p.size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", p.rank, " is outside a tensor-parallel group of ", p.size));
  }
  if (!p.sharded()) return absl::OkStatus();
  auto divides = [&](const char* what, int64_t n) -> absl::Status {
    if (n % p.size == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, " ", n, " is not divisible by tensor_parallel ", p.size));
  };
  LLMRT_RETURN_IF_ERROR(divides("vocab_size (vocab-parallel embedding and lm_head)", c.vocab_size));
  LLMRT_RETURN_IF_ERROR(divides("num_attention_heads", c.num_heads));
  if (c.family == ArchFamily::kGlm4Moe) {
    const int64_t kv = c.num_kv_heads;
    if ((p.size <= kv && kv % p.size != 0) || (p.size > kv && p.size % kv != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("num_key_value_heads ", kv, " and tensor_parallel ", p.size,
                                                     ": one must divide the other (KV heads are split, or replicated ",
                                                     "when the ranks outnumber them)"));
    }
  }
  bool dense = false, moe = false;
  for (int64_t l = 0; l < c.num_layers; ++l) (c.IsMoeLayer(l) ? moe : dense) = true;
  if (dense) LLMRT_RETURN_IF_ERROR(divides("intermediate_size", c.intermediate_size));
  if (moe) {
    if (p.expert_parallel) {
      LLMRT_RETURN_IF_ERROR(divides("n_routed_experts (expert parallelism)", c.n_routed_experts));
    } else {
      LLMRT_RETURN_IF_ERROR(divides("moe_intermediate_size", c.moe_intermediate_size));
    }
    if (c.n_shared_experts > 0) {
      LLMRT_RETURN_IF_ERROR(divides("the shared experts' width (moe_intermediate_size * n_shared_experts)",
                                    c.moe_intermediate_size * c.n_shared_experts));
    }
  }
  return absl::OkStatus();
}

}  // namespace llmrt
