// The dequantizing GEMV's bodies (kernels/quant_matmul.cu describes the design and launches
// them), in a header of their own so that they compile twice: for the device, and on the host
// in tests/cuda_emulation/ (see attention_tc_kernel.cuh), where every CI machine runs them.
#ifndef LLMRT_KERNELS_QUANT_MATMUL_KERNELS_CUH_
#define LLMRT_KERNELS_QUANT_MATMUL_KERNELS_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/common.cuh"

namespace llmrt::cuda::qmm {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kMaxRows = 8;  // activation rows per block

// Columns per lane per k-step: one 16-byte load of codes (INT4: 32 columns, FP8: 16), or for dense
// rows 16 columns in two (BF16) or four (F32) 16-byte loads. kBits 16 and 32 are BF16 and F32.
// A warp computes kOut output columns (weight rows), so that each lane has four 16-byte loads
// of one k-step in flight and each activation value it loads feeds kOut rows.
template <int kBits>
struct Step {
  static constexpr int kCols = kBits == 4 ? 32 : 16;
  static constexpr int kLoads = kCols * kBits / 128;  // 16-byte loads per lane and weight row
  static constexpr int kOut = 4 / kLoads;
  static constexpr int kVec = kCols / 4;  // float4 of activations per lane
  static constexpr int kChunk = 32 * kCols;
  // Staged activations (several rows): lane l's j-th float4 sits at slot (j + l / kSwizzle) mod
  // kVec of its run, so that the 8 lanes of a quarter-warp read 8 distinct 16-byte bank groups.
  static constexpr int kSwizzle = 8 / kVec;
  static __device__ __forceinline__ int Slot(int lane, int j) { return lane * kVec + (j + lane / kSwizzle) % kVec; }
};

// Whether the one-row instance may take x (its rows 16-byte aligned: float4 loads).
inline bool OneRowApplies(const ConstMat& x) {
  return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.ld % 4 == 0;
}

// Dynamic shared memory of a block of the several-row instance holding `rows` activation rows
// (at most kMaxRows): one k-step chunk of each, as float32. The one-row instance takes none.
inline constexpr size_t SharedBytes(int bits, int64_t rows) {
  return static_cast<size_t>(rows < kMaxRows ? (rows < 1 ? 1 : rows) : kMaxRows) * (bits == 4 ? 32 * 32 : 32 * 16) *
         sizeof(float);
}

// Output columns per block (host side: launch grids).
inline constexpr int OutPerBlock(int bits) { return kWarps * (bits <= 8 ? 4 : bits == 16 ? 2 : 1); }
static_assert(OutPerBlock(4) == kWarps * Step<4>::kOut && OutPerBlock(8) == kWarps * Step<8>::kOut &&
                  OutPerBlock(16) == kWarps * Step<16>::kOut && OutPerBlock(32) == kWarps * Step<32>::kOut,
              "OutPerBlock");

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// (a & mask) | bits in one logic instruction (the two constants would otherwise take two: a
// LOP3 holds one immediate).
__device__ __forceinline__ uint32_t AndOr(uint32_t a, uint32_t mask, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
  return d;
#else
  return (a & mask) | bits;
#endif
}

// INT4 columns 4j .. 4j+3 of 16 bytes of codes, column 4j + q as (nibble - 8) * 16^q: the
// nibble masked in place (bits 4q of the word, or of its upper half shifted down) under the
// exponent of 2^23 gives 2^23 + nibble * 16^q, and subtracting 2^23 + 8 * 16^q leaves the
// exact value. One logic op and one add a column, no shift per column; the activations are
// multiplied by 16^-q beforehand (ScaleInt4Activations), so each product is x * (nibble - 8)
// exactly as the plain conversion gives it.
__device__ __forceinline__ void Int4Scaled4(const uint4& c, int j, float* w) {
  uint32_t word = Word(c, j / 2);
  if (j & 1) word >>= 16;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t mask = 0xfu << (4 * q);
    w[q] = __uint_as_float(AndOr(word, mask, 0x4b000000u)) - (8388608.0f + 8.0f * static_cast<float>(1u << (4 * q)));
  }
}

