// Teacher-forced scoring (llm_score): the log-probability of every next token of a sequence.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "src/runtime/runtime.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {

absl::Status Runtime::Score(absl::Span<const int32_t> tokens, float* logprobs, int32_t* argmax) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return absl::InvalidArgumentError("scoring needs at least two tokens");
  if (n > c.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat(n, " tokens exceed max_position_embeddings ", c.max_position_embeddings));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i], " at index ", i, " is outside the vocabulary"));
    }
  }
  std::lock_guard<std::mutex> step_lock(step_mu_);
  const int64_t chunk = options_.max_tokens_per_step;
  // Every row of a chunk needs logits: more rows than a step's buffer when max_sessions is
  // smaller than max_tokens_per_step. That buffer is made by the first such call and kept.
  const bool own_buffer = std::min(chunk, n) > ranks_[0].logits.dim(0);
  for (Replica& k : ranks_) {
    if (own_buffer && k.score_logits.numel() == 0) {
      LLMRT_ASSIGN_OR_RETURN(k.score_logits, k.backend->Allocate(DType::kF32, {chunk, c.vocab_size}));
    }
  }
  // The call's pages, reported to a tracker under an id no session has (0 is the orphans').
  constexpr uint64_t kScoreSession = UINT64_MAX;
  PageTable table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kv_->Reserve(kScoreSession, table, n)) {
      return KvExhaustedError(absl::StrCat("scoring ", n, " tokens needs more KV pages than are free"));
    }
  }
  // Scoring changes nothing a later step sees: a per-layer FP8 scale its passes calibrate holds
  // for the call's own chunks and is forgotten after it (the first step then calibrates its own).
  ScaleFlagsGuard flags(ranks_);
  absl::Status status;
  for (int64_t start = 0; start < n && status.ok(); start += chunk) {
    const int64_t m = std::min<int64_t>(chunk, n - start);
    batch_.Clear();
    batch_.set_decode_phase(false);
    batch_.Add(table, options_.page_size, start, tokens.data() + start, m, false, /*all_logits=*/true);
    status = Forward(batch_, /*score=*/true, /*score_buffer=*/own_buffer);
    if (!status.ok()) break;
    for (int64_t r = 0; r < m && start + r + 1 < n; ++r) {
      const float* row = host_logits_.data() + r * c.vocab_size;
      const int64_t p = start + r;
      double mx = row[0];
      int32_t best = 0;
      for (int64_t v = 1; v < c.vocab_size; ++v) {
        if (row[v] > mx) {
          mx = row[v];
          best = static_cast<int32_t>(v);
        }
      }
      double sum = 0;
      for (int64_t v = 0; v < c.vocab_size; ++v) sum += std::exp(row[v] - mx);
      logprobs[p] = static_cast<float>(row[tokens[p + 1]] - mx - std::log(sum));
      if (argmax != nullptr) argmax[p] = best;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  kv_->ReleaseAll(kScoreSession, table);
  return status;
}

}  // namespace llmrt
