// Quantized weights times float32 activations on the tensor cores, for decode batches and every
// other T: INT4 group-scaled weights (compressed-tensors pack-quantized: row-major codes, column
// k at bits 4 (k % 8) of little-endian 32-bit word k / 8, q = nibble - 8, one bfloat16 scale per
// row and group of `group` columns) and FP8 block-scaled weights (below). The bodies, in a header
// of their own so that they compile twice, for the device (kernels/quant_matmul.cu, with
// kernels/mma.cuh) and on the host in tests/cuda_emulation/ (with the MMA computed from the PTX
// ISA's fragment tables). The includer declares, in namespace llmrt::cuda::qmma,
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
// The activations go in as two bfloat16 parts (x = hi + lo + r, |r| <= 2^-18 |x|; a non-finite x
// has lo = 0), so each product is exact to 16 significant bits and a sum stays within the float32
// bound widened by 2^-16 per product (what the tests hold it to). QuantPrepKernel writes each token's parts once per call in
// the order the lanes read them: for token t, step s and lane column c, two 16-byte units (hi,
// then lo), each {MMA 0 b0, MMA 0 b1, MMA 1 b0, MMA 1 b1} of bfloat16 pairs.
//
// FP8 block-scaled weights (e4m3 codes, a float32 scale per block_rows x block_cols block,
// block_cols a multiple of 32) take the same kernel under the exact and BF16 policies: lane (g, c)
// loads 8 bytes of each of its rows (columns 8c .. 8c+7 of the step), MMA m takes columns
// 8c + 4m .. 8c + 4m + 3 in adjacent pairs, and a pair of codes becomes bfloat16 through the
// hardware e4m3x2 -> f16x2 conversion and float32 (exact: e4m3 values are bfloat16 values); the
// column blocks are folded with the rows' block scales as INT4's groups are. The activations'
// pairs are then adjacent columns (Layout::kAdjacent).
//
// A block of 4 warps takes one 16-row tile and up to 16 tokens; the warps split the groups of K
// into four contiguous ranges (fixed by K alone) and their sums are added in warp order through
// shared memory. A token's result depends on its own activations and the weights alone, not on
// the other tokens of its block or the batch, so rows are batch-invariant.
#ifndef LLMRT_KERNELS_QUANT_MMA_KERNELS_CUH_
#define LLMRT_KERNELS_QUANT_MMA_KERNELS_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common.cuh"

namespace llmrt::cuda::qmma {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTokens = 16;  // tokens a block takes: two n8 fragments
constexpr int kRows = 16;    // weight rows (output columns) of a block
constexpr int kAhead = 8;    // 32-column steps of codes a lane loads ahead


// The nibble pair at bits 4j and 16 + 4j of `word >> 4j` (the caller shifts) as bfloat16 values
// nibble - 8: lop3 under the exponent of 128, then a bf16x2 fma v * 1 - 136 (both exact; fma
// rather than sub.bf16x2, which needs sm_90, so the kernel builds for sm_80 too).
__device__ __forceinline__ uint32_t NibblePair(uint32_t shifted) {
#if defined(__CUDA_ARCH__)
  uint32_t v, d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v) : "r"(shifted), "r"(0x000f000fu), "r"(0x43004300u));
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(v), "r"(0x3f803f80u), "r"(0xc308c308u));
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

// The order of a lane's eight activation columns in its B fragments: kNibbles (INT4) MMA m's
// pairs are columns (2m, 2m + 4) and (2m + 1, 2m + 5); kAdjacent (FP8) (4m, 4m + 1) and
// (4m + 2, 4m + 3).
enum class Layout { kNibbles, kAdjacent };


// One thread per (token, step, lane column c): x[t][32s + 8c .. 8c+7] as two units (hi, lo).
template <Layout kLayout>
__global__ void __launch_bounds__(256) QuantPrepKernel(ConstMat x, uint4* out) {
  const int64_t steps = x.cols / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= x.rows * steps * 4) return;
  const int64_t t = i / (steps * 4), s = (i / 4) % steps, c = i % 4;
  const float* src = x.data + t * x.ld + 32 * s + 8 * c;
  float hi[8], lo[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) SplitParts(src[e], &hi[e], &lo[e]);
  if constexpr (kLayout == Layout::kNibbles) {  // MMA m: b0 = (2m, 2m + 4), b1 = (2m + 1, 2m + 5)
    out[2 * i] = make_uint4(PackBf16(hi[0], hi[4]), PackBf16(hi[1], hi[5]), PackBf16(hi[2], hi[6]), PackBf16(hi[3], hi[7]));
    out[2 * i + 1] =
        make_uint4(PackBf16(lo[0], lo[4]), PackBf16(lo[1], lo[5]), PackBf16(lo[2], lo[6]), PackBf16(lo[3], lo[7]));
  } else {  // MMA m: b0 = (4m, 4m + 1), b1 = (4m + 2, 4m + 3)
    out[2 * i] = make_uint4(PackBf16(hi[0], hi[1]), PackBf16(hi[2], hi[3]), PackBf16(hi[4], hi[5]), PackBf16(hi[6], hi[7]));
    out[2 * i + 1] =
        make_uint4(PackBf16(lo[0], lo[1]), PackBf16(lo[2], lo[3]), PackBf16(lo[4], lo[5]), PackBf16(lo[6], lo[7]));
  }
}

