#include "src/parallel/mpi_communicator.h"

#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/util/status.h"

namespace llmrt {

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::chrono::milliseconds timeout{0};
  absl::Status broken;
};

namespace {

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(int expected_size,
                                                                         std::chrono::milliseconds timeout,
                                                                         const CommIdBytes* group_id) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (int e = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); e != MPI_SUCCESS) {
      return absl::InternalError(absl::StrCat("MPI_Init_thread: ", MpiErrorText(e)));
    }
    // MPI is finalized when the process exits, after every runtime is gone.
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->timeout = timeout;
  if (int e = MPI_Comm_dup(MPI_COMM_WORLD, &c->impl_->comm); e != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat("MPI_Comm_dup: ", MpiErrorText(e)));
  }
  MPI_Comm_set_errhandler(c->impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->impl_->comm, &c->rank_);
  MPI_Comm_size(c->impl_->comm, &c->size_);
  if (expected_size > 0 && expected_size != c->size_) {
    return absl::InvalidArgumentError(absl::StrCat("world_size is ", expected_size, " but MPI_COMM_WORLD has ",
                                                   c->size_, " processes"));
  }
  // Every rank gathers every rank's id (a flag byte, then the id) and compares with rank 0's, so
  // all ranks reach the same verdict.
  uint8_t mine[1 + kCommIdBytes] = {};
  if (group_id != nullptr) {
    mine[0] = 1;
    std::memcpy(mine + 1, group_id->data(), kCommIdBytes);
  }
  LLMRT_RETURN_IF_ERROR(c->Exchange(mine, sizeof(mine), false, "comm_id check"));
  for (int r = 1; r < c->size_; ++r) {
    if (std::memcmp(c->Slot(r) + 8, c->Slot(0) + 8, sizeof(mine)) != 0) {
      const bool with0 = c->Slot(0)[8] != 0, withr = c->Slot(r)[8] != 0;
      return absl::InvalidArgumentError(
          with0 != withr ? absl::StrCat("rank ", with0 ? 0 : r, " was given a comm_id and rank ", with0 ? r : 0,
                                        " none: every rank of a group needs the same one (or none)")
                         : absl::StrCat("rank ", r, "'s comm_id differs from rank 0's: the processes were given the "
                                        "ids of different groups"));
    }
  }
  return c;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (impl_ && impl_->comm != MPI_COMM_NULL && !finalized && impl_->broken.ok()) MPI_Comm_free(&impl_->comm);
}

absl::Status MpiCommunicator::Exchange(const void* data, size_t bytes, bool failed, const char* what) {
  if (!impl_->broken.ok()) return impl_->broken;
  const uint64_t n = ++collectives_;
  // Each rank's slot: its failed flag (8 bytes, keeping the data 8-byte aligned), then its data.
  stride_ = 8 + bytes;
  send_.resize(stride_);
  std::memset(send_.data(), 0, 8);
  send_[0] = failed ? 1 : 0;
  if (bytes > 0) std::memcpy(send_.data() + 8, data, bytes);
  gathered_.resize(stride_ * static_cast<size_t>(size_));
  if (stride_ > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("MPI collective of ", bytes, " bytes is larger than 2^31"));
  }
  MPI_Request req;
  int e = MPI_Iallgather(send_.data(), static_cast<int>(stride_), MPI_BYTE, gathered_.data(),
                         static_cast<int>(stride_), MPI_BYTE, impl_->comm, &req);
  const auto deadline = std::chrono::steady_clock::now() + impl_->timeout;
  int done = 0;
  while (e == MPI_SUCCESS && !done) {
    e = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS || done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      impl_->broken = absl::DeadlineExceededError(
          absl::StrCat("MPI collective #", n, " (", what, ") on rank ", rank_, " of ", size_,
                       ": not every rank joined within ", impl_->timeout.count(),
                       " ms; the communicator is no longer usable"));
      return impl_->broken;
    }
    std::this_thread::yield();
  }
  if (e != MPI_SUCCESS) {
    impl_->broken = absl::InternalError(absl::StrCat("MPI collective #", n, " (", what, "): ", MpiErrorText(e)));
    return impl_->broken;
  }
  for (int r = 0; r < size_; ++r) {
    if (Slot(r)[0] != 0) return PeerFailureError(r, absl::StrCat("MPI collective #", n, " (", what, ")"));
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllReduceSum(void* buf, size_t count, DType dtype, bool failed) {
  if (dtype != DType::kF32) return absl::InvalidArgumentError("MPI AllReduceSum sums F32 values only");
  if (absl::Status st = Exchange(buf, count * sizeof(float), failed, "AllReduceSum"); !st.ok()) return st;
  float* out = static_cast<float*>(buf);
  std::memcpy(out, Slot(0) + 8, count * sizeof(float));
  for (int r = 1; r < size_; ++r) {
    const float* x = reinterpret_cast<const float*>(Slot(r) + 8);
    for (size_t i = 0; i < count; ++i) out[i] += x[i];
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllGather(const void* in, void* out, size_t count, DType dtype, bool failed) {
  const size_t bytes = count * DTypeSize(dtype);
  if (absl::Status st = Exchange(in, bytes, failed, "AllGather"); !st.ok()) return st;
  for (int r = 0; r < size_; ++r) std::memcpy(static_cast<uint8_t*>(out) + r * bytes, Slot(r) + 8, bytes);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ReduceScatterSum(const void* in, void* out, size_t count, DType dtype, bool failed) {
  if (dtype != DType::kF32) return absl::InvalidArgumentError("MPI ReduceScatterSum sums F32 values only");
  if (absl::Status st = Exchange(in, count * size_ * sizeof(float), failed, "ReduceScatterSum"); !st.ok()) return st;
  float* o = static_cast<float*>(out);
  const size_t at = count * rank_;
  std::memcpy(o, reinterpret_cast<const float*>(Slot(0) + 8) + at, count * sizeof(float));
  for (int r = 1; r < size_; ++r) {
    const float* x = reinterpret_cast<const float*>(Slot(r) + 8) + at;
    for (size_t i = 0; i < count; ++i) o[i] += x[i];
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Broadcast(void* buf, size_t count, DType dtype, int root, bool failed) {
  if (root < 0 || root >= size_) return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is no rank"));
  const size_t bytes = count * DTypeSize(dtype);
  if (absl::Status st = Exchange(buf, bytes, failed, "Broadcast"); !st.ok()) return st;
  if (rank_ != root) std::memcpy(buf, Slot(root) + 8, bytes);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Barrier() { return Exchange(nullptr, 0, false, "Barrier"); }

}  // namespace llmrt
