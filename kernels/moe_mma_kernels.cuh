// The routed experts' grouped GEMM on the tensor cores, for the activation policies that round the
// experts' inputs to bfloat16 (LLM_ACTIVATIONS_BF16 and FP8 with BF16 experts): its body, in a
// header of its own so that it compiles twice, for the device (kernels/moe.cu, with
// kernels/mma.cuh) and on the host in tests/cuda_emulation/ (with the MMA computed from the PTX
// ISA's fragment tables). The includer declares, in namespace llmrt::cuda (or gmm),
//   void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
//       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 accumulating into d.
//
// One block per (64 output columns, tile of at most 32 rows of one expert); per step of 32 along
// k the block stages the rows' activations (already bfloat16 values: exact as bfloat16) and the
// expert's 64 weight rows in shared memory (16-byte loads), and each of 4 warps multiplies the
// 32 rows by its 16 columns (2 x 2 MMAs per 16 of k), accumulating in float32. Each output is a
// float32 sum of exact products, as the CPU's BF16 policy computes it, in the tensor cores' order;
// a row's result depends on its activation row and the weights alone, not on the tile it shares.
#ifndef LLMRT_KERNELS_MOE_MMA_KERNELS_CUH_
#define LLMRT_KERNELS_MOE_MMA_KERNELS_CUH_

#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::gmm {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kRows = 32;     // rows of a tile (kGemmTileRows): two m16 tiles
constexpr int kCols = 64;     // output columns of a block: 16 per warp, two n8 tiles
constexpr int kStep = 32;     // k per staging step: two k16 MMA steps
constexpr int kStride = kStep + 8;  // shared row stride (bfloat16): conflict-free fragment loads
static_assert(kRows == kGemmTileRows, "a block holds a whole tile");

__device__ __forceinline__ uint32_t Pair(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Rows [r0, r1) of tile `tile` (x row of output row r: x_rows ? x_rows[r] : r) times the BF16
// weight of its expert ([N, K], rows 16-byte aligned, K a multiple of 8), columns [n0, n0 + 64).
__global__ void __launch_bounds__(kThreads)
    GroupedBf16MmaKernel(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K, TileTable tiles,
                         MutMat out) {
  alignas(16) __shared__ uint16_t as[kRows * kStride];
  alignas(16) __shared__ uint16_t bs[kCols * kStride];
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;
  const int32_t e = tiles.expert[tile];
  const int64_t r0 = tiles.row0[tile];
  const int rows = static_cast<int>(tiles.row1[tile] - r0);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const uint16_t* w = static_cast<const uint16_t*>(experts.weights[e].data);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  float acc[2][2][4] = {};  // [m16 tile][n8 tile][fragment]
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    // Activations: 32 rows x 32 values, each thread 8 (bfloat16 values held as float32).
    for (int i = threadIdx.x; i < kRows * kStep; i += kThreads) {
      const int r = i / kStep, k = i % kStep;
      float v = 0.0f;
      if (r < rows && k0 + k < K) {
        const int64_t m = r0 + r;
        v = x.data[(x_rows != nullptr ? x_rows[m] : m) * x.ld + k0 + k];
      }
      as[r * kStride + k] = ToBf16Bits(v);
    }
    // Weights: 64 rows x 32 values in 16-byte pieces (8 values), zeros past N and K.
    for (int i = threadIdx.x; i < kCols * (kStep / 8); i += kThreads) {
      const int n = i / (kStep / 8), p = i % (kStep / 8);
      uint4 v = make_uint4(0, 0, 0, 0);
      if (n0 + n < N && k0 + 8 * p < K) v = *reinterpret_cast<const uint4*>(w + (n0 + n) * K + k0 + 8 * p);
      *reinterpret_cast<uint4*>(bs + n * kStride + 8 * p) = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; kk += 16) {
      uint32_t b[2][2];
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) {
        const uint16_t* bp = bs + (warp * 16 + ni * 8 + g) * kStride + kk + 2 * c;
        b[ni][0] = Pair(bp);
        b[ni][1] = Pair(bp + 8);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const uint16_t* ap = as + (mi * 16 + g) * kStride + kk + 2 * c;
        const uint32_t a[4] = {Pair(ap), Pair(ap + 8 * kStride), Pair(ap + 8), Pair(ap + 8 * kStride + 8)};
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) Mma16816(acc[mi][ni], a, b[ni][0], b[ni][1]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = mi * 16 + g + 8 * h;
        if (r >= rows) continue;
        const int64_t n = n0 + warp * 16 + ni * 8 + 2 * c;
        float* dst = out.data + (r0 + r) * out.ld;
        if (n < N) dst[n] = acc[mi][ni][2 * h];
        if (n + 1 < N) dst[n + 1] = acc[mi][ni][2 * h + 1];
      }
    }
  }
}

}  // namespace llmrt::cuda::gmm

#endif  // LLMRT_KERNELS_MOE_MMA_KERNELS_CUH_
