// The batching policy of one step: which sessions run and how many of their queued tokens.
// Decoding sessions (one token each) go first, in arrival order, so generation never starves;
// prompt chunks fill the rest of the token budget, also in arrival order (chunked prefill).
#ifndef LLMRT_SCHED_SCHEDULER_H_
#define LLMRT_SCHED_SCHEDULER_H_

#include <cstdint>
#include <vector>

namespace llmrt {

struct SchedCandidate {
  int64_t key = 0;      // caller's handle for the session (e.g. index in arrival order)
  int64_t pending = 0;  // tokens queued
  bool decoding = false;
};

struct SchedItem {
  int64_t key = 0;
  int64_t num_tokens = 0;
};

// Candidates are given in arrival order; the plan keeps that order within each class.
std::vector<SchedItem> PlanStep(const std::vector<SchedCandidate>& candidates, int64_t token_budget);

}  // namespace llmrt

#endif  // LLMRT_SCHED_SCHEDULER_H_
