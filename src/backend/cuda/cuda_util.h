// Helpers of the CUDA backend's host code: CUDA statuses as absl::Status, tensors and weights as
// the kernels' plain structs (kernels/kernels.h), and the op wrapper of the status channel.
// Included only by src/backend/cuda/*.cc.
#ifndef LLMRT_BACKEND_CUDA_CUDA_UTIL_H_
#define LLMRT_BACKEND_CUDA_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <exception>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/kernels.h"
#include "src/backend/cuda/cuda_backend.h"

namespace llmrt {

// Scratch slots (CudaBackend::Scratch).
enum ScratchSlot : int {
  kScratchRouterLogits = 0,
  kScratchRouterChoice = 1,
  kScratchMoeIndex = 2,
  kScratchMoeGate = 3,
  kScratchMoeUp = 4,
  kScratchMoeDown = 5,
  kScratchDsaScores = 6,
  kScratchAttention = 7,
  kScratchMatMulBf16 = 8,  // MatMul's rounded activations (BF16 policy)
  kScratchMoeBf16 = 9,     // the MoE input's rounded copy (BF16 policy)
  kScratchSampling = 10,   // SampleTokens' sort buffers
  kScratchMatMulFp8 = 11,  // MatMul's e4m3 activations and their scales (FP8 policy)
  kScratchMoeFp8In = 12,   // the MoE input's e4m3 form (FP8 policy)
  kScratchMoeFp8Mid = 13,  // the experts' intermediate rows' e4m3 form (FP8 policy)
  kScratchMatMulFp8Out = 14,  // cuBLASLt's FP8 output over rows padded to a multiple of 4
  kScratchQuantAct = 15,      // INT4 / FP8 weights' activations as the tensor-core kernels read them
  kScratchMlaLatent = 16,     // expanded MLA: the contexts' latent rows and rope keys (bf16)
  kScratchMlaExpanded = 17,   // expanded MLA: every head's keys and values (bf16)
  kScratchMoeCodesIn = 18,    // the MoE input as the tensor-core grouped GEMM reads it (bf16 codes)
  kScratchMoeCodesMid = 19,   // the experts' intermediate rows as it reads them (bf16 codes)
  kScratchDsaCandidates = 20,  // the DSA top-k's first stage: each chunk's candidates
  kScratchSlots = 21,
};

inline absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  // Clear the runtime's last error, so a recoverable failure reported here is not blamed again on
  // the next launch's cudaGetLastError (a sticky error stays set whatever this does).
  (void)cudaGetLastError();
  if (e == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of device memory (", cudaGetErrorString(e), ")"));
  }
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// The status of a kernel launch.
inline absl::Status Launched(cudaError_t e) { return CudaStatus(e, "kernel launch"); }

inline cudaStream_t Stream(void* s) { return static_cast<cudaStream_t>(s); }

inline cuda::ConstMat Const(const Tensor& t) {
  return {t.data_as<const float>(), t.rank() == 0 ? 0 : t.dim(0), t.row_size(), t.row_stride()};
}
inline cuda::MutMat Mut(const Tensor& t) { return {t.data_as<float>(), t.rank() == 0 ? 0 : t.dim(0), t.row_size(), t.row_stride()}; }
// The kernels' element type of a weight format the backend prepares (PrepareWeight refuses the
// others).
inline cuda::Elem WeightElem(WeightFormatId format) {
  switch (format) {
    case kWeightBf16:
      return cuda::kElemBf16;
    case kWeightFp8Block:
      return cuda::kElemFp8E4M3;
    case kWeightInt4Group:
      return cuda::kElemInt4;
    default:
      return cuda::kElemF32;
  }
}
// F32 and BF16: what the ops other than MatMul and the MoE read (vectors, tables, kv_b, router).
inline bool DenseWeight(const Weight& w) { return w.format == kWeightF32 || w.format == kWeightBf16; }
inline cuda::WeightRef WeightOf(const Weight& w) {
  cuda::WeightRef r{w.data.data(), WeightElem(w.format), w.rows, w.cols};
  if (w.quantized) {
    r.scales = w.scales.data();
    r.group = w.params.group;
    r.block_rows = w.params.block_rows;
    r.block_cols = w.params.block_cols;
  }
  return r;
}

// An internal check inside an op body (a lambda returning absl::Status).
#define LLMRT_CUDA_CHECK(cond)                                                                                  \
  do {                                                                                                          \
    if (!(cond)) return absl::InternalError(absl::StrCat("internal check failed at ", __FILE__, ":", __LINE__, \
                                                         ": " #cond));                                          \
  } while (0)

// An op's body's status, an exception it throws as a status (an op never throws out of the
// backend).
template <typename Fn>
absl::Status StatusOfBody(Fn&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of host memory");
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  } catch (...) {
    return absl::InternalError("unknown exception");
  }
}

template <typename Fn>
void CudaBackend::Run(const char* op, Fn&& body) {
  if (failed_ || !sticky_.ok()) return;
  // The current device is per host thread; the runtime may call from several.
  cudaSetDevice(device_);
  const absl::Status s = StatusOfBody(body);
  if (!s.ok()) Fail(absl::Status(s.code(), absl::StrCat(op, ": ", s.message())));
}

}  // namespace llmrt

#endif  // LLMRT_BACKEND_CUDA_CUDA_UTIL_H_
