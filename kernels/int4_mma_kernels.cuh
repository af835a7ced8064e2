// INT4 group-scaled weights (compressed-tensors pack-quantized: row-major codes, column k at bits
// 4 (k % 8) of little-endian 32-bit word k / 8, q = nibble - 8, one bfloat16 scale per row and
// group of `group` columns) times float32 activations on the tensor cores: the bodies, in a header
// of their own so that they compile twice, for the device (kernels/quant_matmul.cu, with
// kernels/mma.cuh) and on the host in tests/cuda_emulation/ (with the MMA computed from the PTX
// ISA's fragment tables). The includer declares, in namespace llmrt::cuda::i4,
//   void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
//       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 accumulating into d.
//
// The codes stay in the checkpoint's layout. mma.sync's A operand is the weights (16 rows a
// fragment), its B operand the activations (8 tokens a fragment: a decode batch of up to 8 costs
// what one token costs, 16 two fragments). Per 32-column step of a 16-row tile, lane (g, c)
// loads one 32-bit word of row g and one of row g + 8: columns 8c .. 8c+7 of the step, eight
// nibbles. A sum's terms may be taken in any order as long as A and B agree, so the step's two
// MMAs take the columns in the order the nibbles come out of a word two at a time: MMA m's slot
// pair (2c, 2c+1) is columns (8c + 2m, 8c + 2m + 4) and pair (2c+8, 2c+9) is (8c + 2m + 1,
// 8c + 2m + 5). A pair is dequantized in two instructions: (word >> 4j) & 0x000f000f under the
// bfloat16 exponent of 128 gives 128 + nibble in each half (one lop3), minus 136 (one bf16x2
// subtraction) gives nibble - 8, exact. Every slot of an MMA lies in one 32-column step, so in one
// group (a multiple of 32), and each group's sums are folded in with the rows' scales:
// acc = fma(group sum, scale, acc).
//
// The activations go in as two bfloat16 parts (x = hi + lo + r, |r| <= 2^-16 |x|; a non-finite x
// has lo = 0), so each product is exact to 16 significant bits and a sum stays within the float32
// bound widened by 2^-16 per product. Int4PrepKernel writes each token's parts once per call in
// the order the lanes read them: for token t, step s and lane column c, two 16-byte units (hi,
// then lo), each {MMA 0 b0, MMA 0 b1, MMA 1 b0, MMA 1 b1} of bfloat16 pairs.
//
// A block of 4 warps takes one 16-row tile and up to 16 tokens; the warps split the groups of K
// into four contiguous ranges (fixed by K alone) and their sums are added in warp order through
// shared memory. A token's result depends on its own activations and the weights alone, not on
// the other tokens of its block or the batch, so rows are batch-invariant.
#ifndef LLMRT_KERNELS_INT4_MMA_KERNELS_CUH_
#define LLMRT_KERNELS_INT4_MMA_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::i4 {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTokens = 16;  // tokens a block takes: two n8 fragments
constexpr int kRows = 16;    // weight rows (output columns) of a block

// Two bfloat16 values (rounded to nearest even), `low` in the low half.
__device__ __forceinline__ uint32_t PackBf16(float low, float high) {
  return static_cast<uint32_t>(RoundBf16(low)) | (static_cast<uint32_t>(RoundBf16(high)) << 16);
}

// The nibble pair at bits 4j and 16 + 4j of `word >> 4j` (the caller shifts) as bfloat16 values
// nibble - 8: lop3 under the exponent of 128, then a bf16x2 subtraction of 136 (both exact).
__device__ __forceinline__ uint32_t NibblePair(uint32_t shifted) {
#if defined(__CUDA_ARCH__)
  uint32_t v, d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v) : "r"(shifted), "r"(0x000f000fu), "r"(0x43004300u));
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(v), "r"(0x43084308u));
  return d;
