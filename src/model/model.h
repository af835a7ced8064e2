// The model interface the runtime drives: one batched forward pass over a paged KV cache.
#ifndef LLMRT_MODEL_MODEL_H_
#define LLMRT_MODEL_MODEL_H_

#include <array>
#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/checkpoint.h"

namespace llmrt {

// Storage of the routed experts for one phase: as the checkpoint stores them, or quantized at
// load to INT4 (symmetric, round to nearest, groups of 32 or 128) from BF16, FP8 or INT4.
enum class ExpertStorage { kAsStored, kInt4G32, kInt4G128 };

// Weights per phase (Cloudflare's policy: FP8 for compute-bound prefill, INT4 for bandwidth-bound
// decode). Equal policies keep one resident set; different ones keep both routed-expert sets
// resident and run a forward pass with the decode set when every sequence in it decodes.
struct LoadOptions {
  ExpertStorage prefill_experts = ExpertStorage::kAsStored;
  ExpertStorage decode_experts = ExpertStorage::kAsStored;
};

// One step's input, all in backend memory.
struct ForwardBatch {
  Tensor token_ids;   // I32 [T]
  Tensor positions;   // I32 [T]
  AttentionBatch attn;
  Tensor logit_rows;  // I32 [S]: rows of the batch whose logits are wanted
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
  bool decode_phase = false;  // every sequence advances by one generated token
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Elements of KV cache per token per layer.
  virtual int64_t kv_width() const = 0;
  virtual uint64_t num_parameters() const = 0;
  virtual uint64_t weight_bytes() const = 0;
  // Resident weight bytes (codes plus scales) by WeightFormat, indexed by its value.
  virtual std::array<uint64_t, 4> resident_bytes() const = 0;
  // Runs the batch: writes its K/V into `cache`, and the logits of the requested rows into
  // logits [S, vocab] (float32, backend memory).
  virtual absl::Status Forward(const ForwardBatch& batch, const KvCacheView& cache,
                               const Tensor& logits) = 0;
};

// Builds the model of the checkpoint's architecture, loading and validating every weight.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ck, Backend& backend,
                                                 const LoadOptions& options = {});

}  // namespace llmrt

#endif  // LLMRT_MODEL_MODEL_H_
