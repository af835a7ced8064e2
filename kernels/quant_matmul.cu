// The GEMV of quantized weights (INT4 group-scaled, FP8 block-scaled) and, in the same form, of
// dense BF16 / F32 rows (16 columns per lane step, two or four 16-byte loads, no scale): codes
// are read once per block of activation rows, dequantized in registers and multiplied with
// float32 activations in float32; nothing dequantized is ever written to memory, so a decode step
// moves only the stored bytes (INT4: half a byte per weight plus a bfloat16 scale per group).
//
// Layout. The codes stay in the checkpoint's row-major order (PrepareWeight uploads them as they
// are): a warp reads a stretch of one weight row with 16-byte loads per lane, and in that order
// the 16 bytes are 32 consecutive INT4 columns (bits 4i of each little-endian word are column i,
// so the register dequantization needs no permutation) or 16 FP8 columns. A lane's load lies
// inside one scale group (INT4: group a multiple of 32; FP8: block_cols a multiple of 16), so each
// lane sums its columns' products with the raw codes and applies the scale once. An interleaved
// repack would buy nothing here: the loads are already 16 bytes per lane and coalesced (a warp
// reads 512 contiguous bytes of a row per load).
//
// Work split: a block of 4 warps computes 16 output columns (4 per warp; BF16 8, F32 4: four
// 16-byte loads per lane and k-step either way) for up to 8 activation rows (grid.y covers more
// rows; larger T re-reads the codes per 8 rows, mostly from L2). Each lane loads its codes one
// k-step ahead. At T = 1 (a one-row instance) the warps share nothing: no shared memory, no
// barrier, each lane reading its activation values straight from x (the block's other warps find
// them in L1), so the latencies overlap across the warps of a multiprocessor instead of stalling
// a block at a barrier; with more rows the block stages each chunk of x in shared memory. On an
// H200 the BF16 form of this kernel read a [18432, 7168] weight at 77% of the device's copy
// bandwidth at T = 1 (the tiled kernel it replaced: 6%), INT4 g32 at 25% and FP8 at 40%. Every output is sum over k-steps of (lane partial * scale), then
// a warp tree sum: the same operations for a row whatever the other rows of the call, the tile it
// sits in (MoE), or how many rows the block holds, so results are batch-invariant. Prefill
// (T > 16) takes the same kernel: CUDA-core float32 FMAs, exact against the CPU; the BF16 and FP8
// activation policies run larger T on the tensor cores (cuBLASLt).
#include "kernels/mma.cuh"
#include "kernels/quant_matmul_kernels.cuh"

namespace llmrt::cuda::qmma {
using cuda::Mma16816;
}  // namespace llmrt::cuda::qmma

#include "kernels/quant_mma_kernels.cuh"

