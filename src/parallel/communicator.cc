#include "src/parallel/communicator.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace llmrt {
namespace {
constexpr char kPeerFailureUrl[] = "llmrt/peer-failure";
}  // namespace

absl::Status PeerFailureError(int failed_rank, const std::string& where) {
  absl::Status s = absl::InternalError(
      absl::StrCat(where, ": rank ", failed_rank, " failed earlier in this pass; no data was exchanged"));
  s.SetPayload(kPeerFailureUrl, absl::Cord(absl::StrCat(failed_rank)));
  return s;
}

bool IsPeerFailure(const absl::Status& s) { return s.GetPayload(kPeerFailureUrl).has_value(); }

}  // namespace llmrt