// Output rows [m0, m1) (at most 8 kFrags; prepared row of output row m: x_rows ? x_rows[m] : m)
// x weight rows [n0, n0 + 16) of one INT4 (kFp8 false) or FP8 block-scaled (kFp8) weight.
template <bool kFp8, int kFrags>
__device__ __forceinline__ void QuantMmaTile(const uint4* xp, const int32_t* x_rows, int64_t m0, int64_t m1,
                                             const WeightRef& w, int64_t N, int64_t K, int64_t n0, const MutMat& out) {
  __shared__ float red[kWarps][2][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  // Groups: INT4 scale groups, FP8 column blocks (the last one may be partial); steps of 32.
  const int64_t span = kFp8 ? w.block_cols : w.group, steps = K / 32, per_group = span / 32;
  const int64_t groups = (K + span - 1) / span;
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
  const int64_t row_bytes = kFp8 ? K : K / 2, ra = n0 + g < N ? n0 + g : n0, rb = n0 + g + 8 < N ? n0 + g + 8 : n0;
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  const uint8_t* ca = codes + ra * row_bytes + (kFp8 ? 8 : 4) * c;
  const uint8_t* cb = codes + rb * row_bytes + (kFp8 ? 8 : 4) * c;
  // The rows' scales: INT4 bfloat16 [N][groups]; FP8 float32 [ceil(N / block_rows)][groups].
  const int64_t sa = (kFp8 ? ra / w.block_rows : ra) * groups, sb = (kFp8 ? rb / w.block_rows : rb) * groups;
  // (A local copy: the grouped kernel's w is its expert's entry of a table in global memory,
  // which the conditional loads below would read again every time.)
  const void* const scales = w.scales;
  // The warp's steps [s_begin, s_end), in a ring of kAhead steps loaded ahead in registers: a
  // step's codes, its group's two scales and whether it ends its group. Decode's weight rows are
  // read once, so the loads in flight set the bandwidth: kAhead steps a lane (INT4: 64 bytes,
  // FP8: 128) where one step left each lane a single 8- or 16-byte load per MMA step.
  const int64_t s_begin = gb * per_group, s_end = ge * per_group < steps ? ge * per_group : steps;
  using Codes = typename std::conditional<kFp8, uint2, uint32_t>::type;
  Codes ring_a[kAhead], ring_b[kAhead];
  float ring_sa[kAhead], ring_sb[kAhead];
  bool ring_last[kAhead];
  // The load cursor: its step, its group and where that group ends.
  int64_t ls = s_begin, lg = gb, lg_end = (gb + 1) * per_group < steps ? (gb + 1) * per_group : steps;
  const auto load = [&](int u) {
    if constexpr (kFp8) {
      ring_a[u] = *reinterpret_cast<const uint2*>(ca + 32 * ls);
      ring_b[u] = *reinterpret_cast<const uint2*>(cb + 32 * ls);
      ring_sa[u] = static_cast<const float*>(scales)[sa + lg];
      ring_sb[u] = static_cast<const float*>(scales)[sb + lg];
    } else {
      ring_a[u] = *reinterpret_cast<const uint32_t*>(ca + 16 * ls);
      ring_b[u] = *reinterpret_cast<const uint32_t*>(cb + 16 * ls);
      ring_sa[u] = Bf16Bits(static_cast<const uint16_t*>(scales)[sa + lg]);
      ring_sb[u] = Bf16Bits(static_cast<const uint16_t*>(scales)[sb + lg]);
    }
    ring_last[u] = ls + 1 == lg_end;
    if (++ls == lg_end) {
      ++lg;
      lg_end = lg_end + per_group < steps ? lg_end + per_group : steps;
    }
  };
#pragma unroll
  for (int u = 0; u < kAhead; ++u) {
    if (ls < s_end) load(u);
  }
  float acc[kFrags][4] = {};
  float part[kFrags][4] = {};
  for (int64_t s0 = s_begin; s0 < s_end; s0 += kAhead) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t s = s0 + u;
      if (s >= s_end) break;  // uniform over the warp
      uint32_t a0[4], a1[4];
      if constexpr (kFp8) {
        const uint2 wa = ring_a[u], wb = ring_b[u];
        a0[0] = Fp8PairToBf16(wa.x);
        a0[1] = Fp8PairToBf16(wb.x);
        a0[2] = Fp8PairToBf16(wa.x >> 16);
        a0[3] = Fp8PairToBf16(wb.x >> 16);
        a1[0] = Fp8PairToBf16(wa.y);
        a1[1] = Fp8PairToBf16(wb.y);
        a1[2] = Fp8PairToBf16(wa.y >> 16);
        a1[3] = Fp8PairToBf16(wb.y >> 16);
      } else {
        const uint32_t wa = ring_a[u], wb = ring_b[u];
        a0[0] = NibblePair(wa);
        a0[1] = NibblePair(wb);
        a0[2] = NibblePair(wa >> 4);
        a0[3] = NibblePair(wb >> 4);
        a1[0] = NibblePair(wa >> 8);
        a1[1] = NibblePair(wb >> 8);
        a1[2] = NibblePair(wa >> 12);
        a1[3] = NibblePair(wb >> 12);
      }
      const float s_a = ring_sa[u], s_b = ring_sb[u];
      const bool last = ring_last[u];
      if (ls < s_end) load(u);  // the step kAhead on into the slot just read
      uint4 hi[kFrags], lo[kFrags];
#pragma unroll
      for (int j = 0; j < kFrags; ++j) {
        hi[j] = xj[j][8 * s];
        lo[j] = xj[j][8 * s + 1];
      }
#pragma unroll
      for (int j = 0; j < kFrags; ++j) {
        Mma16816(part[j], a0, hi[j].x, hi[j].y);
        Mma16816(part[j], a0, lo[j].x, lo[j].y);
        Mma16816(part[j], a1, hi[j].z, hi[j].w);
        Mma16816(part[j], a1, lo[j].z, lo[j].w);
      }
      if (last) {  // the group's sums folded in with its rows' scales
#pragma unroll
        for (int j = 0; j < kFrags; ++j) {
          acc[j][0] = fmaf(part[j][0], s_a, acc[j][0]);
          acc[j][1] = fmaf(part[j][1], s_a, acc[j][1]);
          acc[j][2] = fmaf(part[j][2], s_b, acc[j][2]);
          acc[j][3] = fmaf(part[j][3], s_b, acc[j][3]);
#pragma unroll
          for (int e = 0; e < 4; ++e) part[j][e] = 0.0f;
        }
      }
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
template <bool kFp8>
__device__ __forceinline__ void QuantMmaRun(const uint4* xp, const int32_t* x_rows, int64_t m0, int64_t m1,
                                            const WeightRef& w, int64_t N, int64_t K, int64_t n0, const MutMat& out) {
  if (m1 - m0 > 8) {
    QuantMmaTile<kFp8, 2>(xp, x_rows, m0, m1, w, N, K, n0, out);
  } else {
    QuantMmaTile<kFp8, 1>(xp, x_rows, m0, m1, w, N, K, n0, out);
  }
}

// Grid (ceil(N / 16), ceil(T / 16)): the block's weight rows and tokens. kOneFragment: T <= 8
// (decode), an instance with one fragment's registers only, so that more warps, and their loads
// ahead, fit on a multiprocessor (a token's operations are the same in either instance).
template <bool kFp8, bool kOneFragment>
__global__ void __launch_bounds__(kThreads, kOneFragment ? 4 : 1) QuantMmaKernel(const uint4* xp, WeightRef w, MutMat out) {
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int64_t m1 = m0 + kTokens < out.rows ? m0 + kTokens : out.rows;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  if constexpr (kOneFragment) {
    QuantMmaTile<kFp8, 1>(xp, nullptr, m0, m1, w, w.rows, w.cols, n0, out);
  } else {
    QuantMmaRun<kFp8>(xp, nullptr, m0, m1, w, w.rows, w.cols, n0, out);
  }
}

// Grid (ceil(N / 16), tiles): a tile's rows (one expert's) in runs of kTokens, or with
// kOneFragment (the launcher's choice where no expert can get more than 8 rows: decode batches
// of up to 8 tokens) in runs of 8 on one fragment's registers. Either instance is right for any
// tile, and a row's operations are the same in both.
template <bool kFp8, bool kOneFragment>
__global__ void __launch_bounds__(kThreads, kOneFragment ? 4 : 1)
    GroupedQuantMmaKernel(const uint4* xp, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                          TileTable tiles, MutMat out) {
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;
  const WeightRef& w = experts.weights[tiles.expert[tile]];
  const int64_t r1 = tiles.row1[tile], n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  constexpr int64_t kRun = kOneFragment ? 8 : kTokens;
  for (int64_t m0 = tiles.row0[tile]; m0 < r1; m0 += kRun) {
    const int64_t m1 = m0 + kRun < r1 ? m0 + kRun : r1;
    if constexpr (kOneFragment) {
      QuantMmaTile<kFp8, 1>(xp, x_rows, m0, m1, w, N, K, n0, out);
    } else {
      QuantMmaRun<kFp8>(xp, x_rows, m0, m1, w, N, K, n0, out);
    }
  }
}

}  // namespace llmrt::cuda::qmma

#endif  // LLMRT_KERNELS_QUANT_MMA_KERNELS_CUH_
