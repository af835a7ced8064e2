#include "src/model/arch/common.h"

#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/util/log.h"
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

void LogSkippedMtpLayers(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  const std::string prefix = c.prefix + "layers.";
  std::set<int64_t> layers;
  int64_t tensors = 0;
  for (auto it = ck.tensors().lower_bound(prefix); it != ck.tensors().end(); ++it) {
    const std::string& name = it->first;
    if (name.compare(0, prefix.size(), prefix) != 0) break;
    const size_t dot = name.find('.', prefix.size());
    int64_t layer = 0;
    if (dot == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name).substr(prefix.size(), dot - prefix.size()), &layer)) {
      continue;
    }
    if (layer >= c.num_layers) {
      layers.insert(layer);
      ++tensors;
    }
  }
  if (layers.empty()) return;
  Log(LogLevel::kInfo, absl::StrCat(ck.dir(), ": skipping ", layers.size(),
                                    " multi-token-prediction layer(s) from layer ", *layers.begin(), " (", tensors,
                                    " tensors; num_nextn_predict_layers=", c.num_nextn_predict_layers,
                                    "): llmrt does not run speculative MTP heads"));
}

}  // namespace llmrt
