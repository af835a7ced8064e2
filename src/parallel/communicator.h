// The collectives of tensor and expert parallelism. A Communicator is one rank's handle on a
// group of `size` ranks; every rank calls the same collectives in the same order (SPMD), each
// with its own buffers. Implementations: in-process threads over shared memory
// (in_process.h: CPU ranks of one process, also multi-socket hosts), MPI (mpi_communicator.h:
// CPU ranks in separate processes or machines, an optional build component) and NCCL
// (nccl_communicator.h: CUDA devices, built where the toolkit ships NCCL).
//
// Contract:
//  - Buffers live in the memory of the rank's backend: host memory for the in-process and MPI
//    communicators, device memory for NCCL (whose collectives are enqueued on the rank's stream,
//    see NcclCommunicator::set_stream, and complete asynchronously).
//  - Sums add the ranks' values in rank order, ((x_0 + x_1) + x_2) + ..., so that every rank
//    gets the same bits and a run repeats bit for bit (the in-process and MPI communicators; NCCL
//    sums in its own ring order, identical on every rank).
//  - Failures are statuses, never exceptions or hangs: a rank that does not join a collective
//    within the group's timeout makes the collective fail with DEADLINE_EXCEEDED naming the
//    missing ranks, and the group stays broken (every later collective fails at once) because
//    the ranks are no longer in step. Ranks whose calls disagree (another collective, another
//    count or type) fail with INVALID_ARGUMENT naming both calls, and break the group too.
//  - A rank that failed earlier in a forward pass still calls every collective of the pass (so
//    the others are not left waiting) with `failed` set; the collective then moves no data and
//    returns on every rank a status marked IsPeerFailure, so that no rank computes on the failed
//    rank's buffers. The group stays usable for the next pass.
#ifndef LLMRT_PARALLEL_COMMUNICATOR_H_
#define LLMRT_PARALLEL_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/util/dtype.h"

namespace llmrt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "in-process", "mpi", "nccl".
  virtual std::string name() const = 0;

  // In place: buf[i] = sum over ranks r = 0..size-1, in that order, of rank r's buf[i].
  // F32 only.
  virtual absl::Status AllReduceSum(void* buf, size_t count, DType dtype, bool failed = false) = 0;
  // out [size * count] = every rank's in [count], concatenated in rank order.
  virtual absl::Status AllGather(const void* in, void* out, size_t count, DType dtype, bool failed = false) = 0;
  // out [count] = sum over ranks, in rank order, of in[rank() * count .. (rank() + 1) * count).
  // in holds size * count values. F32 only.
  virtual absl::Status ReduceScatterSum(const void* in, void* out, size_t count, DType dtype,
                                        bool failed = false) = 0;
  // buf [count] of every rank = root's buf.
  virtual absl::Status Broadcast(void* buf, size_t count, DType dtype, int root, bool failed = false) = 0;
  // Returns when every rank has called it.
  virtual absl::Status Barrier() = 0;
  // A failure the communicator detected while collectives it enqueued run asynchronously (a peer
  // gone, a network error), after which it is aborted so that work waiting on it ends; OK while
  // none is known, and always for communicators whose collectives complete before they return.
  // A device backend polls it while it waits for a stream that holds collectives.
  virtual absl::Status AsyncError() { return absl::OkStatus(); }
};

// The status a collective returns on every rank when some rank called it with `failed`: it says
// which rank failed; the runtime reports that rank's own status, not this one.
absl::Status PeerFailureError(int failed_rank, const std::string& where);
bool IsPeerFailure(const absl::Status& s);

}  // namespace llmrt

#endif  // LLMRT_PARALLEL_COMMUNICATOR_H_
