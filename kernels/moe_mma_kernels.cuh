// The routed experts' grouped GEMM on the tensor cores, for the activation policies that round the
// experts' inputs to bfloat16 (LLM_ACTIVATIONS_BF16, and FP8 with BF16 experts) and for FP8
// experts under the FP8 policy (e4m3 inputs; the codes are exact in bfloat16): its body, in a
// header of its own so that it compiles twice, for the device (kernels/moe.cu, with
// kernels/mma.cuh and kernels/async_copy.cuh) and on the host in tests/cuda_emulation/ (with the
// MMA and ldmatrix computed from the PTX ISA's fragment tables, and cp.async landing as late or as
// early as the PTX allows). The includer declares, in namespace llmrt::cuda::gmm,
//   void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
//       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 accumulating into d;
//   void LdMatrix4(const uint16_t* row, uint32_t (&r)[4])  ldmatrix .x4, not transposed;
//   void CpAsync16(void* shared_dst, const void* global_src), CpAsyncCommit(),
//   template <int N> void CpAsyncWaitGroup()  cp.async.cg of 16 bytes, commit_group, wait_group N.
//
// One block per (128 output columns, tile of at most kTileRows rows of one expert: 32, 64 or 128,
// chosen per call by the host from the rows an expert gets on average, so that a prefill chunk
// reads each expert's weights once rather than once per 32 rows). Along k the block runs a
// pipeline of kStages stages of 32 columns in dynamic shared memory: the tile's activation rows
// (bfloat16 codes, made once per input) and the expert's 128 weight rows (bfloat16, or FP8 codes
// as they are stored) are copied global -> shared by cp.async, kStages - 1 steps ahead of the
// step being multiplied, so that a block keeps 3 steps of weights (24 KiB of BF16) in flight
// and decode's few rows read the experts at the memory's pace; one barrier a step (two for FP8,
// whose step is first widened to bfloat16 in a shared tile of its own). Each of 8 warps
// multiplies its rows by its columns (32 x 16 for tiles of 32 rows, 32 x 32 for 64, 64 x 32 for
// 128: MMAs of m16n8k16 per 16 of k, fragments loaded by ldmatrix, none for a warp's m16 tiles
// past the tile's rows), accumulating in float32. Each output is a float32 sum of exact products,
// as the CPU's BF16 policy computes it, in the tensor cores' order (the same MMAs over the same
// steps of k whatever the tile's size and the row's place in it); a row's result depends on its
// activation row and the weights alone, not on the tile it shares.
#ifndef LLMRT_KERNELS_MOE_MMA_KERNELS_CUH_
#define LLMRT_KERNELS_MOE_MMA_KERNELS_CUH_

#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::gmm {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kCols = 128;          // output columns of a block
constexpr int kStep = 32;           // k per pipeline step: two k16 MMA steps
constexpr int kStages = 4;          // steps staged at once: kStages - 1 in flight while one is multiplied
constexpr int kStride = kStep + 8;  // bfloat16 row stride of a staged step: conflict-free ldmatrix rows
constexpr int kFp8Stride = kStep;   // byte row stride of a staged FP8 step (16-byte pieces, unpadded)
static_assert(kCols * kStep / 8 == 2 * kThreads, "a thread copies 2 pieces of BF16 weights a step");
static_assert(kStep / 8 == 4, "a row's step is 4 pieces of 8 activations");
static_assert(kCols * kStep / 16 == kThreads, "a thread copies 1 piece of FP8 codes a step");

// The warps of a tile of kTileRows rows: kWarpsM x kWarpsN warps, each kMt m16 tiles (rows) by
// kNt n8 tiles (columns); a thread copies up to kXLoads 16-byte pieces of activations a step
// (pieces threadIdx.x, threadIdx.x + kThreads, ...: row piece / 4, columns 8 (piece % 4) ...).
template <int kTileRows>
struct TileShape {
  static_assert(kTileRows == 32 || kTileRows == 64 || kTileRows == 128, "tiles of 32, 64 or 128 rows");
  static constexpr int kWarpsM = kTileRows == 32 ? 1 : 2;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kMt = kTileRows / (16 * kWarpsM);
  static constexpr int kNt = kCols / (8 * kWarpsN);
  static_assert(kNt % 2 == 0, "B fragments are loaded two n8 tiles at a time");
  static constexpr int kXPieces = kTileRows * kStep / 8;
  static constexpr int kXLoads = (kXPieces + kThreads - 1) / kThreads;
};

