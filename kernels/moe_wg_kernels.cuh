// The routed experts' grouped GEMM on Hopper's warpgroup MMAs (wgmma, sm_90a), for BF16 experts
// under the activation policies that round the experts' inputs to bfloat16, and FP8 experts under
// the FP8 policy (BackendOptions::device_moe_wgmma; kernels/moe_mma_kernels.cuh is the mma.sync
// form of both). Its body,
// in a header of its own so that it compiles twice: for the device (kernels/moe.cu, with
// kernels/wgmma.cuh and kernels/async_copy.cuh) and on the host in tests/cuda_emulation/ (where
// the warpgroup MMAs are computed from the PTX ISA's descriptor, swizzle and fragment rules, and
// cp.async lands as late or as early as the PTX allows). The includer provides, in namespace
// llmrt::cuda::wg: kHaveWgmma, WgShared(), SharedAddress(p), WgFence(), WgCommit(), WgWait<N>(),
// FenceProxyAsync(), FenceOperands(r), MmaM64N128(d, a, b, accumulate) (m64n128k16, A and B
// K-major), CpAsync16(dst, src), CpAsyncCommit(), CpAsyncWaitGroup<N>().
//
// Why: the mma.sync kernel feeds each m16n8k16 from registers that ldmatrix loads from shared
// memory, so by count its 128-row tiles spend 1.5 shared-memory wavefronts per MMA and a
// prefill's experts run at shared memory's pace, not the tensor cores'. A warpgroup MMA reads
// both operands from shared memory itself, in the 128-byte swizzle, 64 rows by 128 columns by
// 16 of k an instruction.
//
// One block of two warpgroups per (column block, tile of at most kTileRows rows of one expert):
//   kTileRows 128: warpgroup w multiplies the tile's rows 64 w .. 64 w + 63 by the block's 128
//                  columns (the prefill's tiles; BF16: 32 KiB a stage, two blocks a
//                  multiprocessor);
//   kTileRows 64:  both take the tile's 64 rows, warpgroup w columns 128 w .. 128 w + 127 of the
//                  block's 256 (tiles of up to 64 rows, decode's included: a tile's weights are
//                  read once per 256 columns, with 3 stages of 32 KiB of BF16 weights in flight).
// Along k the block runs a pipeline of kStages stages of 64 columns (one 128-byte swizzled row
// per tile row and weight row), copied global -> shared by cp.async kAhead steps ahead; pieces
// past the tile's rows, N or K are stored as zeros. Per step each warpgroup whose rows hold any
// of the tile's issues 4 m64n128k16 MMAs into 64 float32 accumulators a thread and commits them
// as a group. Where two blocks share a multiprocessor (BF16, tiles of 128) it waits for them
// before the next step's barrier and the other block's MMAs fill the gap; where one block holds
// it, it leaves them in flight into the next step (wgmma.wait_group 1 after the commit: the step
// before is complete), so the tensor cores run one step's MMAs while the threads wait for the
// next step's copies, widen FP8 codes and meet at the barrier, and a stage is rewritten two steps
// after its MMAs were issued (the barrier between proves every warpgroup completed them).
// FP8 weights are staged as their codes and widened by the thread that copied them into one of
// three swizzled bfloat16 tiles in turn (two without MMAs in flight), before the step's barrier;
// the MMAs sum each column block on its own and the block's sums (complete: wait_group 0 before
// the next block's first MMAs) are folded with the scales.
//
// Numerics: every output is a float32 sum of exact products (bfloat16 times bfloat16; FP8: per
// column block, folded as the mma.sync kernel folds them), the same
// MMAs over the same steps of k whatever the tile's size, the row's place in it or the block's
// columns, so under this kernel a row's result does not depend on the rows it shares a pass with.
// The order of the float32 additions within an MMA is the hardware's (the PTX leaves it
// unspecified), so its bits may differ from the mma.sync kernel's; both are within the float32
// bound of the sum.
#ifndef LLMRT_KERNELS_MOE_WG_KERNELS_CUH_
#define LLMRT_KERNELS_MOE_WG_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/wgmma_layout.cuh"