// The activations of INT4 columns 4j .. 4j+3 as Int4Scaled4 wants them: column 4j + q times
// 16^-q (exact: powers of two; a float32 below 2^-114 would lose bits, no activation is).
__device__ __forceinline__ float4 ScaleInt4Activations(float4 v) {
  v.y *= 0x1p-4f;
  v.z *= 0x1p-8f;
  v.w *= 0x1p-12f;
  return v;
}

// Columns 4j .. 4j+3 of a lane's k-step as floats, exact: INT4 (Int4Scaled4: (nibble - 8) *
// 16^q), FP8 codes (hardware e4m3x2 -> f16x2, then f32), BF16 or F32 values.
template <int kBits>
__device__ __forceinline__ void Decode4(const uint4* c, int j, float* w) {
  if constexpr (kBits == 4) {
    Int4Scaled4(c[0], j, w);
  } else if constexpr (kBits == 8) {
    const uint32_t word = Word(c[0], j);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>(word >> (16 * h));
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 f = __half22float2(__half2(raw));
      w[2 * h] = f.x;
      w[2 * h + 1] = f.y;
    }
  } else if constexpr (kBits == 16) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = Word(c[j / 2], 2 * (j % 2) + h);
      w[2 * h] = __uint_as_float(word << 16);
      w[2 * h + 1] = __uint_as_float(word & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) w[q] = __uint_as_float(Word(c[j], q));
  }
}

// Where a lane finds its scales (INT4, FP8): output row n's scales start at RowScales (INT4: n
// * K / group bfloat16 values; FP8: the block row's (n / block_rows) * ceil(K / block_cols)
// floats), and the lane's columns of a k-step lie in scale column k / div (div: the group or
// block_cols). The cursor finds that column once per kernel and then advances it by whole k-steps
// (kChunk / div columns and a carry), so that the k-loop divides nothing.
template <int kBits>
__device__ __forceinline__ int64_t RowScales(const WeightRef& l, int64_t n, int64_t K) {
  if constexpr (kBits == 4) return n * (K / l.group);
  return (n / l.block_rows) * ((K + l.block_cols - 1) / l.block_cols);
}

template <int kBits>
__device__ __forceinline__ float ScaleValue(const void* scales, int64_t i) {
  if constexpr (kBits == 4) return Bf16Bits(static_cast<const uint16_t*>(scales)[i]);
  return static_cast<const float*>(scales)[i];
}

struct ScaleCursor {
  int32_t col = 0, rem = 0;  // the scale column of the k-step's first column k, and k % div
  int32_t div = 1, dq = 0, dr = 0;
  __device__ __forceinline__ void Init(int32_t k, int32_t d, int32_t chunk) {
    div = d;
    col = k / d;
    rem = k % d;
    dq = chunk / d;
    dr = chunk % d;
  }
  __device__ __forceinline__ void Advance() {
    col += dq;
    rem += dr;
    if (rem >= div) {
      rem -= div;
      ++col;
    }
  }
};

