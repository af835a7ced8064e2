#include "src/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// NCCL is loaded at run time (libnccl.so.2) rather than linked: libllmrt then loads, and runs
// CPU ranks, on hosts without NCCL; nccl.h supplies only the types and constants.
struct NcclApi {
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
};

// The loaded library's entry points, or why there are none. Loaded once; never unloaded (NCCL
// keeps threads and bootstrap state alive for the process).
absl::StatusOr<const NcclApi*> Nccl() {
  static absl::StatusOr<const NcclApi*>* api = [] {
    auto* out = new absl::StatusOr<const NcclApi*>(nullptr);
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      *out = UnsupportedError(absl::StrCat("CUDA ranks need NCCL, which could not be loaded (",
                                           why != nullptr ? why : "libnccl.so.2 not found", ")"));
      return out;
    }
    auto* a = new NcclApi();
    const char* missing = nullptr;
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && missing == nullptr) missing = name;
    };
    bind(a->GetUniqueId, "ncclGetUniqueId");
    bind(a->CommInitRankConfig, "ncclCommInitRankConfig");
    bind(a->CommGetAsyncError, "ncclCommGetAsyncError");
    bind(a->CommAbort, "ncclCommAbort");
    bind(a->CommDestroy, "ncclCommDestroy");
    bind(a->GetErrorString, "ncclGetErrorString");
    bind(a->GetLastError, "ncclGetLastError");
    bind(a->AllReduce, "ncclAllReduce");
    bind(a->AllGather, "ncclAllGather");
    bind(a->ReduceScatter, "ncclReduceScatter");
    bind(a->Broadcast, "ncclBroadcast");
    if (missing != nullptr) {
      *out = UnsupportedError(
          absl::StrCat("the NCCL library loaded has no ", missing, " (NCCL 2.14 or later is needed)"));
      delete a;
      return out;
    }
    *out = a;
    return out;
  }();
  return *api;
}

}  // namespace

struct NcclCommunicator::Impl {
  const NcclApi* nccl = nullptr;
  ncclComm_t comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  absl::Status broken;
  float* barrier_value = nullptr;  // device: Barrier's all-reduced value, made on first use

  // Marks the communicator failed with `st` and aborts it (its pending kernels return).
  absl::Status Break(absl::Status st) {
    if (broken.ok()) broken = st;
    if (comm != nullptr) {
      nccl->CommAbort(comm);
      comm = nullptr;
    }
    return broken;
  }
};

namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Waits until the communicator's pending work has been enqueued (non-blocking mode returns
// ncclInProgress until then), or fails after `timeout`.
absl::Status Settle(const NcclApi& nccl, ncclComm_t comm, ncclResult_t r, const char* what,
                    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (r == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("NCCL ", what, ": not every rank joined within ", timeout.count(),
                                                      " ms; the communicator was aborted"));
    }
    std::this_thread::yield();
    if (nccl.CommGetAsyncError(comm, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    return absl::InternalError(absl::StrCat("NCCL ", what, ": ", nccl.GetErrorString(r), " (",
                                            comm != nullptr ? nccl.GetLastError(comm) : "", ")"));
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
  absl::StatusOr<const NcclApi*> nccl = Nccl();
  if (!nccl.ok()) return nccl.status();
  ncclUniqueId id;
  const ncclResult_t r = (*nccl)->GetUniqueId(&id);
  if (r != ncclSuccess) return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", (*nccl)->GetErrorString(r)));
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
  absl::StatusOr<const NcclApi*> api = Nccl();
  if (!api.ok()) return api.status();
  const NcclApi& nccl = **api;
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->nccl = &nccl;
  c->impl_->device = device;
  c->impl_->timeout = timeout;
  c->rank_ = rank;
  c->size_ = size;
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank is a timeout, not a hang
  ncclResult_t r = nccl.CommInitRankConfig(&c->impl_->comm, size, uid, rank, &config);
  absl::Status st = Settle(nccl, c->impl_->comm, r, "ncclCommInitRankConfig", timeout);
  if (!st.ok()) {
    if (c->impl_->comm != nullptr) nccl.CommAbort(c->impl_->comm);
    c->impl_->comm = nullptr;
    return st;
  }
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (!impl_) return;
  if (impl_->comm != nullptr) {
    if (impl_->broken.ok()) {
      impl_->nccl->CommDestroy(impl_->comm);
    } else {
      impl_->nccl->CommAbort(impl_->comm);
    }
  }
  // After a failure a kernel may still name the barrier's value: it is left allocated (4 bytes).
  if (impl_->barrier_value != nullptr && impl_->broken.ok()) {
    cudaSetDevice(impl_->device);
    cudaFree(impl_->barrier_value);
  }
}

absl::Status NcclCommunicator::AsyncError() {
  if (!impl_->broken.ok()) return impl_->broken;
  if (impl_->comm == nullptr) return absl::OkStatus();
  ncclResult_t r = ncclSuccess;
  if (impl_->nccl->CommGetAsyncError(impl_->comm, &r) != ncclSuccess || r == ncclSuccess || r == ncclInProgress) {
    return absl::OkStatus();
  }
  return impl_->Break(absl::InternalError(absl::StrCat("NCCL: ", impl_->nccl->GetErrorString(r), " (",
                                                       impl_->nccl->GetLastError(impl_->comm),
                                                       "); the communicator was aborted")));
}

#define LLMRT_NCCL_CALL(what, call)                                                            \
  do {                                                                                         \
    if (!impl_->broken.ok()) return impl_->broken;                                             \
    absl::Status _st = Settle(*impl_->nccl, impl_->comm, (call), what, impl_->timeout);       \
    if (!_st.ok()) return impl_->Break(_st);                                                   \
    return absl::OkStatus();                                                                   \
  } while (0)

absl::Status NcclCommunicator::AllReduceSum(void* buf, size_t count, DType dtype, bool) {
  if (dtype != DType::kF32) return absl::InvalidArgumentError("NCCL AllReduceSum sums F32 values only");
  LLMRT_NCCL_CALL("ncclAllReduce", impl_->nccl->AllReduce(buf, buf, count, ncclFloat32, ncclSum, impl_->comm,
                                                 static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::AllGather(const void* in, void* out, size_t count, DType dtype, bool) {
  absl::StatusOr<ncclDataType_t> t = NcclType(dtype);
  if (!t.ok()) return t.status();
  LLMRT_NCCL_CALL("ncclAllGather",
                  impl_->nccl->AllGather(in, out, count, *t, impl_->comm, static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::ReduceScatterSum(const void* in, void* out, size_t count, DType dtype, bool) {
  if (dtype != DType::kF32) return absl::InvalidArgumentError("NCCL ReduceScatterSum sums F32 values only");
  LLMRT_NCCL_CALL("ncclReduceScatter", impl_->nccl->ReduceScatter(in, out, count, ncclFloat32, ncclSum, impl_->comm,
                                                         static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::Broadcast(void* buf, size_t count, DType dtype, int root, bool) {
  if (root < 0 || root >= size_) return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is no rank"));
  absl::StatusOr<ncclDataType_t> t = NcclType(dtype);
  if (!t.ok()) return t.status();
  LLMRT_NCCL_CALL("ncclBroadcast",
                  impl_->nccl->Broadcast(buf, buf, count, *t, root, impl_->comm, static_cast<cudaStream_t>(stream_)));
}

absl::Status NcclCommunicator::Barrier() {
  // NCCL has no barrier: an all-reduce of one value, its completion polled on the stream until
  // the timeout (cudaStreamSynchronize would wait forever for a rank that never arrives).
  if (!impl_->broken.ok()) return impl_->broken;
  if (cudaError_t e = cudaSetDevice(impl_->device); e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  if (impl_->barrier_value == nullptr) {
    if (cudaError_t e = cudaMalloc(&impl_->barrier_value, sizeof(float)); e != cudaSuccess) {
      impl_->barrier_value = nullptr;
      return CudaError(e, "cudaMalloc (barrier)");
    }
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  float* v = impl_->barrier_value;
  absl::Status st = Settle(*impl_->nccl, impl_->comm,
                           impl_->nccl->AllReduce(v, v, 1, ncclFloat32, ncclSum, impl_->comm, stream),
                           "ncclAllReduce (barrier)", impl_->timeout);
  if (!st.ok()) return impl_->Break(st);
  const auto deadline = std::chrono::steady_clock::now() + impl_->timeout;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return impl_->Break(CudaError(e, "cudaStreamQuery (barrier)"));
    LLMRT_RETURN_IF_ERROR(AsyncError());
    if (std::chrono::steady_clock::now() > deadline) {
      return impl_->Break(absl::DeadlineExceededError(absl::StrCat(
          "NCCL barrier: not every rank arrived within ", impl_->timeout.count(), " ms; the communicator was aborted")));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace llmrt