#else
  const float lo = static_cast<float>(static_cast<int>(shifted & 0xfu) - 8);
  const float hi = static_cast<float>(static_cast<int>((shifted >> 16) & 0xfu) - 8);
  return PackBf16(lo, hi);
#endif
}

// x in two bfloat16 parts: hi = x rounded, lo = the rest rounded (0 where hi is not finite).
__device__ __forceinline__ void SplitParts(float x, float* hi, float* lo) {
  *hi = Bf16Bits(RoundBf16(x));
  *lo = std::isfinite(*hi) ? x - *hi : 0.0f;
}

// One thread per (token, step, lane column c): x[t][32s + 8c .. 8c+7] as two units (hi, lo).
__global__ void __launch_bounds__(256) Int4PrepKernel(ConstMat x, uint4* out) {
  const int64_t steps = x.cols / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= x.rows * steps * 4) return;
  const int64_t t = i / (steps * 4), s = (i / 4) % steps, c = i % 4;
  const float* src = x.data + t * x.ld + 32 * s + 8 * c;
  float hi[8], lo[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) SplitParts(src[e], &hi[e], &lo[e]);
  // MMA m: b0 = (2m, 2m + 4), b1 = (2m + 1, 2m + 5).
  out[2 * i] = make_uint4(PackBf16(hi[0], hi[4]), PackBf16(hi[1], hi[5]), PackBf16(hi[2], hi[6]), PackBf16(hi[3], hi[7]));
  out[2 * i + 1] =
      make_uint4(PackBf16(lo[0], lo[4]), PackBf16(lo[1], lo[5]), PackBf16(lo[2], lo[6]), PackBf16(lo[3], lo[7]));
}

// Output rows [m0, m1) (at most 8 kFrags; prepared row of output row m: x_rows ? x_rows[m] : m)
// x weight rows [n0, n0 + 16) of one INT4 weight.
template <int kFrags>
__device__ __forceinline__ void Int4MmaTile(const uint4* xp, const int32_t* x_rows, int64_t m0, int64_t m1,
                                            const WeightRef& w, int64_t N, int64_t K, int64_t n0, const MutMat& out) {
  __shared__ float red[kWarps][2][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t steps = K / 32, per_group = w.group / 32, groups = K / w.group;
  const int64_t gb = warp * groups / kWarps, ge = (warp + 1) * groups / kWarps;  // this warp's groups
  // The lane's token of fragment j (column g) and where its prepared parts start; a column past
  // m1 reads row m0's (computed, never stored), so that every load is unconditional.
  const uint4* xj[kFrags];
#pragma unroll
  for (int j = 0; j < kFrags; ++j) {
    const int64_t m = m0 + 8 * j + g < m1 ? m0 + 8 * j + g : m0;
    xj[j] = xp + ((x_rows != nullptr ? x_rows[m] : m) * steps * 4 + c) * 2;
  }
  // Rows past N read row n0's codes (computed, never stored).
  const int64_t row_bytes = K / 2, ra = n0 + g < N ? n0 + g : n0, rb = n0 + g + 8 < N ? n0 + g + 8 : n0;
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  const uint8_t* ca = codes + ra * row_bytes + 4 * c;
  const uint8_t* cb = codes + rb * row_bytes + 4 * c;
  const uint16_t* scales = static_cast<const uint16_t*>(w.scales);
  const uint16_t* sa = scales + ra * groups;
  const uint16_t* sb = scales + rb * groups;
  float acc[kFrags][4] = {};
  for (int64_t gi = gb; gi < ge; ++gi) {
    float part[kFrags][4] = {};
    for (int64_t s = gi * per_group; s < (gi + 1) * per_group; ++s) {
      const uint32_t wa = *reinterpret_cast<const uint32_t*>(ca + 16 * s);
      const uint32_t wb = *reinterpret_cast<const uint32_t*>(cb + 16 * s);
      uint4 hi[kFrags], lo[kFrags];
#pragma unroll
      for (int j = 0; j < kFrags; ++j) {
        hi[j] = xj[j][8 * s];
        lo[j] = xj[j][8 * s + 1];
      }
      const uint32_t a0[4] = {NibblePair(wa), NibblePair(wb), NibblePair(wa >> 4), NibblePair(wb >> 4)};
      const uint32_t a1[4] = {NibblePair(wa >> 8), NibblePair(wb >> 8), NibblePair(wa >> 12), NibblePair(wb >> 12)};
#pragma unroll
      for (int j = 0; j < kFrags; ++j) {
        Mma16816(part[j], a0, hi[j].x, hi[j].y);
        Mma16816(part[j], a0, lo[j].x, lo[j].y);
        Mma16816(part[j], a1, hi[j].z, hi[j].w);
        Mma16816(part[j], a1, lo[j].z, lo[j].w);
      }
    }
    const float s_a = Bf16Bits(sa[gi]), s_b = Bf16Bits(sb[gi]);
#pragma unroll
    for (int j = 0; j < kFrags; ++j) {
      acc[j][0] = fmaf(part[j][0], s_a, acc[j][0]);
      acc[j][1] = fmaf(part[j][1], s_a, acc[j][1]);
      acc[j][2] = fmaf(part[j][2], s_b, acc[j][2]);
      acc[j][3] = fmaf(part[j][3], s_b, acc[j][3]);
    }
  }
  // The warps' sums in warp order: fragment register e is row g + 8 (e / 2), token 2c + (e % 2).
#pragma unroll
  for (int j = 0; j < kFrags; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][j][lane][e] = acc[j][e];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < kFrags; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = red[0][j][lane][e];
        for (int v = 1; v < kWarps; ++v) sum += red[v][j][lane][e];
        const int64_t m = m0 + 8 * j + 2 * c + (e & 1), n = n0 + g + 8 * (e >> 1);
        if (m < m1 && n < N) out.data[m * out.ld + n] = sum;
      }
    }
  }
  __syncthreads();  // red is reused by the block's next run of tokens
}

