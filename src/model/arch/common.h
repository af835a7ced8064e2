// Pieces of the forward pass every architecture ends with.
#ifndef LLMRT_MODEL_ARCH_COMMON_H_
#define LLMRT_MODEL_ARCH_COMMON_H_

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/model/model.h"

namespace llmrt {

// logits [S, vocab] = lm_head(RMSNorm(x[rows])) for the batch's logit rows only: the rows whose
// next token is sampled or scored.
absl::Status ComputeLogits(Backend& be, const ForwardBatch& b, const Tensor& x, const Weight& final_norm,
                           float eps, const Weight& lm_head, const Tensor& logits);

// Logs the multi-token-prediction layers the checkpoint stores after its last decoder layer
// (DeepSeek-V3 / GLM: model.layers.<num_layers>...), which llmrt does not run.
void LogSkippedMtpLayers(const Checkpoint& ck);

}  // namespace llmrt

#endif  // LLMRT_MODEL_ARCH_COMMON_H_
