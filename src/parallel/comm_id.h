// Communicator ids: the bytes every process of one multi-process group must share, made once
// (on one process) and handed to every rank by the host (llm_comm_id in the C ABI).
//
//  - NCCL ranks: the id is NCCL's own unique id (ncclGetUniqueId, 128 bytes: the address of the
//    bootstrap root). It is made through the NCCL library found at run time (libnccl.so.2,
//    dlopen), so libllmrt does not depend on NCCL to load.
//  - MPI ranks: mpirun already says who belongs to the group; the id is a tag ("llmrtMPI", a
//    format version and 16 random bytes) that every rank checks against rank 0's when it joins,
//    so that processes started with different ids (two deployments' configurations crossed) fail
//    at creation with a clear error instead of computing with each other.
#ifndef LLMRT_PARALLEL_COMM_ID_H_
#define LLMRT_PARALLEL_COMM_ID_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace llmrt {

inline constexpr size_t kCommIdBytes = 128;
using CommIdBytes = std::array<uint8_t, kCommIdBytes>;

enum class CommIdKind { kMpi, kNccl };

struct CommId {
  CommIdKind kind = CommIdKind::kMpi;
  CommIdBytes bytes{};
};

// A new MPI group tag (random; std::random_device).
absl::StatusOr<CommId> MakeMpiCommId();
// A new NCCL unique id through libnccl.so.2: Unsupported (UnsupportedError) when NCCL cannot be
// loaded, FailedPrecondition when ncclGetUniqueId fails.
absl::StatusOr<CommId> MakeNcclCommId();
// OK when `id` is a well-formed MPI group tag (the magic and version this build writes).
absl::Status CheckMpiCommId(const CommIdBytes& id);

}  // namespace llmrt

#endif  // LLMRT_PARALLEL_COMM_ID_H_