// out rows [m0, m1) (at most kRows; x row of output row m: x_rows ? x_rows[m] : m) x the block's
// kWarps * kOut columns from n_first, for one weight. A lane loads its codes a k-step ahead, so
// that their memory latency overlaps the step before. One row (kRows 1, batch-1 decode): each
// warp runs on its own (no shared memory, no barrier), a lane reading its activation values
// straight from x with float4 loads (the launcher takes this instance only where x's rows are
// 16-byte aligned; they are in L1 for the block's other warps). Several rows: the block stages
// each k-step's chunk of the rows in shared memory (one read of x per block instead of one per
// warp; any alignment), between two barriers; on an H200 staging ran T = 16 .. 256 at 8.5
// TFLOP/s and per-warp loads at 5.5. With activation scales (the FP8 policy: x holds e4m3
// values, FP8 weights only) a lane's fold multiplies its weight scale by its x row's scale of the
// column block first: acc = fma(part, s(n, b) * sa(row, b), acc); without, the factor is 1 and
// the bits are the exact path's.
template <int kBits, int kRows>
__device__ void QuantGemvTile(const ConstMat& x, const int32_t* x_rows, int64_t m0, int64_t m1, const uint8_t* codes,
                              const void* scales, const WeightRef& l, int64_t N, int64_t K, int64_t n_first,
                              const MutMat& out, const ActScales& act) {
  using S = Step<kBits>;
  constexpr int kOut = S::kOut;
  constexpr bool kScaled = kBits <= 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows = static_cast<int>(m1 - m0);
  const int64_t row_bytes = K * kBits / 8;
  float acc[kRows][kOut] = {};
  int32_t xrow[kRows];  // (int32: fewer registers; a row index of x)
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    xrow[t] = static_cast<int32_t>(t < rows ? (x_rows != nullptr ? x_rows[m0 + t] : m0 + t) : 0);
  }
  // Each output row's codes, found once: a row past N reads row N - 1 (computed, never stored),
  // so that its loads need no condition of their own.
  const uint8_t* rowp[kOut];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    const int64_t n = n_first + warp * kOut + o;
    rowp[o] = codes + (n < N ? n : N - 1) * row_bytes;
  }
  // Output row o's first scale at sbase + soff[o] (the warp's rows are consecutive: offsets of a
  // few rows of scales; rows past N as above).
  int64_t sbase = 0;
  int32_t soff[kOut] = {};
  ScaleCursor cursor;  // the scale column of the next load
  if constexpr (kScaled) {
    const int64_t n0 = n_first + warp * kOut < N ? n_first + warp * kOut : N - 1;
    sbase = RowScales<kBits>(l, n0, K);
#pragma unroll
    for (int o = 1; o < kOut; ++o) {
      const int64_t n = n_first + warp * kOut + o;
      soff[o] = static_cast<int32_t>(RowScales<kBits>(l, n < N ? n : N - 1, K) - sbase);
    }
    cursor.Init(lane * S::kCols, static_cast<int32_t>(kBits == 4 ? l.group : l.block_cols), S::kChunk);
  }
  // The lane's codes and scales of the k-step from k0 (zeros past K), and its scale column.
  const auto load = [&](int64_t k0, uint4 (*c)[S::kLoads], float* scale, int32_t* scol) {
    const int64_t kl = k0 + static_cast<int64_t>(lane) * S::kCols;
    const bool in = kl < K;
    const int64_t off = in ? kl * kBits / 8 : 0;
    *scol = cursor.col;
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const uint4* src = reinterpret_cast<const uint4*>(rowp[o] + off);
#pragma unroll
      for (int q = 0; q < S::kLoads; ++q) c[o][q] = in ? src[q] : make_uint4(0, 0, 0, 0);
      if constexpr (kScaled) {
        scale[o] = in ? ScaleValue<kBits>(scales, sbase + (soff[o] + cursor.col)) : 0.0f;
      } else {
        scale[o] = 1.0f;  // dense rows: the fold below adds the partial sum exactly
      }
    }
    if constexpr (kScaled) cursor.Advance();
  };
  uint4 c[kOut][S::kLoads];
  float scale[kOut];
  int32_t scol;
  load(0, c, scale, &scol);
  for (int64_t k0 = 0; k0 < K; k0 += S::kChunk) {
    uint4 c_next[kOut][S::kLoads];
    float scale_next[kOut];
    int32_t scol_next;
    load(k0 + S::kChunk, c_next, scale_next, &scol_next);
    float4* xs = nullptr;  // the staged chunk [rows][S::kChunk / 4] (kRows > 1)
    if constexpr (kRows > 1) {
      xs = DynamicShared<float4>();
      __syncthreads();  // the previous chunk has been read
      for (int e = threadIdx.x; e < rows * (S::kChunk / 4); e += kThreads) {
        const int r = e / (S::kChunk / 4), f = e % (S::kChunk / 4);
        // (The row from x_rows again, not xrow[r]: an index known only at run time would put the
        // xrow array in local memory for every use.)
        const float* src = x.data + (x_rows != nullptr ? x_rows[m0 + r] : m0 + r) * x.ld;
        const int64_t k = k0 + 4 * static_cast<int64_t>(f);
        float4 v;
        v.x = k < K ? src[k] : 0.0f;
        v.y = k + 1 < K ? src[k + 1] : 0.0f;
        v.z = k + 2 < K ? src[k + 2] : 0.0f;
        v.w = k + 3 < K ? src[k + 3] : 0.0f;
        if constexpr (kBits == 4) v = ScaleInt4Activations(v);
        xs[r * (S::kChunk / 4) + S::Slot(f / S::kVec, f % S::kVec)] = v;
      }
      __syncthreads();
    }
    const int64_t kl = k0 + static_cast<int64_t>(lane) * S::kCols;
    if (kl < K) {  // K is a multiple of kCols: a lane's columns are all in or all out
      float part[kRows][kOut] = {};
#pragma unroll
      for (int j = 0; j < S::kVec; ++j) {
        float w[kOut][4];
#pragma unroll
        for (int o = 0; o < kOut; ++o) Decode4<kBits>(c[o], j, w[o]);
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          if (t >= rows) break;
          float4 v;
          if constexpr (kRows > 1) {
            v = xs[t * (S::kChunk / 4) + S::Slot(lane, j)];
          } else {
            v = *reinterpret_cast<const float4*>(x.data + static_cast<int64_t>(xrow[t]) * x.ld + kl + 4 * j);
            if constexpr (kBits == 4) v = ScaleInt4Activations(v);
          }
#pragma unroll
          for (int o = 0; o < kOut; ++o) {
            float p = part[t][o];
            p = fmaf(v.x, w[o][0], p);
            p = fmaf(v.y, w[o][1], p);
            p = fmaf(v.z, w[o][2], p);
            p = fmaf(v.w, w[o][3], p);
            part[t][o] = p;
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float sa = 1.0f;
        if (kBits == 8 && act.data != nullptr && t < rows) sa = act.data[static_cast<int64_t>(scol) * act.ld + xrow[t]];
#pragma unroll
        for (int o = 0; o < kOut; ++o) acc[t][o] = fmaf(part[t][o], scale[o] * sa, acc[t][o]);
      }
    }
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
#pragma unroll
      for (int q = 0; q < S::kLoads; ++q) c[o][q] = c_next[o][q];
      scale[o] = scale_next[o];
    }
    scol = scol_next;
  }
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    if (t >= rows) break;
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const float sum = WarpSum(acc[t][o]);
      const int64_t n = n_first + warp * kOut + o;
      if (lane == 0 && n < N) out.data[(m0 + t) * out.ld + n] = sum;
    }
  }
}

