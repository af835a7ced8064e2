// Admission under KV pressure: whether a planned session gets the pages for its next tokens,
// waits, or fails, and which sessions give their pages back to make room (the kv_pressure
// policies of llm_runtime_options).
#ifndef LLMRT_SCHED_ADMISSION_H_
#define LLMRT_SCHED_ADMISSION_H_

#include <cstdint>
#include <functional>

#include "src/kv/kv_manager.h"
#include "src/kv/page_table.h"

namespace llmrt {

// What a step does with a session whose next tokens find no free KV page.
enum class KvPressurePolicy {
  kFail,     // report LLM_ERR_KV_EXHAUSTED for that session this step; it stays as it was
  kQueue,    // it waits (prompts keep arrival order) until pages free up
  kPreempt,  // newer running sessions give their pages back and recompute later
};

// One planned session, as admission sees it.
struct AdmissionRequest {
  uint64_t session = 0;
  PageTable* pages = nullptr;
  int64_t context = 0;         // positions cached
  int64_t pending = 0;         // tokens queued
  int64_t tokens = 0;          // tokens this step processes
  bool prefill = false;
  bool new_generation = false;  // a prompt whose generation has not started (num_generated == 0)
  int64_t max_new_tokens = 0;   // 0: unlimited
  int64_t max_positions = 0;    // max_position_embeddings
};

enum class Admission { kAdmitted, kWait, kFail };

// Reserves the pages of `r`. Under kQueue a prompt is admitted only with pages for all of it
// (prompt plus max_new_tokens), so admitted sessions never stall mid-generation for pages.
// Under kPreempt, `preempt_newer` is called while pages are short: it frees the pages of the
// newest running session newer than r.session and returns true, or returns false when there
// is none.
Admission Admit(KvManager& kv, KvPressurePolicy policy, const AdmissionRequest& r,
                const std::function<bool()>& preempt_newer);

}  // namespace llmrt

#endif  // LLMRT_SCHED_ADMISSION_H_
