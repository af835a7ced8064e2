#include "src/kv/tracker.h"

namespace llmrt {
namespace {

class NoopTracker final : public KvTracker {
 public:
  bool verifies() const override { return false; }
  bool observes() const override { return false; }
};

class TagChecker final : public KvTracker {
 public:
  bool verifies() const override { return true; }
  bool observes() const override { return false; }
};

}  // namespace

std::unique_ptr<KvTracker> MakeNoopTracker() { return std::make_unique<NoopTracker>(); }
std::unique_ptr<KvTracker> MakeTagChecker() { return std::make_unique<TagChecker>(); }

}  // namespace llmrt
