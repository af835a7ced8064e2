// Matrix products with float32 activations and weights of every format, float32 accumulation.
//
// One tiled kernel serves MatMul and the MoE's grouped GEMM for F32 / BF16 weights, and for the
// quantized shapes the GEMV kernel does not take: a block computes a 32-row x 64-column tile of
// out = x w^T, staging 32-wide slices of K of both operands in shared memory (weights dequantized
// to float32 there, element by element as the format's scalar reference does); every output
// element is one thread's sum in k order, so a row's result depends neither on the other rows of
// the call nor on where the row sits in its tile (the MoE's result must not depend on how tokens
// are grouped). This is the straightforward CUDA-core kernel; tensor-core paths (cuBLASLt over
// BF16 activations) come with the BF16 activation dtype. Quantized weights with 16-byte aligned
// rows go to the dequantizing GEMV kernel (quant_matmul.cu).
#include "kernels/common.cuh"
#include "kernels/mla_absorb_kernels.cuh"

namespace llmrt::cuda {
namespace {

constexpr int kBM = static_cast<int>(kGemmTileRows), kBN = 64, kBK = 32, kThreads = 256;
// Decode-sized products (at most 8 rows) use 8-row tiles: the same per-element arithmetic (a
// sequential fmaf over k), so results are bit-identical to the 32-row tiles, with a quarter of
// the wasted rows.
constexpr int kSkinnyBM = 8;

// out rows [m0, m1) x columns [n0, n0 + kBN) for one weight; x row of output row r is
// x_rows ? x_rows[r] : r. Thread (tx, ty) computes rows ty * kR + i and columns tx + kTX * j.
// Every output element is acc = fmaf(x[m][k], w[n][k], acc) for k = 0 .. K-1 in order, whatever
// the tile shape.
template <int kTileM, int kR, int kC>
__device__ void GemmTile(const ConstMat& x, const int32_t* x_rows, const void* w, int32_t w_type, const void* w_scales,
                         const WeightRef& layout, int64_t N, int64_t K, int64_t m0, int64_t m1, int64_t n0,
                         const MutMat& out) {
  constexpr int kTX = kBN / kC, kTY = kThreads / kTX;
  static_assert(kTY * kR == kTileM, "the threads cover the tile's rows");
  __shared__ float xs[kTileM][kBK + 1];
  __shared__ float ws[kBN][kBK + 1];
  const int tx = threadIdx.x % kTX, ty = threadIdx.x / kTX;
  float acc[kR][kC] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    for (int e = threadIdx.x; e < kTileM * kBK; e += kThreads) {
      const int r = e / kBK, c = e % kBK;
      const int64_t m = m0 + r, k = k0 + c;
      float v = 0.0f;
      if (m < m1 && k < K) {
        const int64_t xr = x_rows != nullptr ? x_rows[m] : m;
        v = x.data[xr * x.ld + k];
      }
      xs[r][c] = v;
    }
    for (int e = threadIdx.x; e < kBN * kBK; e += kThreads) {
      const int r = e / kBK, c = e % kBK;
      const int64_t n = n0 + r, k = k0 + c;
      ws[r][c] = (n < N && k < K) ? LoadWeight(w, w_type, w_scales, layout, n, k, K) : 0.0f;
    }
    __syncthreads();
    const int kk_end = static_cast<int>(K - k0 < kBK ? K - k0 : kBK);
    for (int kk = 0; kk < kk_end; ++kk) {
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        const float a = xs[ty * kR + i][kk];
#pragma unroll
        for (int j = 0; j < kC; ++j) acc[i][j] = fmaf(a, ws[tx + kTX * j][kk], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int64_t m = m0 + ty * kR + i;
    if (m >= m1) continue;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int64_t n = n0 + tx + kTX * j;
      if (n < N) out.data[m * out.ld + n] = acc[i][j];
    }
  }
}

template <int kTileM, int kR, int kC>
__global__ void GemmKernel(ConstMat x, WeightRef w, MutMat out) {
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t m1 = m0 + kTileM < x.rows ? m0 + kTileM : x.rows;
  GemmTile<kTileM, kR, kC>(x, nullptr, w.data, w.type, w.scales, w, w.rows, w.cols, m0, m1, n0, out);
}

__global__ void GroupedGemmKernel(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                                  TileTable tiles, MutMat out) {
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;  // the grid covers the most tiles any routing can need
  const int32_t e = tiles.expert[tile];
  const WeightRef& w = experts.weights[e];
  GemmTile<kBM, 2, 4>(x, x_rows, w.data, w.type, w.scales, w, N, K, tiles.row0[tile], tiles.row1[tile],
                      static_cast<int64_t>(blockIdx.x) * kBN, out);
}

}  // namespace

cudaError_t LaunchGemm(ConstMat x, WeightRef w, MutMat out, cudaStream_t s) {
  if (x.rows == 0 || w.rows == 0) return cudaSuccess;
  if (GemvApplies(w)) return LaunchQuantGemv(x, w, out, s);
  const unsigned col_tiles = static_cast<unsigned>((w.rows + kBN - 1) / kBN);
  if (x.rows <= kSkinnyBM) {
    GemmKernel<kSkinnyBM, 1, 2><<<dim3(col_tiles, 1), kThreads, 0, s>>>(x, w, out);
  } else {
    GemmKernel<kBM, 2, 4><<<dim3(col_tiles, static_cast<unsigned>((x.rows + kBM - 1) / kBM)), kThreads, 0, s>>>(x, w, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchGroupedGemm(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                              TileTable tiles, MutMat out, cudaStream_t s, ActScales act) {
  if (tiles.max_tiles == 0 || N == 0) return cudaSuccess;
  if (tiles.tile_rows != kGemmTileRows) return cudaErrorInvalidValue;
  if (experts.gemv_bits != 0) return LaunchGroupedQuantGemv(x, x_rows, experts, N, K, tiles, out, s, act);
  if (act.data != nullptr) return cudaErrorInvalidValue;  // the tiled kernel takes no activation scales
  const dim3 grid(static_cast<unsigned>((N + kBN - 1) / kBN), static_cast<unsigned>(tiles.max_tiles));
  GroupedGemmKernel<<<grid, kThreads, 0, s>>>(x, x_rows, experts, N, K, tiles, out);
  return cudaGetLastError();
}

cudaError_t LaunchMlaAbsorbQuery(ConstMat q, WeightRef kv_b, int64_t heads, int64_t nope, int64_t rope, int64_t v,
                                 int64_t kv_lora, MutMat q_lat, cudaStream_t s) {
  if (q.rows == 0 || heads == 0 || kv_lora == 0) return cudaSuccess;
  const int tokens = mab::TokensPerBlock(q.rows);
  if ((q.rows + tokens - 1) / tokens > 65535) return cudaErrorInvalidValue;  // (grid.y)
  const mab::Grid g = mab::AbsorbGrid(q.rows, heads, kv_lora);
  const dim3 grid(g.x, g.y, g.z);
  const auto launch = [&](auto kernel) {
    kernel<<<grid, mab::kThreads, 0, s>>>(q, kv_b, nope, nope + rope, nope + v, kv_lora, q_lat);
  };
  switch (tokens) {
    case 1: launch(mab::AbsorbKernel<1>); break;
    case 4: launch(mab::AbsorbKernel<4>); break;
    default: launch(mab::AbsorbKernel<16>); break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchMlaProjectValue(ConstMat o_lat, WeightRef kv_b, int64_t heads, int64_t nope, int64_t v,
                                  int64_t kv_lora, MutMat out, cudaStream_t s) {
  if (o_lat.rows == 0 || heads == 0 || v == 0) return cudaSuccess;
  const int tokens = mab::TokensPerBlock(o_lat.rows);
  if ((o_lat.rows + tokens - 1) / tokens > 65535) return cudaErrorInvalidValue;  // (grid.y)
  const mab::Grid g = mab::ProjectGrid(o_lat.rows, heads, v);
  const dim3 grid(g.x, g.y, g.z);
  const int64_t bytes = mab::ProjectSharedBytes(tokens, kv_lora);
  cudaError_t err = cudaSuccess;
  const auto launch = [&](auto kernel) {
    if (err = AllowDynamicShared(kernel, bytes); err != cudaSuccess) return;
    kernel<<<grid, mab::kThreads, static_cast<size_t>(bytes), s>>>(o_lat, kv_b, nope, v, nope + v, kv_lora, out);
  };
  switch (tokens) {
    case 1: launch(mab::ProjectKernel<1>); break;
    case 4: launch(mab::ProjectKernel<4>); break;
    default: launch(mab::ProjectKernel<16>); break;
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
