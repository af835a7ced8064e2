// In-process ranks: one thread per rank in one process, collectives over shared memory. Each
// collective is two or three barrier phases: every rank posts its buffers; then each rank
// computes a disjoint share of the result (for sums, chunk r of the vector, adding the ranks'
// values in rank order into the group's scratch); then every rank copies what it needs. Results
// are therefore bit-identical on every rank and from run to run.
//
// Thread-safety: each Communicator is used by one thread at a time (its rank's); the group is
// shared. Waiting ranks spin briefly, then block on a condition variable with the group's
// timeout.
#ifndef LLMRT_PARALLEL_IN_PROCESS_H_
#define LLMRT_PARALLEL_IN_PROCESS_H_

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "src/parallel/communicator.h"

namespace llmrt {

class InProcessGroup {
 public:
  // A group of `size` ranks (1 to kMaxRanks). `timeout`: how long a rank waits in a collective
  // for the others before the collective fails (and the group breaks).
  static constexpr int kMaxRanks = 256;
  static absl::StatusOr<std::shared_ptr<InProcessGroup>> Create(
      int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~InProcessGroup();

  // Rank `rank`'s communicator; each rank joins once. InvalidArgument for a rank outside
  // [0, size) or one that already joined.
  absl::StatusOr<std::unique_ptr<Communicator>> Join(int rank);
  int size() const;

  struct State;  // shared with the communicators

 private:
  explicit InProcessGroup(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace llmrt

#endif  // LLMRT_PARALLEL_IN_PROCESS_H_
