#include "src/sched/admission.h"

#include <algorithm>

namespace llmrt {

Admission Admit(KvManager& kv, KvPressurePolicy policy, const AdmissionRequest& r,
                const std::function<bool()>& preempt_newer) {
  const int64_t new_len = r.context + r.tokens;
  int64_t reserve_len = new_len;
  if (policy == KvPressurePolicy::kQueue && r.prefill && r.new_generation) {
    reserve_len = std::min<int64_t>(r.context + r.pending + r.max_new_tokens, r.max_positions);
    reserve_len = std::max(reserve_len, new_len);
  }
  bool ok = kv.Reserve(r.session, *r.pages, reserve_len);
  if (!ok && policy == KvPressurePolicy::kPreempt) {
    // Newest running sessions first, never one older than r (arrival order is kept).
    while (!ok && preempt_newer()) ok = kv.Reserve(r.session, *r.pages, new_len);
  }
  if (ok) return Admission::kAdmitted;
  return policy == KvPressurePolicy::kFail ? Admission::kFail : Admission::kWait;
}

}  // namespace llmrt
