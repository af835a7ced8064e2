// NCCL ranks for the CUDA backend: one rank per device, in one process or many, on one machine
// or many. The host makes a unique id on one rank (NcclUniqueId) and hands the same bytes to
// every rank (the C ABI's communicator id); each rank then joins with its rank number.
//
// Built when the CUDA toolkit with NCCL is found (LLMRT_HAVE_NCCL); libnccl.so.2 itself is loaded
// at run time, so that libllmrt loads where NCCL is absent (Create and NcclUniqueId are then
// UNIMPLEMENTED naming the library). Collectives are enqueued on
// the stream set_stream names (the rank's compute stream) and complete asynchronously, in
// stream order with the backend's ops. NCCL sums in its own (ring or tree) order, which is the
// same on every rank. The communicator is non-blocking: initialization and every collective
// poll for completion of their enqueueing up to the timeout, and a rank that never joins makes
// Create fail with DEADLINE_EXCEEDED after aborting the half-made communicator: no hang.
#ifndef LLMRT_PARALLEL_NCCL_COMMUNICATOR_H_
#define LLMRT_PARALLEL_NCCL_COMMUNICATOR_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "src/parallel/communicator.h"

namespace llmrt {

// An NCCL unique id (ncclUniqueId, 128 bytes): what every rank of one group must share.
inline constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<uint8_t, kNcclIdBytes>;

// A new id (ncclGetUniqueId); made on one rank, distributed by the host.
absl::StatusOr<NcclId> NcclUniqueId();

class NcclCommunicator final : public Communicator {
 public:
  // Joins rank `rank` of `size` on CUDA device `device` (ncclCommInitRankConfig, non-blocking).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclId& id, int rank, int size, int device,
                                                                   std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  // The cudaStream_t collectives are enqueued on (nullptr: the default stream).
  void set_stream(void* stream) { stream_ = stream; }

  // `failed` cannot be told to the other ranks without a collective of its own: the data moves
  // as usual and the runtime agrees on the pass's status afterwards.
  absl::Status AllReduceSum(void* buf, size_t count, DType dtype, bool failed) override;
  absl::Status AllGather(const void* in, void* out, size_t count, DType dtype, bool failed) override;
  absl::Status ReduceScatterSum(const void* in, void* out, size_t count, DType dtype, bool failed) override;
  absl::Status Broadcast(void* buf, size_t count, DType dtype, int root, bool failed) override;
  // An all-reduce of one value on the stream, waited for up to the timeout (a rank that never
  // arrives: DEADLINE_EXCEEDED and the communicator aborted).
  absl::Status Barrier() override;
  // ncclCommGetAsyncError: on an error the communicator is aborted (its kernels return) and
  // every later call fails with that status.
  absl::Status AsyncError() override;

  struct Impl;

 private:
  NcclCommunicator() = default;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  void* stream_ = nullptr;
};

}  // namespace llmrt

#endif  // LLMRT_PARALLEL_NCCL_COMMUNICATOR_H_