namespace llmrt::cuda {

namespace {

// x's rows as the tensor-core kernels read them (two bfloat16 parts a value, in lane order: INT4
// pairs columns 4 apart, FP8 adjacent ones).
cudaError_t PrepareActivations(ConstMat x, bool fp8, void* prepared, cudaStream_t s) {
  if (x.cols % 32 != 0 || prepared == nullptr || reinterpret_cast<uintptr_t>(prepared) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t threads = x.rows * (x.cols / 32) * 4;
  if (threads == 0) return cudaSuccess;
  uint4* out = static_cast<uint4*>(prepared);
  if (fp8) {
    qmma::QuantPrepKernel<qmma::Layout::kAdjacent><<<BlocksFor(threads, 256), 256, 0, s>>>(x, out);
  } else {
    qmma::QuantPrepKernel<qmma::Layout::kNibbles><<<BlocksFor(threads, 256), 256, 0, s>>>(x, out);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchQuantMma(ConstMat x, WeightRef w, void* prepared, MutMat out, cudaStream_t s) {
  if (x.rows == 0 || w.rows == 0) return cudaSuccess;
  if (!QuantMmaApplies(w) || x.cols != w.cols) return cudaErrorInvalidValue;
  const bool fp8 = w.type == kElemFp8E4M3;
  if (const cudaError_t e = PrepareActivations(x, fp8, prepared, s); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((w.rows + qmma::kRows - 1) / qmma::kRows),
                  static_cast<unsigned>((x.rows + qmma::kTokens - 1) / qmma::kTokens));
  const uint4* xp = static_cast<const uint4*>(prepared);
  const bool one = x.rows <= 8;  // one fragment's registers (decode batches of up to 8)
  if (fp8) {
    (one ? qmma::QuantMmaKernel<true, true> : qmma::QuantMmaKernel<true, false>)<<<grid, qmma::kThreads, 0, s>>>(
        xp, w, out);
  } else {
    (one ? qmma::QuantMmaKernel<false, true> : qmma::QuantMmaKernel<false, false>)<<<grid, qmma::kThreads, 0, s>>>(
        xp, w, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchGroupedQuantMma(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                                  TileTable tiles, void* prepared, MutMat out, cudaStream_t s, bool prepare,
                                  int64_t max_expert_rows) {
  if (tiles.max_tiles == 0 || N == 0) return cudaSuccess;
  if (tiles.tile_rows != kGemmTileRows) return cudaErrorInvalidValue;
  if ((experts.gemv_bits != 4 && experts.gemv_bits != 8) || x.cols != K || K % 32 != 0) return cudaErrorInvalidValue;
  const bool fp8 = experts.gemv_bits == 8;
  if (prepare) {
    if (const cudaError_t e = PrepareActivations(x, fp8, prepared, s); e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>((N + qmma::kRows - 1) / qmma::kRows), static_cast<unsigned>(tiles.max_tiles));
  const uint4* xp = static_cast<const uint4*>(prepared);
  const bool one = max_expert_rows >= 1 && max_expert_rows <= 8;  // one fragment's registers
  if (fp8) {
    (one ? qmma::GroupedQuantMmaKernel<true, true> : qmma::GroupedQuantMmaKernel<true, false>)<<<grid, qmma::kThreads,
                                                                                                 0, s>>>(
        xp, x_rows, experts, N, K, tiles, out);
  } else {
    (one ? qmma::GroupedQuantMmaKernel<false, true> : qmma::GroupedQuantMmaKernel<false, false>)<<<grid, qmma::kThreads,
                                                                                                   0, s>>>(
        xp, x_rows, experts, N, K, tiles, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchQuantGemv(ConstMat x, WeightRef w, MutMat out, cudaStream_t s, ActScales act) {
  if (x.rows == 0 || w.rows == 0) return cudaSuccess;
  if (act.data != nullptr && w.type != kElemFp8E4M3) return cudaErrorInvalidValue;
  const int bits = w.type == kElemInt4 ? 4 : w.type == kElemFp8E4M3 ? 8 : w.type == kElemBf16 ? 16 : 32;
  const int per_block = qmm::OutPerBlock(bits);
  const dim3 grid(static_cast<unsigned>((w.rows + per_block - 1) / per_block),
                  static_cast<unsigned>((x.rows + qmm::kMaxRows - 1) / qmm::kMaxRows));
  if (x.rows == 1 && qmm::OneRowApplies(x)) {  // the one-row instance (batch-1 decode)
    switch (w.type) {
      case kElemInt4: qmm::QuantGemvKernel<4, 1><<<grid, qmm::kThreads, 0, s>>>(x, w, out, act); break;
      case kElemFp8E4M3: qmm::QuantGemvKernel<8, 1><<<grid, qmm::kThreads, 0, s>>>(x, w, out, act); break;
      case kElemBf16: qmm::QuantGemvKernel<16, 1><<<grid, qmm::kThreads, 0, s>>>(x, w, out, act); break;
      case kElemF32: qmm::QuantGemvKernel<32, 1><<<grid, qmm::kThreads, 0, s>>>(x, w, out, act); break;
      default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  }
  const size_t smem = qmm::SharedBytes(bits, x.rows);
  switch (w.type) {
    case kElemInt4: qmm::QuantGemvKernel<4><<<grid, qmm::kThreads, smem, s>>>(x, w, out, act); break;
    case kElemFp8E4M3: qmm::QuantGemvKernel<8><<<grid, qmm::kThreads, smem, s>>>(x, w, out, act); break;
    case kElemBf16: qmm::QuantGemvKernel<16><<<grid, qmm::kThreads, smem, s>>>(x, w, out, act); break;
    case kElemF32: qmm::QuantGemvKernel<32><<<grid, qmm::kThreads, smem, s>>>(x, w, out, act); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchGroupedQuantGemv(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                                   TileTable tiles, MutMat out, cudaStream_t s, ActScales act) {
  if (tiles.max_tiles == 0 || N == 0) return cudaSuccess;
  if (tiles.tile_rows != kGemmTileRows) return cudaErrorInvalidValue;
  if (act.data != nullptr && experts.gemv_bits != 8) return cudaErrorInvalidValue;
  const int per_block = qmm::OutPerBlock(experts.gemv_bits);
  const dim3 grid(static_cast<unsigned>((N + per_block - 1) / per_block), static_cast<unsigned>(tiles.max_tiles));
  if (tiles.max_rows == 1 && qmm::OneRowApplies(x)) {  // one token: one row per tile
    switch (experts.gemv_bits) {
      case 4: qmm::GroupedQuantGemvKernel<4, 1><<<grid, qmm::kThreads, 0, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
      case 8: qmm::GroupedQuantGemvKernel<8, 1><<<grid, qmm::kThreads, 0, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
      case 16: qmm::GroupedQuantGemvKernel<16, 1><<<grid, qmm::kThreads, 0, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
      case 32: qmm::GroupedQuantGemvKernel<32, 1><<<grid, qmm::kThreads, 0, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
      default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  }
  // A tile's rows are known on the device only: room for a run of kMaxRows (at most the rows of
  // the call).
  const size_t smem = qmm::SharedBytes(experts.gemv_bits, x.rows);
  switch (experts.gemv_bits) {
    case 4: qmm::GroupedQuantGemvKernel<4><<<grid, qmm::kThreads, smem, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
    case 8: qmm::GroupedQuantGemvKernel<8><<<grid, qmm::kThreads, smem, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
    case 16: qmm::GroupedQuantGemvKernel<16><<<grid, qmm::kThreads, smem, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
    case 32: qmm::GroupedQuantGemvKernel<32><<<grid, qmm::kThreads, smem, s>>>(x, x_rows, experts, N, K, tiles, out, act); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
