// Integrity trackers observe the KV page life cycle and decide whether sessions' page tables are
// verified before each forward pass.
//  - no-op (default): verifies nothing, observes nothing; the runtime skips every hook.
//  - tag checker: verifies every (page, tag) a scheduled session expects against the pool.
//  - host callbacks (src/api adapts llm_kv_tracker): tag checks plus events and a veto.
// Hooks run on the thread that calls into the runtime, with the runtime's lock held.
#ifndef LLMRT_KV_TRACKER_H_
#define LLMRT_KV_TRACKER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "src/kv/page_allocator.h"

namespace llmrt {

class KvTracker {
 public:
  virtual ~KvTracker() = default;
  // Whether page tables are checked before each forward pass.
  virtual bool verifies() const = 0;
  // Whether the On* events below are wanted at all.
  virtual bool observes() const = 0;
  virtual void OnAlloc(uint64_t session, const PageRef& ref) {}
  virtual void OnFree(uint64_t session, const PageRef& ref) {}
  virtual void OnShare(uint64_t from_session, uint64_t to_session, const PageRef& ref) {}
  // After the tag check of a session passed; false vetoes (the session is aborted).
  virtual bool OnVerify(uint64_t session, const std::vector<PageRef>& pages) { return true; }
  // A page-table entry whose tag did not match; actual_tag is the page's current tag.
  virtual void OnViolation(uint64_t session, int32_t entry, const PageRef& expected, uint64_t actual_tag) {}
};

std::unique_ptr<KvTracker> MakeNoopTracker();
std::unique_ptr<KvTracker> MakeTagChecker();

}  // namespace llmrt

#endif  // LLMRT_KV_TRACKER_H_
