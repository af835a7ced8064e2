// The model interface the runtime drives: one batched forward pass over a paged KV cache.
#ifndef LLMRT_MODEL_MODEL_H_
#define LLMRT_MODEL_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/checkpoint.h"

namespace llmrt {

// One step's input, all in backend memory.
struct ForwardBatch {
  Tensor token_ids;   // I32 [T]
  Tensor positions;   // I32 [T]
  AttentionBatch attn;
  Tensor logit_rows;  // I32 [S]: rows of the batch whose logits are wanted
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Elements of KV cache per token per layer.
  virtual int64_t kv_width() const = 0;
  virtual uint64_t num_parameters() const = 0;
  virtual uint64_t weight_bytes() const = 0;
  // Runs the batch: writes its K/V into `cache`, and the logits of the requested rows into
  // logits [S, vocab] (float32, backend memory).
  virtual absl::Status Forward(const ForwardBatch& batch, const KvCacheView& cache,
                               const Tensor& logits) = 0;
};

// Builds the model of the checkpoint's architecture, loading and validating every weight.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Checkpoint& ck, Backend& backend);

}  // namespace llmrt

#endif  // LLMRT_MODEL_MODEL_H_
