// The CUDA backend's tensor-core GEMMs under the BF16 and FP8 activation policies: cuBLASLt,
// loaded at run time, with one handle per backend, a preallocated workspace and plans cached per
// shape.
//
// out [T, N] (float32, row stride ldo) = x [T, K] (bfloat16 codes, contiguous) times w^T, w the
// BF16 weight [N, K] row-major. In cuBLASLt's column-major terms: A = w as a K x N matrix (ld K)
// with the transposed op, B = x as K x T (ld K), C = D = out as N x T (ld ldo); compute
// CUBLAS_COMPUTE_32F, scale type float, alpha 1, beta 0. Products of two bfloat16 values are
// exact in float32, so the result differs from a float32 dot product of the rounded operands only
// in the order of the float32 additions.
//
// FP8 (Operands::kFp8Block128, the FP8 policy on FP8 block weights): A = the e4m3 codes of the
// weight and B = the e4m3 codes of the activations (CUDA_R_8F_E4M3, the same shapes and leading
// dimensions), D float32 as above, with block scales: A's float32 scale per 128 x 128 block
// (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F), the checkpoint's [ceil(N / 128), ceil(K / 128)]
// row-major array as stored, which cuBLASLt reads with rows of blocks at a stride of
// ceil(K / 128) rounded up to 4, so a shape is taken only when ceil(K / 128) is a multiple of 4;
// and B's per 128 values of a token row (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F),
// [ceil(K / 128)][T] with a block's T scales contiguous, read at a stride of T rounded up to 4,
// so FP8 plans take T a multiple of 4 (the caller pads the rows with zero codes and scales).
// Products of two e4m3 values are exact, but Hopper's FP8 tensor cores add them inside a
// 128-long block with a narrower accumulator than float32 (about 14 significant bits, the
// DeepSeek-V3 report's finding); each block sum is then scaled by the two block scales and added
// in float32 (no fast accumulation). The result is therefore within about 2^-11 of the sum of
// the products' magnitudes of cpu::Fp8MatMulRows on the same codes, not bit-equal to it. Hopper
// runs it; the backend does not offer it on other devices.
//
// Batch invariance. cuBLASLt's heuristic picks tiles and split-K by problem size, so a row's
// result could change with T. Here the algorithm is fixed per (N, K): the heuristic is asked once,
// at T = kCanonicalRows, for algorithms without split-K (CUBLASLT_ALGO_CONFIG_SPLITK_NUM 1,
// reduction scheme NONE), preferring one that needs no workspace (it keeps no partial sums across
// thread blocks), and that algorithm, checked at T = 1 (4 for FP8) and T = kCanonicalRows, serves every T. A
// thread block then sums each output over all of K in the same order whatever T is, so a row's
// result depends neither on T nor on the other rows. A shape without such an algorithm, or a T
// the algorithm does not take (cublasLtMatmulAlgoCheck), is not taken (Prepare returns null) and
// the caller runs its own kernel.
//
// Loading. libcublasLt is dlopen'ed (its soname for the toolkit this build was compiled against,
// then the toolkit's library directory) and exactly the functions used are resolved once per
// process, so libllmrt loads on hosts without it. The library is never unloaded.
//
// Thread safety: a CublasLtGemm belongs to one backend; its calls are serialized by a mutex.
#ifndef LLMRT_BACKEND_CUDA_CUBLASLT_H_
#define LLMRT_BACKEND_CUDA_CUBLASLT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmrt {

// Loads the cuBLASLt library named `path` (a soname or a path) and resolves every function
// CublasLtGemm uses; UNSUPPORTED naming the library or the missing symbol otherwise. Each call
// loads anew (for tests); CublasLtGemm::Create loads the default library once per process.
absl::Status CheckCublasLtLibrary(const std::string& path);
// The library CublasLtGemm loads: the soname of this build's CUDA toolkit (libcublasLt.so.<major>).
std::string CublasLtLibraryName();

class CublasLtGemm {
 public:
  // The T at which the heuristic picks a (N, K)'s algorithm (a prefill chunk of the runtime's
  // default max_tokens_per_step).
  static constexpr int64_t kCanonicalRows = 512;
  // The workspace cuBLASLt may use; the backend allocates it once.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // A handle over the process's cuBLASLt library, using `workspace` (device memory of
  // kWorkspaceBytes, owned by the caller and outliving this object). UNSUPPORTED naming the
  // library when it cannot be loaded; INTERNAL with the cublasStatus name when the handle cannot
  // be created.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(void* workspace);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // One cached plan: layouts of B and D for T rows and the (N, K)'s algorithm.
  struct Call;
  // The operand types of a plan (see the top of this file). kBf16Out: BF16 operands as kBf16,
  // D bfloat16 (each float32 sum rounded to nearest even; row stride ldo a multiple of 8).
  enum class Operands { kBf16, kFp8Block128, kBf16Out };
  // The plan for out [T, N] (row stride ldo) = x [T, K] w^T, created and cached on first use
  // (the heuristic runs once per (N, K)); null when cuBLASLt does not take the shape (K not a
  // multiple of 8 or ldo not a multiple of 4, 8 for a bfloat16 output, so that rows are 16-byte
  // aligned; no split-K-free algorithm; the algorithm refuses this T; for FP8, K a multiple of
  // 16, ceil(K / 128) a multiple of 4 and T a multiple of 4). A failing cuBLASLt call is INTERNAL naming the
  // call and its cublasStatus. REQUIRES: N, K, T > 0, ldo >= N.
  absl::StatusOr<const Call*> Prepare(int64_t N, int64_t K, int64_t T, int64_t ldo);
  // The same for any operand types. The returned Call stays valid for at least 4096 further
  // Prepare calls (the plan cache is retired a generation at a time).
  absl::StatusOr<const Call*> Prepare(Operands ops, int64_t N, int64_t K, int64_t T, int64_t ldo);
  // Enqueues the product on `stream` (a cudaStream_t). REQUIRES: `call` from Prepare of this
  // object with BF16 operands; w, x and out 16-byte aligned device pointers of the prepared shapes.
  absl::Status Run(const Call& call, const void* w, const void* x, float* out, void* stream);
  // The same into bfloat16 codes. REQUIRES: `call` from Prepare with Operands::kBf16Out.
  absl::Status RunBf16Out(const Call& call, const void* w, const void* x, uint16_t* out, void* stream);
  // The FP8 product: w and x e4m3 codes, w_scales and x_scales laid out as above (device, 16-byte
  // aligned). REQUIRES: `call` from Prepare with Operands::kFp8Block128.
  absl::Status RunFp8(const Call& call, const void* w, const float* w_scales, const void* x, const float* x_scales,
                      float* out, void* stream);
  // Whether the pointer is 16-byte aligned (the alignment the algorithms are chosen for).
  static bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

  // The (N, K) shapes seen and how many have a cuBLASLt algorithm (for logs and tests).
  int64_t shapes() const;
  int64_t shapes_taken() const;

 private:
  struct Impl;
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  // cublasLtMatmul of a prepared call (the caller holds the lock).
  absl::Status Matmul(const Call& c, const void* w, const void* x, void* out, void* stream);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrt

#endif  // LLMRT_BACKEND_CUDA_CUBLASLT_H_
