// The model interface the runtime drives: one batched forward pass over a paged KV cache.
#ifndef LLMRT_MODEL_MODEL_H_
#define LLMRT_MODEL_MODEL_H_

#include <array>
#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/checkpoint.h"
#include "src/model/workspace.h"
#include "src/quant/kv_codec.h"
#include "src/quant/phase_policy.h"

namespace llmrt {

// Which rank of a tensor-parallel group a model replica is, and how its MoE layers split
// (docs/parallelism.md): attention by head, dense and shared-expert MLPs by intermediate column,
// embedding and lm_head by vocabulary row; routed experts by intermediate column (tensor-parallel
// experts) or whole experts by rank (expert parallelism).
struct ShardPlan {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
  bool sharded() const { return size > 1; }
  // Rank's share [Begin(n), Begin(n) + Part(n)) of n items split evenly (n divisible by size).
  int64_t Part(int64_t n) const { return n / size; }
  int64_t Begin(int64_t n) const { return n / size * rank; }
};

// What the loader needs of the phase policy (the routed experts' storage per phase) and of the
// parallel plan.
struct LoadOptions {
  ExpertStorage prefill_experts = ExpertStorage::kAsStored;
  ExpertStorage decode_experts = ExpertStorage::kAsStored;
  ShardPlan shard;
};

// One step's input, all in backend memory (views of the step's metadata upload).
struct ForwardBatch {
  Tensor token_ids;   // I32 [T]
  Tensor positions;   // I32 [T]
  AttentionBatch attn;
  Tensor logit_rows;  // I32 [S]: rows of the batch whose logits are wanted
  // How each logit row samples (Backend::SampleTokens): I32 [S * kSamplingWords], and the rows
  // that draw, I32 [n]. Read by the runtime after the pass, not by the model.
  Tensor sampling;
  Tensor random_rows;
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
  bool decode_phase = false;  // every sequence advances by one generated token
};

// Resident weight bytes (codes plus scales) by weight format id.
using BytesByFormat = std::array<uint64_t, kMaxWeightFormats>;

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // What the model caches per token per layer.
  virtual const KvShape& kv_shape() const = 0;
  virtual uint64_t num_parameters() const = 0;
  // Bytes of the checkpoint tensors the model reads.
  virtual uint64_t weight_bytes() const = 0;
  virtual const BytesByFormat& resident_bytes() const = 0;
  // Workspace bytes a pass of up to max_tokens tokens and max_logit_rows logit rows takes.
  virtual uint64_t WorkspaceBytes(int64_t max_tokens, int64_t max_logit_rows) const = 0;
  // Runs the batch: writes its K/V into `cache` and the logits of the requested rows into
  // logits [S, vocab] (backend memory). Buffers come from `ws`. Errors of backend ops surface
  // at the runtime's Synchronize.
  virtual absl::Status Forward(const ForwardBatch& batch, const KvCacheView& cache, Workspace& ws,
                               const Tensor& logits) = 0;
};

// What a model of config `c` caches per token per layer on each rank of a tensor-parallel group
// of `tp` (no weights are read): MLA's latent is replicated on every rank, GQA's KV heads are
// split (at least one per rank, replicated when tp exceeds them).
KvShape ModelKvShape(const ModelConfig& c, int tp = 1);

// Whether config `c` splits over `plan`: heads, KV heads, experts, MLP widths and the vocabulary
// divisible by the degree. InvalidArgument naming the dimension, its size and the degree.
// (Quantized blocks and groups are checked per tensor as it loads.)
absl::Status CheckShardable(const ModelConfig& c, const ShardPlan& plan);

// Builds the model of the checkpoint's architecture, loading and validating every weight.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ck, Backend& backend,
                                                 const LoadOptions& options = {});

}  // namespace llmrt

#endif  // LLMRT_MODEL_MODEL_H_
