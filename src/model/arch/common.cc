#include "src/model/arch/common.h"

#include "src/util/status.h"

namespace llmrt {

absl::Status ComputeLogits(Backend& be, const ForwardBatch& b, const Tensor& x, const Weight& final_norm,
                           float eps, const Weight& lm_head, const Tensor& logits) {
  const int64_t S = b.num_logit_rows;
  if (S == 0) return absl::OkStatus();
  LLMRT_ASSIGN_OR_RETURN(Tensor last, be.Allocate(DType::kF32, {S, x.dim(1)}));  // [S, hidden]
  be.GatherRows(x, b.logit_rows, last);
  be.RmsNorm(last, final_norm, eps, last);
  be.MatMul(last, lm_head, logits);  // [S, vocab]
  return absl::OkStatus();
}

}  // namespace llmrt