// The dynamic shared memory of an instance, in bfloat16 elements: kStages stages of activation
// rows (kTileRows x kStride) and weight rows (BF16: kCols x kStride; FP8: kCols x kFp8Stride
// bytes), then for FP8 the widened step's tile (kCols x kStride). Every part starts 16-byte
// aligned.
template <bool kFp8, int kTileRows>
struct SharedLayout {
  static constexpr int kX = kTileRows * kStride;
  static constexpr int kW = kFp8 ? kCols * kFp8Stride / 2 : kCols * kStride;
  static constexpr int kStage = kX + kW;
  static constexpr int kWide = kFp8 ? kCols * kStride : 0;
  static constexpr int kBytes = 2 * (kStages * kStage + kWide);
  static_assert((2 * kX) % 16 == 0 && (2 * kW) % 16 == 0, "16-byte aligned parts");
};

// The launch's dynamic shared memory bytes (0 for an instance that does not exist).
constexpr int64_t SharedBytes(bool fp8, int64_t tile_rows) {
  if (fp8) {
    return tile_rows == 32 ? SharedLayout<true, 32>::kBytes : tile_rows == 64 ? SharedLayout<true, 64>::kBytes : 0;
  }
  return tile_rows == 32    ? SharedLayout<false, 32>::kBytes
         : tile_rows == 64  ? SharedLayout<false, 64>::kBytes
         : tile_rows == 128 ? SharedLayout<false, 128>::kBytes
                            : 0;
}

