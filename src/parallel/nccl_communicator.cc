#include "src/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace llmrt {

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  absl::Status broken;
};

namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Waits until the communicator's pending work has been enqueued (non-blocking mode returns
// ncclInProgress until then), or fails after `timeout`.
absl::Status Settle(ncclComm_t comm, ncclResult_t r, const char* what, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (r == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("NCCL ", what, ": not every rank joined within ", timeout.count(),
                                                      " ms; the communicator was aborted"));
    }
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    return absl::InternalError(absl::StrCat("NCCL ", what, ": ", ncclGetErrorString(r), " (",
                                            comm != nullptr ? ncclGetLastError(comm) : "", ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ncclDataType_t> NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    case DType::kI8: return ncclInt8;
    default: return absl::InvalidArgumentError(absl::StrCat("NCCL has no type for ", DTypeName(t)));
  }
}

}  // namespace

absl::StatusOr<NcclId> NcclUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
  static_assert(sizeof(id) == kNcclIdBytes, "ncclUniqueId is 128 bytes");
  NcclId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const NcclId& id, int rank, int size,
                                                                           int device,
                                                                           std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " is outside a world of ", size));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->device = device;
  c->impl_->timeout = timeout;
  c->rank_ = rank;
  c->size_ = size;
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank is a timeout, not a hang
  ncclResult_t r = ncclCommInitRankConfig(&c->impl_->comm, size, uid, rank, &config);
  absl::Status st = Settle(c->impl_->comm, r, "ncclCommInitRankConfig", timeout);
  if (!st.ok()) {
    if (c->impl_->comm != nullptr) ncclCommAbort(c->impl_->comm);
    c->impl_->comm = nullptr;
    return st;
  }
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ && impl_->comm != nullptr) {
    if (impl_->broken.ok()) {
      ncclCommDestroy(impl_->comm);
    } else {
      ncclCommAbort(impl_->comm);
    }
  }
}

#define LLMRT_NCCL_CALL(what, call)                                                            \
  do {                                                                                         \
    if (!impl_->broken.ok()) return impl_->broken;                                             \
    absl::Status _st = Settle(impl_->comm, (call), what, impl_->timeout);                      \
    if (!_st.ok()) {                                                                           \
      impl_->broken = _st;                                                                     \
      return _st;                                                                              \
    }                                                                                          \
    return absl::OkStatus();                                                                   \
  } while (0)

absl::Status NcclCommunicator::AllReduceSum(void* buf, size_t count, DType dtype, bool) {
  if (dtype != DType::kF32) return absl::InvalidArgumentError("NCCL AllReduceSum sums F32 values only");
  LLMRT_NCCL_CALL("ncclAllReduce", ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, impl_->comm,
                                                 static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::AllGather(const void* in, void* out, size_t count, DType dtype, bool) {
  absl::StatusOr<ncclDataType_t> t = NcclType(dtype);
  if (!t.ok()) return t.status();
  LLMRT_NCCL_CALL("ncclAllGather", ncclAllGather(in, out, count, *t, impl_->comm, static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::ReduceScatterSum(const void* in, void* out, size_t count, DType dtype, bool) {
  if (dtype != DType::kF32) return absl::InvalidArgumentError("NCCL ReduceScatterSum sums F32 values only");
  LLMRT_NCCL_CALL("ncclReduceScatter", ncclReduceScatter(in, out, count, ncclFloat32, ncclSum, impl_->comm,
                                                         static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::Broadcast(void* buf, size_t count, DType dtype, int root, bool) {
  if (root < 0 || root >= size_) return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is no rank"));
  absl::StatusOr<ncclDataType_t> t = NcclType(dtype);
  if (!t.ok()) return t.status();
  LLMRT_NCCL_CALL("ncclBroadcast",
                  ncclBroadcast(buf, buf, count, *t, root, impl_->comm, static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::Barrier() {
  // NCCL has no barrier: an all-reduce of one value, waited for on the stream.
  if (!impl_->broken.ok()) return impl_->broken;
  float* one = nullptr;
  if (cudaError_t e = cudaMalloc(&one, sizeof(float)); e != cudaSuccess) return CudaError(e, "cudaMalloc");
  absl::Status st = Settle(impl_->comm,
                           ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, impl_->comm,
                                         static_cast<cudaStream_t>(stream_)),
                           "ncclAllReduce (barrier)", impl_->timeout);
  if (st.ok()) {
    if (cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)); e != cudaSuccess) {
      st = CudaError(e, "cudaStreamSynchronize");
    }
  }
  cudaFree(one);
  if (!st.ok()) impl_->broken = st;
  return st;
}

}  // namespace llmrt