// Rows [m0, m1) (at most kTokens) in one or two fragments: the same operations for a token either
// way (fragments are independent columns of the MMAs).
__device__ __forceinline__ void Int4MmaRun(const uint4* xp, const int32_t* x_rows, int64_t m0, int64_t m1,
                                           const WeightRef& w, int64_t N, int64_t K, int64_t n0, const MutMat& out) {
  if (m1 - m0 > 8) {
    Int4MmaTile<2>(xp, x_rows, m0, m1, w, N, K, n0, out);
  } else {
    Int4MmaTile<1>(xp, x_rows, m0, m1, w, N, K, n0, out);
  }
}

// Grid (ceil(N / 16), ceil(T / 16)): the block's weight rows and tokens.
__global__ void __launch_bounds__(kThreads) Int4MmaKernel(const uint4* xp, WeightRef w, MutMat out) {
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int64_t m1 = m0 + kTokens < out.rows ? m0 + kTokens : out.rows;
  Int4MmaRun(xp, nullptr, m0, m1, w, w.rows, w.cols, static_cast<int64_t>(blockIdx.x) * kRows, out);
}

// Grid (ceil(N / 16), tiles): a tile's rows (one expert's) in runs of kTokens.
__global__ void __launch_bounds__(kThreads)
    GroupedInt4MmaKernel(const uint4* xp, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                         TileTable tiles, MutMat out) {
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;
  const WeightRef& w = experts.weights[tiles.expert[tile]];
  const int64_t r1 = tiles.row1[tile];
  for (int64_t m0 = tiles.row0[tile]; m0 < r1; m0 += kTokens) {
    Int4MmaRun(xp, x_rows, m0, m0 + kTokens < r1 ? m0 + kTokens : r1, w, N, K,
               static_cast<int64_t>(blockIdx.x) * kRows, out);
  }
}

}  // namespace llmrt::cuda::i4

#endif  // LLMRT_KERNELS_INT4_MMA_KERNELS_CUH_