// Rows [r0, r1) of tile `tile` (at most kTileRows; x row of output row r: x_rows ? x_rows[r] : r)
// times the weight of its expert, columns [n0, n0 + 128); x: bfloat16 codes, rows of ldx (a
// multiple of 8, 16-byte aligned). kFp8 false: BF16 weights ([N, K], rows 16-byte aligned, K a
// multiple of 8), x the rounded activations. kFp8 true (the FP8 policy): FP8 block-scaled weights
// (K a multiple of 16, rows 16-byte aligned, block_cols of 32), x e4m3 values with a scale per row
// and column block (act); the codes of both are exact in bfloat16, each block of block_cols
// columns is summed on the tensor cores, and its sum is folded in as the GEMV does:
// acc = fma(block sum, s(n, b) * sa(row, b), acc). Launched with SharedBytes(kFp8, kTileRows) of
// dynamic shared memory.
template <bool kFp8, int kTileRows>
__global__ void __launch_bounds__(kThreads, 2)
    GroupedMmaKernel(const uint16_t* x, int64_t ldx, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                     TileTable tiles, MutMat out, ActScales act) {
  using S = TileShape<kTileRows>;
  using L = SharedLayout<kFp8, kTileRows>;
  constexpr int kMt = S::kMt, kNt = S::kNt;
  uint16_t* const smem = DynamicShared<uint16_t>();
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;
  const int32_t e = tiles.expert[tile];
  const WeightRef& wr = experts.weights[e];
  const int64_t r0 = tiles.row0[tile];
  const int rows = static_cast<int>(tiles.row1[tile] - r0);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  // This warp's rows [wr0, wr0 + 16 kMt) and columns [wc0, wc0 + 8 kNt) of the block's.
  const int wr0 = (warp / S::kWarpsN) * kMt * 16, wc0 = (warp % S::kWarpsN) * kNt * 8;
  const int64_t block_cols = kFp8 ? wr.block_cols : K;  // the k-span each fold covers
  // FP8: the current column block and the columns of it done (counters: no division a step),
  // and the column blocks of a weight row.
  int64_t kb = 0, in_block = 0;
  const int64_t nbc = (K + block_cols - 1) / block_cols;
  float acc[kMt][kNt][4] = {};  // [m16 tile][n8 tile][fragment]
  float part[kFp8 ? kMt : 1][kFp8 ? kNt : 1][4] = {};  // the current column block's sums (kFp8)

  // This thread's copies: pieces of 8 activations (see TileShape); BF16 weight pieces (8 values)
  // i and i + kThreads, or FP8 piece i (16 codes): row i / pieces per row, piece i % pieces per
  // row.
  int32_t xr[S::kXLoads];  // x's row of each piece, -1 past the tile's rows (32-bit: fewer registers)
#pragma unroll
  for (int i = 0; i < S::kXLoads; ++i) {
    const int piece = threadIdx.x + i * kThreads, r = piece >> 2;
    xr[i] = -1;
    if (piece < S::kXPieces && r < rows) {
      const int64_t m = r0 + r;
      xr[i] = static_cast<int32_t>(x_rows != nullptr ? x_rows[m] : m);
    }
  }
  const auto xs = [&](int stage) { return smem + stage * L::kStage; };
  const auto ws = [&](int stage) { return smem + stage * L::kStage + L::kX; };
  // Step `step` into stage `stage` (free: every warp is past its last read of it). Pieces past the
  // tile's rows, N or K are zeros, stored directly.
  const auto issue = [&](int64_t step, int stage) {
    const int64_t k0 = step * kStep;
    uint16_t* xd = xs(stage);
#pragma unroll
    for (int i = 0; i < S::kXLoads; ++i) {
      const int piece = threadIdx.x + i * kThreads;
      if (piece >= S::kXPieces) continue;
      uint16_t* dst = xd + (piece >> 2) * kStride + 8 * (piece & 3);
      const int64_t k = k0 + 8 * (piece & 3);
      if (xr[i] >= 0 && k < K) {
        CpAsync16(dst, x + static_cast<int64_t>(xr[i]) * ldx + k);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (kFp8) {
      const uint8_t* w = static_cast<const uint8_t*>(wr.data);
      const int n = threadIdx.x >> 1, p = threadIdx.x & 1;
      uint8_t* dst = reinterpret_cast<uint8_t*>(ws(stage)) + n * kFp8Stride + 16 * p;
      if (n0 + n < N && k0 + 16 * p < K) {
        CpAsync16(dst, w + (n0 + n) * K + k0 + 16 * p);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    } else {
      const uint16_t* w = static_cast<const uint16_t*>(wr.data);
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int i = threadIdx.x + q * kThreads, n = i >> 2, p = i & 3;
        uint16_t* dst = ws(stage) + n * kStride + 8 * p;
        if (n0 + n < N && k0 + 8 * p < K) {
          CpAsync16(dst, w + (n0 + n) * K + k0 + 8 * p);
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  // FP8: the landed step's codes widened to their exact bfloat16 values in the wide tile (each
  // thread its own copied piece; the hardware's e4m3x2 conversion, four instructions a pair).
  uint16_t* const wide = smem + kStages * L::kStage;
  const auto widen = [&](int stage) {
    const int n = threadIdx.x >> 1, p = threadIdx.x & 1;
    const uint4 v = *reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(ws(stage)) + n * kFp8Stride + 16 * p);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t bf[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) bf[q] = Fp8PairToBf16(words[q / 2] >> (16 * (q % 2)));
    uint4* dst = reinterpret_cast<uint4*>(wide + n * kStride + 16 * p);
    dst[0] = make_uint4(bf[0], bf[1], bf[2], bf[3]);
    dst[1] = make_uint4(bf[4], bf[5], bf[6], bf[7]);
  };
  // The warp's m16 tiles that hold rows of the tile (the same for every lane: a warp-uniform
  // branch skips the MMAs of the others).
  const int live = rows > wr0 ? (rows - wr0 + 15) / 16 : 0;
  // ldmatrix rows: lane l addresses A row (l % 16), columns 8 (l / 16) of an m16 tile (matrices
  // rows 0-7 | 8-15 by k 0-7 | 8-15: a0 .. a3), and B row (weight row) (l % 8) + 8 (l / 16),
  // columns 8 ((l / 8) % 2) of a pair of n8 tiles (b0, b1 of the first, then of the second).
  const int a_row = lane & 15, a_col = 8 * (lane >> 4);
  const int b_row = (lane & 7) + 8 * (lane >> 4), b_col = 8 * ((lane >> 3) & 1);
  const int64_t steps = (K + kStep - 1) / kStep;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < steps) issue(st, st);
    CpAsyncCommit();
  }
  for (int64_t step = 0; step < steps; ++step) {
    const int stage = static_cast<int>(step % kStages);
    CpAsyncWaitGroup<kStages - 2>();  // this thread's copies of `step` have landed
    __syncthreads();                  // everyone's, and every warp is done with step - 1's stage
    if (step + kStages - 1 < steps) issue(step + kStages - 1, static_cast<int>((step + kStages - 1) % kStages));
    CpAsyncCommit();  // (an empty group past the last step keeps the count of groups in flight)
    const uint16_t* as = xs(stage);
    const uint16_t* bs = ws(stage);
    if constexpr (kFp8) {
      widen(stage);
      __syncthreads();
      bs = wide;
    }
#pragma unroll
    for (int kk = 0; kk < kStep; kk += 16) {
      uint32_t b[kNt][2];
#pragma unroll
      for (int ni = 0; ni < kNt; ni += 2) {
        uint32_t r[4];
        LdMatrix4(bs + (wc0 + ni * 8 + b_row) * kStride + kk + b_col, r);
        b[ni][0] = r[0];
        b[ni][1] = r[1];
        b[ni + 1][0] = r[2];
        b[ni + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < kMt; ++mi) {
        if (mi >= live) break;
        uint32_t a[4];
        LdMatrix4(as + (wr0 + mi * 16 + a_row) * kStride + kk + a_col, a);
#pragma unroll
        for (int ni = 0; ni < kNt; ++ni) {
          if constexpr (kFp8) {
            Mma16816(part[mi][ni], a, b[ni][0], b[ni][1]);
          } else {
            Mma16816(acc[mi][ni], a, b[ni][0], b[ni][1]);
          }
        }
      }
    }
    if constexpr (kFp8) {
      in_block += kStep;
      if (in_block >= block_cols || step + 1 == steps) {  // (block_cols: whole steps, as the launcher requires)
        // Fold the column block's sums with the weight's and the rows' scales.
        const float* wsc = static_cast<const float*>(wr.scales) + kb;
        float sa[kMt][2];
#pragma unroll
        for (int mi = 0; mi < kMt; ++mi) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = wr0 + mi * 16 + g + 8 * h;
            sa[mi][h] = 0.0f;
            if (r < rows) {
              const int64_t m = r0 + r;
              sa[mi][h] = act.data[kb * act.ld + (x_rows != nullptr ? x_rows[m] : m)];
            }
          }
        }
        // Column n0 + wc0 + 2 c + 8 ni + q of fragment element 2 h + q.
        const int64_t first = n0 + wc0 + 2 * c;
        ScaleRowWalk walk(first, wr.block_rows);
#pragma unroll
        for (int ni = 0; ni < kNt; ++ni) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const float sw = first + 8 * ni + q < N ? wsc[walk.RowOf(q) * nbc] : 0.0f;
#pragma unroll
            for (int mi = 0; mi < kMt; ++mi) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                acc[mi][ni][2 * h + q] = fmaf(part[mi][ni][2 * h + q], sw * sa[mi][h], acc[mi][ni][2 * h + q]);
                part[mi][ni][2 * h + q] = 0.0f;
              }
            }
          }
          walk.Step8();
        }
        in_block = 0;
        ++kb;
      }
    }
  }
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNt; ++ni) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wr0 + mi * 16 + g + 8 * h;
        if (r >= rows) continue;
        const int64_t n = n0 + wc0 + ni * 8 + 2 * c;
        float* dst = out.data + (r0 + r) * out.ld;
        if (n < N) dst[n] = acc[mi][ni][2 * h];
        if (n + 1 < N) dst[n + 1] = acc[mi][ni][2 * h + 1];
      }
    }
  }
}

}  // namespace llmrt::cuda::gmm

#endif  // LLMRT_KERNELS_MOE_MMA_KERNELS_CUH_