// kRows: activation rows per block, kMaxRows, or 1 for a single row (batch-1 decode: registers
// for one row's sums only, so more warps fit on a multiprocessor; a row's operations are the same
// either way). The one-row instance needs x's rows 16-byte aligned (OneRowApplies).
template <int kBits, int kRows = kMaxRows>
__global__ void __launch_bounds__(kThreads, kRows == 1 ? 5 : 3) QuantGemvKernel(ConstMat x, WeightRef w, MutMat out, ActScales act) {
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t m1 = m0 + kRows < x.rows ? m0 + kRows : x.rows;
  QuantGemvTile<kBits, kRows>(x, nullptr, m0, m1, static_cast<const uint8_t*>(w.data), w.scales, w, w.rows, w.cols,
                       static_cast<int64_t>(blockIdx.x) * kWarps * Step<kBits>::kOut, out, act);
}

// One block per (column block, tile); a tile's rows (at most kGemmTileRows) in runs of kRows, or
// of x's rows where x has fewer (the launcher's shared memory holds SharedBytes(bits, x.rows): a
// tile holds more rows than x only where a token lists an expert more than once).
template <int kBits, int kRows = kMaxRows>
__global__ void __launch_bounds__(kThreads, kRows == 1 ? 5 : 3)
    GroupedQuantGemvKernel(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                           TileTable tiles, MutMat out, ActScales act) {
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;
  const int32_t e = tiles.expert[tile];
  const int64_t r0 = tiles.row0[tile], r1 = tiles.row1[tile];
  const int64_t run = kRows < x.rows ? kRows : x.rows < 1 ? 1 : x.rows;
  for (int64_t m0 = r0; m0 < r1; m0 += run) {
    const int64_t m1 = m0 + run < r1 ? m0 + run : r1;
    const WeightRef& w = experts.weights[e];
    QuantGemvTile<kBits, kRows>(x, x_rows, m0, m1, static_cast<const uint8_t*>(w.data), w.scales, w, N, K,
                         static_cast<int64_t>(blockIdx.x) * kWarps * Step<kBits>::kOut, out, act);
  }
}

}  // namespace llmrt::cuda::qmm

#endif  // LLMRT_KERNELS_QUANT_MATMUL_KERNELS_CUH_
