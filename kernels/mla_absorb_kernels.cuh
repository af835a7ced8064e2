// MLA's absorbed projections with float32 activations (Backend::MlaAbsorbQuery and
// MlaProjectValue on the CUDA backend): q_lat[t, h] = W_UK(h)^T q_nope[t, h] and
// out[t, h] = W_UV(h) o_lat[t, h], W_UK(h) and W_UV(h) the first nope and the last v rows of head
// h's block of kv_b [heads * (nope + v), kv_lora] (F32 or BF16). Their bodies, in a header of their
// own so that they compile for the device (kernels/matmul.cu) and on the host in
// tests/cuda_emulation/.
//
// A block takes one head and a tile of up to kTokens tokens (1, 4 or 16: the launcher picks by
// T), so that each weight element is read once per tile rather than once per token, and the
// latent rows it multiplies come from shared memory: at Kimi K2's decode of 64 sessions the
// projection's blocks read kv_b 16 times less, and o_lat 32 times less, than a warp per output
// did. Every output keeps the arithmetic of one token alone, whatever the tile and the batch:
//   absorb:  acc = fmaf(q[r], w[r][j], acc) for r = 0 .. nope-1 in order (the CPU's axpy order);
//   project: lane l of a warp sums fmaf(w[j][k], o[k], acc) over k = l, l + 32, ... in order,
//            then the warp's butterfly sum (WarpSum).
#ifndef LLMRT_KERNELS_MLA_ABSORB_KERNELS_CUH_
#define LLMRT_KERNELS_MLA_ABSORB_KERNELS_CUH_

#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::mab {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kRChunk = 64;  // query values (r) staged at a time
constexpr int kProjectCols = 32;  // output columns j of a projection block (blockIdx.z picks them)

// Grid (heads, ceil(T / kTokens), ceil(L / kThreads)): thread x of block z computes column
// j = z * kThreads + x of its head for the tile's tokens; the tile's query values are staged
// kRChunk at a time (zeros for tokens past T).
template <int kTokens>
__global__ void __launch_bounds__(kThreads)
    AbsorbKernel(ConstMat q, WeightRef kv_b, int64_t nope, int64_t qw, int64_t blk, int64_t L, MutMat q_lat) {
  __shared__ float qs[kTokens][kRChunk];
  const int64_t h = blockIdx.x, t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int n = q.rows - t0 < kTokens ? static_cast<int>(q.rows - t0) : kTokens;
  const int64_t j = static_cast<int64_t>(blockIdx.z) * kThreads + threadIdx.x;
  float acc[kTokens] = {};
  for (int64_t r0 = 0; r0 < nope; r0 += kRChunk) {
    const int rn = nope - r0 < kRChunk ? static_cast<int>(nope - r0) : kRChunk;
    __syncthreads();  // the previous chunk's reads are done
    for (int e = threadIdx.x; e < kTokens * kRChunk; e += kThreads) {
      const int tok = e / kRChunk, r = e % kRChunk;
      qs[tok][r] = tok < n && r < rn ? q.data[(t0 + tok) * q.ld + h * qw + r0 + r] : 0.0f;
    }
    __syncthreads();
    if (j >= L) continue;
    for (int r = 0; r < rn; ++r) {
      const float w = LoadElem(kv_b.data, kv_b.type, (h * blk + r0 + r) * L + j);
#pragma unroll
      for (int tok = 0; tok < kTokens; ++tok) acc[tok] = fmaf(qs[tok][r], w, acc[tok]);
    }
  }
  if (j >= L) return;
#pragma unroll
  for (int tok = 0; tok < kTokens; ++tok) {
    if (tok < n) q_lat.data[(t0 + tok) * q_lat.ld + h * L + j] = acc[tok];
  }
}

// The projection's dynamic shared memory: the tile's o_lat rows of this head.
constexpr int64_t ProjectSharedBytes(int64_t tokens, int64_t L) { return tokens * L * static_cast<int64_t>(sizeof(float)); }

// Grid (heads, ceil(T / kTokens), ceil(v / kProjectCols)): warp w of block z computes columns
// j = z * kProjectCols + w, + kWarps, ... of its head for the tile's tokens, whose o_lat rows
// (kTokens x L floats, zeros past T) it stages first.
template <int kTokens>
__global__ void __launch_bounds__(kThreads)
    ProjectKernel(ConstMat o_lat, WeightRef kv_b, int64_t nope, int64_t v, int64_t blk, int64_t L, MutMat out) {
  float* os = DynamicShared<float>();
  const int64_t h = blockIdx.x, t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int n = o_lat.rows - t0 < kTokens ? static_cast<int>(o_lat.rows - t0) : kTokens;
  for (int tok = 0; tok < kTokens; ++tok) {  // (a token's row over the threads: no division a value)
    for (int64_t k = threadIdx.x; k < L; k += kThreads) {
      os[tok * L + k] = tok < n ? o_lat.data[(t0 + tok) * o_lat.ld + h * L + k] : 0.0f;
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j1 = (static_cast<int64_t>(blockIdx.z) + 1) * kProjectCols < v
                         ? (static_cast<int64_t>(blockIdx.z) + 1) * kProjectCols
                         : v;
  for (int64_t j = static_cast<int64_t>(blockIdx.z) * kProjectCols + warp; j < j1; j += kWarps) {
    const int64_t row = (h * blk + nope + j) * L;
    float acc[kTokens] = {};
    for (int64_t k = lane; k < L; k += 32) {
      const float w = LoadElem(kv_b.data, kv_b.type, row + k);
#pragma unroll
      for (int tok = 0; tok < kTokens; ++tok) acc[tok] = fmaf(w, os[tok * L + k], acc[tok]);
    }
#pragma unroll
    for (int tok = 0; tok < kTokens; ++tok) {
      if (tok >= n) break;  // (n is the block's: the warp stays whole)
      const float s = WarpSum(acc[tok]);
      if (lane == 0) out.data[(t0 + tok) * out.ld + h * v + j] = s;
    }
  }
}

// The tile for T tokens: 1 for a single token, 4 up to 4, else 16.
inline int TokensPerBlock(int64_t T) { return T <= 1 ? 1 : T <= 4 ? 4 : 16; }

// The launches' grids for T tokens (x: heads, y: tiles of TokensPerBlock(T) tokens, z: column
// blocks), shared by the launchers and the emulation.
struct Grid {
  unsigned x, y, z;
};
inline Grid AbsorbGrid(int64_t T, int64_t heads, int64_t L) {
  const int64_t tokens = TokensPerBlock(T);
  return {static_cast<unsigned>(heads), static_cast<unsigned>((T + tokens - 1) / tokens),
          static_cast<unsigned>((L + kThreads - 1) / kThreads)};
}
inline Grid ProjectGrid(int64_t T, int64_t heads, int64_t v) {
  const int64_t tokens = TokensPerBlock(T);
  return {static_cast<unsigned>(heads), static_cast<unsigned>((T + tokens - 1) / tokens),
          static_cast<unsigned>((v + kProjectCols - 1) / kProjectCols)};
}

}  // namespace llmrt::cuda::mab

#endif  // LLMRT_KERNELS_MLA_ABSORB_KERNELS_CUH_
