// MPI ranks: CPU ranks in separate processes, on one machine or many, through the host's MPI
// (Open MPI; an optional build component, LLMRT_MPI). Every process runs one rank; mpirun (or
// the host's launcher) starts them and MPI_COMM_WORLD says who is who.
//
// Sums are deterministic and identical on every rank: each collective gathers every rank's
// contribution (with a flag saying whether the rank failed earlier in the pass) and adds them in
// rank order locally, rather than trusting MPI's reduction order. Collectives are non-blocking
// MPI calls polled up to the timeout: a rank that never joins fails the collective with
// DEADLINE_EXCEEDED and breaks the communicator, instead of hanging.
#ifndef LLMRT_PARALLEL_MPI_COMMUNICATOR_H_
#define LLMRT_PARALLEL_MPI_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/parallel/comm_id.h"
#include "src/parallel/communicator.h"

namespace llmrt {

class MpiCommunicator final : public Communicator {
 public:
  // Joins MPI_COMM_WORLD (initializing MPI with MPI_THREAD_SERIALIZED if the host has not).
  // `expected_size` > 0 must equal the world's size (InvalidArgument naming both otherwise).
  // With `group_id`, every rank compares its id with rank 0's (one collective): any difference,
  // or ranks with and without an id, fails the creation on every rank with InvalidArgument.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(int expected_size,
                                                                 std::chrono::milliseconds timeout,
                                                                 const CommIdBytes* group_id = nullptr);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  absl::Status AllReduceSum(void* buf, size_t count, DType dtype, bool failed) override;
  absl::Status AllGather(const void* in, void* out, size_t count, DType dtype, bool failed) override;
  absl::Status ReduceScatterSum(const void* in, void* out, size_t count, DType dtype, bool failed) override;
  absl::Status Broadcast(void* buf, size_t count, DType dtype, int root, bool failed) override;
  absl::Status Barrier() override;

  struct Impl;

 private:
  MpiCommunicator() = default;
  // Gathers `bytes` bytes of every rank (and its failed flag) into gathered_, rank after rank,
  // each at a stride of stride_ bytes. A peer failure when some rank set `failed`.
  absl::Status Exchange(const void* data, size_t bytes, bool failed, const char* what);
  const uint8_t* Slot(int r) const { return gathered_.data() + static_cast<size_t>(r) * stride_; }

  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<uint8_t> send_, gathered_;
  size_t stride_ = 0;
  uint64_t collectives_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_PARALLEL_MPI_COMMUNICATOR_H_