namespace llmrt::cuda::wg::moe {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kStep = 64;      // k per pipeline step: a 128-byte row of bfloat16
constexpr int kWgCols = 128;   // a warpgroup's columns (the MMA's N)

// An instance's shape and dynamic shared memory: kStages stages of [kTileRows][64] activation
// rows (bfloat16, 128-byte swizzle) then the step's weight rows: BF16, [kCols][64] in the
// swizzle; FP8, [kCols][64] codes as stored (64-byte rows), followed after the stages by
// kWideTiles [kCols][64] bfloat16 tiles in the swizzle taken in turn, each step's codes widened
// into one. Every part is a multiple of 1024 bytes, so each starts a swizzle pattern.
template <int kTileRows, bool kFp8>
struct WgShape {
  static_assert(kTileRows == 64 || kTileRows == 128, "tiles of 64 or 128 rows");
  static constexpr int kWgM = kTileRows / 64;         // warpgroups along the rows
  static constexpr int kWgN = 2 / kWgM;               // along the columns
  static constexpr int kCols = kWgCols * kWgN;        // a block's columns
  // Blocks a multiprocessor holds: FP8's block sums double the accumulators.
  static constexpr int kMinBlocks = kTileRows == 128 && !kFp8 ? 2 : 1;
  // MMA groups a warpgroup leaves in flight into the next step: 1 where one block holds the
  // multiprocessor (its MMAs then run while the threads wait for the next step's copies, widen
  // its codes and meet at its barrier), 0 where two blocks take turns on the tensor cores.
  static constexpr int kInFlight = kMinBlocks == 1 ? 1 : 0;
  static constexpr int kStages = kInFlight == 1 ? 5 : 3;
  // Steps the copies run ahead: a stage is rewritten once every warpgroup's MMAs on it completed.
  static constexpr int kAhead = kStages - 1 - kInFlight;
  static constexpr int kXBytes = kTileRows * 128;
  static constexpr int kWRow = kFp8 ? 64 : 128;       // a staged weight row's bytes
  static constexpr int kStageBytes = kXBytes + kCols * kWRow;
  static constexpr int kWideBytes = kFp8 ? kCols * 128 : 0;
  static constexpr int kWideTiles = 2 + kInFlight;    // FP8: widened tiles in turn
  static constexpr int kBytes = kStages * kStageBytes + (kFp8 ? kWideTiles * kWideBytes : 0);
  static constexpr int kXLoads = kTileRows * 8 / kThreads;         // 16-byte pieces a thread copies a step
  static constexpr int kWLoads = kCols * (kWRow / 16) / kThreads;
  static_assert(kBytes <= 227 * 1024, "a block's shared memory on a device of compute capability 9.0");
  static_assert(kStageBytes % 1024 == 0 && kXBytes % 1024 == 0, "parts start swizzle patterns");
};

// The launch's dynamic shared memory bytes for a table of tiles of tile_rows (at most 64: the
// 64-row instance), 0 where no instance takes it.
constexpr int64_t WgSharedBytes(int64_t tile_rows, bool fp8) {
  if (fp8) {
    return tile_rows == 32 || tile_rows == 64 ? WgShape<64, true>::kBytes
           : tile_rows == 128                 ? WgShape<128, true>::kBytes
                                              : 0;
  }
  return tile_rows == 32 || tile_rows == 64 ? WgShape<64, false>::kBytes
         : tile_rows == 128                 ? WgShape<128, false>::kBytes
                                            : 0;
}
// Its block's columns.
constexpr int64_t WgBlockCols(int64_t tile_rows) {
  return tile_rows == 128 ? WgShape<128, false>::kCols : WgShape<64, false>::kCols;
}

// Rows [r0, r1) of tile `tile` (at most kTileRows; x row of output row r: x_rows ? x_rows[r] : r)
// times the weight of its expert, columns [n0, n0 + kCols); x: bfloat16 codes, rows of ldx (a
// multiple of 8, 16-byte aligned). kFp8 false: BF16 weights ([N, K], rows 16-byte aligned, K a
// multiple of 8), x the rounded activations. kFp8 true (the FP8 policy): FP8 block-scaled weights
// (K a multiple of 16, rows 16-byte aligned, block_cols a multiple of 64), x e4m3 values with a
// scale per row and column block (act); each column block's products are summed by the MMAs on
// their own (the codes of both are exact in bfloat16) and folded in as the mma.sync kernel and
// the GEMV do: acc = fma(block sum, s(n, b) * sa(row, b), acc). Launched with
// WgShape<kTileRows, kFp8>::kBytes of dynamic shared memory. Where the sm_90a instructions are
// missing (or the shared memory is not 1024-byte aligned) the block raises kErrKernel in *err
// and writes NaN to its outputs instead of computing.
template <int kTileRows, bool kFp8>
__global__ void __launch_bounds__(kThreads, (WgShape<kTileRows, kFp8>::kMinBlocks))
    GroupedWgKernel(const uint16_t* x, int64_t ldx, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                    TileTable tiles, MutMat out, ActScales act, int32_t* err) {
  using S = WgShape<kTileRows, kFp8>;
  uint8_t* const smem = WgShared();
  const uint32_t base = SharedAddress(smem);
  const int64_t tile = blockIdx.y;
  if (tile >= tiles.count[0]) return;
  const int32_t e = tiles.expert[tile];
  const WeightRef& wr = experts.weights[e];
  const uint8_t* const w = static_cast<const uint8_t*>(wr.data);
  const int64_t w_ld = kFp8 ? K : 2 * K;  // a weight row's bytes
  const int64_t r0 = tiles.row0[tile];
  const int rows = static_cast<int>(tiles.row1[tile] - r0);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * S::kCols;
  const int tid = static_cast<int>(threadIdx.x), wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  // This warpgroup's rows [wr0, wr0 + 64) and columns [wc0, wc0 + 128) of the block's.
  const int wr0 = (wgi % S::kWgM) * 64, wc0 = (wgi / S::kWgM) * kWgCols;

  if (!kHaveWgmma || (base & 1023u) != 0) {
    if (tid == 0) RaiseError(err, kErrKernel);
    for (int i = tid; i < rows * S::kCols; i += kThreads) {
      const int64_t n = n0 + i % S::kCols;
      if (n < N) out.data[(r0 + i / S::kCols) * out.ld + n] = NAN;
    }
    return;
  }

  // This thread's copies a step: 16-byte piece kp (columns 8 kp ..) of tile rows (tid >> 3) +
  // 32 i, and of weight rows: BF16, the same piece of rows (tid >> 3) + 32 i; FP8, piece
  // wq = tid & 3 (codes 16 wq ..) of rows (tid >> 2) + 64 i. Rows 32 apart share their place in
  // the swizzle's group of 8, so every piece lands at the same offset within its row.
  const int kp = tid & 7, row_of = tid >> 3;
  const uint32_t piece_at = PieceOffset(row_of, kp) - static_cast<uint32_t>(row_of * 128);
  const int w_piece = kFp8 ? tid & 3 : kp, w_row = kFp8 ? tid >> 2 : row_of, w_rows_apart = kFp8 ? 64 : 32;
  const uint32_t w_at = kFp8 ? 16u * static_cast<uint32_t>(w_piece) : piece_at;
  int32_t xr[S::kXLoads];  // x's row of each piece, -1 past the tile's rows
#pragma unroll
  for (int i = 0; i < S::kXLoads; ++i) {
    const int r = row_of + 32 * i;
    xr[i] = -1;
    if (r < rows) {
      const int64_t m = r0 + r;
      xr[i] = static_cast<int32_t>(x_rows != nullptr ? x_rows[m] : m);
    }
  }
  // Step `step` into stage `stage` (free: every warpgroup has waited for its MMAs on it).
  const auto issue = [&](int64_t step, int stage) {
    const int64_t k = step * kStep + 8 * kp;
    uint8_t* xs = smem + stage * S::kStageBytes;
    uint8_t* ws = xs + S::kXBytes;
#pragma unroll
    for (int i = 0; i < S::kXLoads; ++i) {
      uint8_t* dst = xs + (row_of + 32 * i) * 128 + piece_at;
      if (xr[i] >= 0 && k < K) {
        CpAsync16(dst, x + static_cast<int64_t>(xr[i]) * ldx + k);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    const int64_t wk = step * kStep + (kFp8 ? 16 : 8) * w_piece;
#pragma unroll
    for (int i = 0; i < S::kWLoads; ++i) {
      const int n = w_row + w_rows_apart * i;
      uint8_t* dst = ws + n * S::kWRow + w_at;
      if (n0 + n < N && wk < K) {
        CpAsync16(dst, w + (n0 + n) * w_ld + (kFp8 ? wk : 2 * wk));
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // FP8: stage `stage`'s codes that this thread copied (landed: its own wait) widened to their
  // exact bfloat16 values in wide tile `which`: 16 codes, two pieces of the swizzled row.
  const auto widen = [&](int stage, int which) {
    const uint8_t* ws = smem + stage * S::kStageBytes + S::kXBytes;
    uint8_t* wide = smem + S::kStages * S::kStageBytes + which * S::kWideBytes;
#pragma unroll
    for (int i = 0; i < S::kWLoads; ++i) {
      const int n = w_row + w_rows_apart * i;
      const uint4 v = *reinterpret_cast<const uint4*>(ws + n * S::kWRow + w_at);
      *reinterpret_cast<uint4*>(wide + PieceOffset(n, 2 * w_piece)) =
          make_uint4(Fp8PairToBf16(v.x), Fp8PairToBf16(v.x >> 16), Fp8PairToBf16(v.y), Fp8PairToBf16(v.y >> 16));
      *reinterpret_cast<uint4*>(wide + PieceOffset(n, 2 * w_piece + 1)) =
          make_uint4(Fp8PairToBf16(v.z), Fp8PairToBf16(v.z >> 16), Fp8PairToBf16(v.w), Fp8PairToBf16(v.w >> 16));
    }
  };

  float acc[64];  // rows wr0 + 16 warp + g (+ 8), columns wc0 + 8 (i / 4) + 2 c + (i % 2)
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  float part[kFp8 ? 64 : 1];  // FP8: the current column block's sums (the MMAs' accumulators)
#pragma unroll
  for (int i = 0; i < (kFp8 ? 64 : 1); ++i) part[i] = 0.0f;
  const int64_t block_cols = kFp8 ? wr.block_cols : K;
  // FP8: column block kb's sums (complete) folded with the weight's and the rows' scales.
  const int64_t nbc = kFp8 ? (K + block_cols - 1) / block_cols : 1;
  const auto fold = [&](int64_t kb) {
    const float* wsc = static_cast<const float*>(wr.scales) + kb;
    float sa[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wr0 + 16 * warp + g + 8 * h;
      sa[h] = 0.0f;
      if (r < rows) {
        const int64_t m = r0 + r;
        sa[h] = act.data[kb * act.ld + (x_rows != nullptr ? x_rows[m] : m)];
      }
    }
    // acc[4 j + 2 h + q]: column n0 + wc0 + 2 c + 8 j + q, row half h.
    const int64_t first = n0 + wc0 + 2 * c;
    ScaleRowWalk walk(first, wr.block_rows);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float sw = first + 8 * j + q < N ? wsc[walk.RowOf(q) * nbc] : 0.0f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 4 * j + 2 * h + q;
          acc[i] = fmaf(part[i], sw * sa[h], acc[i]);
        }
      }
      walk.Step8();
    }
  };
  const bool live = rows > wr0;  // the same for the warpgroup's threads
  const int64_t steps = (K + kStep - 1) / kStep;
  // FP8: the column block of the current step and the step's columns into it (kept as counters:
  // no division, and no branch between the fence and the MMAs, where ptxas would have to wait
  // for the MMAs in flight).
  int64_t kb = 0, in_block = 0;
#pragma unroll
  for (int st = 0; st < S::kAhead; ++st) {
    if (st < steps) issue(st, st);
    CpAsyncCommit();
  }
  for (int64_t step = 0; step < steps; ++step) {
    const int stage = static_cast<int>(step % S::kStages);
    const int wide = static_cast<int>(step % S::kWideTiles);
    CpAsyncWaitGroup<S::kAhead - 1>();  // this thread's copies of `step` have landed
    // FP8: its codes widened into wide tile `wide`, last read by the MMAs of step - kWideTiles,
    // which every warpgroup completed before it met the previous barrier.
    if constexpr (kFp8) widen(stage, wide);
    FenceProxyAsync();  // its copies, zero pieces and widened codes, for the MMAs
    // Everyone's; every warpgroup has completed its MMAs of step - 1 - kInFlight, whose stage the
    // copies below rewrite.
    __syncthreads();
    if (step + S::kAhead < steps) issue(step + S::kAhead, static_cast<int>((step + S::kAhead) % S::kStages));
    CpAsyncCommit();  // (an empty group past the last step keeps the count of groups in flight)
    if (live) {
      const uint32_t xs = base + static_cast<uint32_t>(stage * S::kStageBytes);
      const uint32_t wt = kFp8 ? base + static_cast<uint32_t>(S::kStages * S::kStageBytes + wide * S::kWideBytes)
                               : xs + static_cast<uint32_t>(S::kXBytes);
      // (A k16 step's descriptors are the first's plus 32 bytes in 16-byte units: shared
      // addresses stay below 2^18, so the start field does not carry.)
      const uint64_t da = Descriptor(xs + static_cast<uint32_t>(wr0 * 128), 16, 1024);
      const uint64_t db = Descriptor(wt + static_cast<uint32_t>(wc0 * 128), 16, 1024);
      if constexpr (kFp8) {
        const int starts_block = in_block == 0;  // (block_cols: whole steps, as the launcher requires)
        // The previous step ended a column block: its sums complete, then folded, before this
        // step's MMAs start the next block's afresh (accumulate 0).
        if (S::kInFlight > 0 && starts_block && step > 0) {
          WgWait<0>();
          FenceOperands(part);
          fold(kb - 1);
        }
        FenceOperands(part);
        WgFence();
#pragma unroll
        for (int j = 0; j < kStep / 16; ++j) MmaM64N128(part, da + 2 * j, db + 2 * j, !starts_block || j > 0);
        WgCommit();
        WgWait<S::kInFlight>();
        FenceOperands(part);
        in_block += kStep;
        if (S::kInFlight == 0 && (in_block >= block_cols || step + 1 == steps)) fold(kb);
        if (in_block >= block_cols) {
          in_block = 0;
          ++kb;
        }
      } else {
        FenceOperands(acc);
        WgFence();
#pragma unroll
        for (int j = 0; j < kStep / 16; ++j) MmaM64N128(acc, da + 2 * j, db + 2 * j, step > 0 || j > 0);
        WgCommit();
        WgWait<S::kInFlight>();
        FenceOperands(acc);
      }
    }
  }
  CpAsyncWaitGroup<0>();  // (only empty groups remain)
  if constexpr (S::kInFlight > 0) {
    WgWait<0>();  // the last step's MMAs (none for a warpgroup without rows: nothing to wait for)
    if constexpr (kFp8) {
      FenceOperands(part);
      if (live && steps > 0) fold((K - 1) / block_cols);
    } else {
      FenceOperands(acc);
    }
  }

  if (!live) return;
#pragma unroll
  for (int i = 0; i < 64; i += 2) {
    const int r = wr0 + 16 * warp + g + 8 * ((i >> 1) & 1);
    if (r >= rows) continue;
    const int64_t n = n0 + wc0 + 8 * (i >> 2) + 2 * c;
    float* dst = out.data + (r0 + r) * out.ld;
    if (n < N) dst[n] = acc[i];
    if (n + 1 < N) dst[n + 1] = acc[i + 1];
  }
}

}  // namespace llmrt::cuda::wg::moe

#endif  // LLMRT_KERNELS_MOE_WG_KERNELS_CUH_
