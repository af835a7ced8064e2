// Attention on the tensor cores, FlashMLA's design in mma.sync form: one block per (token, tile of
// up to 16 heads sharing a K/V row region, split of the positions), so an MLA layer reads each
// latent row once per 16 heads instead of once per head; with 512 value columns (MLA's latent),
// a block of 8 warps takes two tiles of the same rows (TcPlan::tiles), and each row is read once
// per 32 heads (Kimi K2's 64 heads: twice, not four times, from L2). Per chunk of 32 positions:
//   load   all 32 rows in flight at once (cp.async, where offsets allow): BF16 rows straight
//          into a shared K tile (and a V tile unless the values are the keys' first columns, as
//          MLA's latent is), FP8 rows whole into a staging area, whose codes each warp then
//          decodes (8 rows each) to their exact bfloat16 values (flat rows' layer scale and
//          tiled rows' tile scales are applied after the products); missing rows zero;
//   scores each warp multiplies the 16 query rows by its 8 positions (m16n8k16, float32
//          accumulation; tiled rows: each 16-column step times its tile's scale), scales, takes
//          the running maximum across warps (shared memory);
//   values the probabilities go to shared memory and every warp multiplies them (times the rows'
//          scales for its value tile) by its quarter of the value columns, rescaling its
//          accumulators as the maximum moves (FlashAttention's online softmax).
// The query and the probabilities are carried as `terms` bfloat16 parts (x = p1 + p2 + residual,
// |residual| <= 2^-16 |x| for two parts), so each product is exact to 16 significant bits; keys
// and values are exact (BF16 rows, or e4m3 codes, which bfloat16 holds exactly). Splits write
// (max, sum, unnormalized output) per head as the scalar kernel does, and share its combine.
#include <cstdint>

#include "kernels/async_copy.cuh"
#include "kernels/attention_tc.h"
#include "kernels/mma.cuh"

namespace llmrt::cuda::tc {

using cuda::CpAsync16;
using cuda::CpAsyncWaitAll;
using cuda::LdMatrix2;
using cuda::LdMatrix4;
using cuda::LdMatrixTrans2;
using cuda::Mma16816;

}  // namespace llmrt::cuda::tc

#include "kernels/attention_tc_kernel.cuh"

namespace llmrt::cuda {
namespace {

template <int kDv, int kTerms, int kTiles>
cudaError_t Launch(const AttentionArgs& a, const TcPlan& pl, int32_t* err, cudaStream_t s) {
  auto kernel = pl.qreg ? tc::TcAttentionKernel<kDv, kTerms, true, kTiles> : tc::TcAttentionKernel<kDv, kTerms, false, kTiles>;
  // (The blocks the plan counted on, TcPlan::blocks_per_sm, fit on a multiprocessor.)
  if (const cudaError_t e = AllowLargeShared(kernel, pl.bytes, a.max_shared_bytes); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(GridTokens(a) * pl.head_blocks), static_cast<unsigned>(a.splits));
  kernel<<<grid, tc::kThreads * kTiles, static_cast<size_t>(pl.bytes), s>>>(a, pl, err);
  return cudaGetLastError();
}

template <int kTerms>
cudaError_t LaunchTerms(const AttentionArgs& a, const TcPlan& pl, int32_t* err, cudaStream_t s) {
  switch (pl.dv_tile) {
    case 32: return Launch<32, kTerms, 1>(a, pl, err, s);
    case 64: return Launch<64, kTerms, 1>(a, pl, err, s);
    case 128: return Launch<128, kTerms, 1>(a, pl, err, s);
    case 256: return Launch<256, kTerms, 1>(a, pl, err, s);
    case 512: return pl.tiles == 2 ? Launch<512, kTerms, 2>(a, pl, err, s) : Launch<512, kTerms, 1>(a, pl, err, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchTensorCoreAttention(const AttentionArgs& a, const TcPlan& pl, int32_t* err, cudaStream_t s) {
  return pl.terms == 1 ? LaunchTerms<1>(a, pl, err, s) : LaunchTerms<2>(a, pl, err, s);
}

}  // namespace llmrt::cuda
