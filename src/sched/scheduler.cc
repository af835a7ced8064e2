#include "src/sched/scheduler.h"

#include <algorithm>

namespace llmrt {

std::vector<SchedItem> PlanStep(const std::vector<SchedCandidate>& candidates, int64_t token_budget) {
  std::vector<SchedItem> plan;
  int64_t left = token_budget;
  for (const auto& c : candidates) {
    if (left == 0) break;
    if (c.decoding && c.pending > 0) {
      plan.push_back({c.key, 1});
      --left;
    }
  }
  for (const auto& c : candidates) {
    if (left == 0) break;
    if (!c.decoding && c.pending > 0) {
      const int64_t n = std::min(c.pending, left);
      plan.push_back({c.key, n});
      left -= n;
    }
  }
  return plan;
}

}  // namespace llmrt
