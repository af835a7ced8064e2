// Mixture of experts on the device: noaux_tc routing (one warp per token, the CPU's operations
// and tie rules: src/backend/cpu/moe.cc; CUDA's expf may differ from the host's in the last
// bit), the permutation of (token, slot) pairs by expert that
// the grouped GEMMs run over, and the weighted combination of the experts' outputs in expert
// order (as the CPU sums them; slots naming one expert twice by weight), so a token's result does
// not depend on the order of its slots. And the routed experts' grouped GEMM on the tensor cores
// for BF16-rounded inputs (kernels/moe_mma_kernels.cuh), in its mma.sync and its warpgroup-MMA
// (kernels/moe_wg_kernels.cuh, sm_90a) forms.
#include <atomic>
#include <cstdint>

#include "kernels/async_copy.cuh"
#include "kernels/mma.cuh"
#include "kernels/moe_kernels.cuh"
#include "kernels/moe_mma_kernels.cuh"
#include "kernels/wgmma.cuh"

namespace llmrt::cuda::wg {
using cuda::CpAsync16;
using cuda::CpAsyncCommit;
using cuda::CpAsyncWaitGroup;
}  // namespace llmrt::cuda::wg

#include "kernels/moe_wg_kernels.cuh"

namespace llmrt::cuda {

cudaError_t LaunchMoeRoute(const RouteArgs& a, cudaStream_t s) {
  if (a.T == 0) return cudaSuccess;
  if (a.n_group > moe::kMaxGroups) return cudaErrorInvalidValue;
  moe::RouteKernel<<<BlocksFor(a.T, moe::kRouteWarps), 32 * moe::kRouteWarps, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchMoePermute(const PermuteArgs& a, int32_t* err, cudaStream_t s) {
  if (a.tile_rows != kGemmTileRows && a.tile_rows != 64 && a.tile_rows != kGemmWideTileRows) {
    return cudaErrorInvalidValue;
  }
  moe::PermuteKernel<<<1, moe::kPermuteThreads, 0, s>>>(a, err);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(const int32_t* idx, int64_t idx_ld, ConstMat weights, const int32_t* perm_pos, int64_t K,
                             ConstMat y, MutMat out, cudaStream_t s) {
  if (out.rows == 0) return cudaSuccess;
  if (K > moe::kMaxCombineSlots) return cudaErrorInvalidValue;
  moe::CombineKernel<<<static_cast<unsigned>(out.rows), 256, 0, s>>>(idx, idx_ld, weights, perm_pos, K, y, out);
  return cudaGetLastError();
}

cudaError_t LaunchGroupedGemmMma(const uint16_t* x, int64_t ldx, const int32_t* x_rows, ExpertTable experts, int64_t N,
                                 int64_t K, TileTable tiles, MutMat out, cudaStream_t s, ActScales act) {
  if (tiles.max_tiles == 0 || N == 0) return cudaSuccess;
  if (ldx < K || ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((N + gmm::kCols - 1) / gmm::kCols), static_cast<unsigned>(tiles.max_tiles));
  cudaError_t err = cudaSuccess;
  // (Each instance's shared memory allowance, set once per device: it is the same every launch.)
  static std::atomic<uint64_t> allowed[6];
  const auto launch = [&](auto kernel, bool fp8) {
    const int64_t bytes = gmm::SharedBytes(fp8, tiles.tile_rows);
    const int slot = (fp8 ? 3 : 0) + (tiles.tile_rows == 32 ? 0 : tiles.tile_rows == 64 ? 1 : 2);
    if (err = AllowLargeSharedOnce(kernel, bytes, &allowed[slot]); err != cudaSuccess) return;
    kernel<<<grid, gmm::kThreads, static_cast<size_t>(bytes), s>>>(x, ldx, x_rows, experts, N, K, tiles, out, act);
  };
  if (experts.gemv_bits == 16 && act.data == nullptr && K % 8 == 0) {
    switch (tiles.tile_rows) {
      case 32: launch(gmm::GroupedMmaKernel<false, 32>, false); break;
      case 64: launch(gmm::GroupedMmaKernel<false, 64>, false); break;
      case 128: launch(gmm::GroupedMmaKernel<false, 128>, false); break;
      default: return cudaErrorInvalidValue;
    }
  } else if (experts.gemv_bits == 8 && act.data != nullptr && K % 16 == 0) {
    switch (tiles.tile_rows) {
      case 32: launch(gmm::GroupedMmaKernel<true, 32>, true); break;
      case 64: launch(gmm::GroupedMmaKernel<true, 64>, true); break;
      default: return cudaErrorInvalidValue;
    }
  } else {
    return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

bool GroupedGemmWgmmaBuilt() {
#ifdef LLMRT_CUDA_SM90A
  return true;
#else
  return false;
#endif
}

cudaError_t LaunchGroupedGemmWgmma(const uint16_t* x, int64_t ldx, const int32_t* x_rows, ExpertTable experts,
                                   int64_t N, int64_t K, TileTable tiles, MutMat out, int32_t* err, cudaStream_t s,
                                   ActScales act) {
  if (!GroupedGemmWgmmaBuilt()) return cudaErrorNotSupported;
  if (tiles.max_tiles == 0 || N == 0) return cudaSuccess;
  const bool bf16 = experts.gemv_bits == 16 && act.data == nullptr && K % 8 == 0;
  const bool fp8 = experts.gemv_bits == 8 && act.data != nullptr && K % 16 == 0;
  if (ldx < K || ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 || !(bf16 || fp8)) {
    return cudaErrorInvalidValue;
  }
  const int64_t bytes = wg::moe::WgSharedBytes(tiles.tile_rows, fp8), cols = wg::moe::WgBlockCols(tiles.tile_rows);
  if (bytes == 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((N + cols - 1) / cols), static_cast<unsigned>(tiles.max_tiles));
  static std::atomic<uint64_t> allowed[4];
  const auto launch = [&](auto kernel, int slot) -> cudaError_t {
    if (const cudaError_t e = AllowLargeSharedOnce(kernel, bytes, &allowed[slot]); e != cudaSuccess) return e;
    kernel<<<grid, wg::moe::kThreads, static_cast<size_t>(bytes), s>>>(x, ldx, x_rows, experts, N, K, tiles, out, act, err);
    return cudaGetLastError();
  };
  if (fp8) {
    return tiles.tile_rows == 128 ? launch(wg::moe::GroupedWgKernel<128, true>, 3)
                                  : launch(wg::moe::GroupedWgKernel<64, true>, 2);
  }
  return tiles.tile_rows == 128 ? launch(wg::moe::GroupedWgKernel<128, false>, 1)
                                : launch(wg::moe::GroupedWgKernel<64, false>, 0);
}

}  // namespace llmrt::cuda
