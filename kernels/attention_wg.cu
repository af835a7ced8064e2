// MLA decode attention on Hopper's warpgroup MMAs (wgmma, sm_90a), FlashMLA's design: one block
// of two warpgroups per (token, 64 heads, split of the positions), so each latent row leaves
// memory once per 64 heads (Kimi K2's and GLM-5's layers: once per token), against once per 16
// or 32 heads in the mma.sync kernel (attention_tc.cu). Per chunk of 64 positions:
//   load    the next chunk's rows are copied (cp.async, 16-byte pieces) into the other of two K
//           tiles while this chunk is computed; a tile is 9 blocks of [64 positions][64 columns]
//           (the latent's 8 and the rope key's) in the 128-byte swizzle the MMAs read (flat FP8
//           rows: their codes into the other of two staging areas, decoded into one K tile
//           when their chunk comes, the layer scale applied to scores and probabilities);
//   scores  each warpgroup multiplies the 64 heads' query (bfloat16, in shared memory) by its 32
//           positions: 36 m64n32k16 MMAs, float32 accumulators in registers;
//   softmax the two warpgroups exchange their row maxima through shared memory, rescale their
//           accumulators (FlashAttention's online softmax) and write their probabilities as
//           bfloat16 into a [64 heads][64 positions] tile;
//   values  each warpgroup multiplies the probabilities by its half of the latent (the same K
//           tile read N-major): 4 m64n256k16 MMAs into 128 float32 accumulators a thread.
// Numerics: the query and the probabilities in one bfloat16 part, as AttentionKernel::
// kTensorCoreBf16 (FlashMLA's); splits write (max, sum, unnormalized output) per head and share
// the combine of the other kernels.
#include <cstdint>

#include "kernels/async_copy.cuh"
#include "kernels/attention_tc.h"
#include "kernels/wgmma.cuh"

namespace llmrt::cuda::wg {

using cuda::CpAsync16;
using cuda::CpAsyncWaitAll;

}  // namespace llmrt::cuda::wg

#include "kernels/attention_wg_kernel.cuh"

namespace llmrt::cuda {

namespace {

template <int kKb, bool kCodes>
cudaError_t Launch(const AttentionArgs& a, const WgPlan& pl, int32_t* err, cudaStream_t s) {
  auto kernel = wg::WgAttentionKernel<kKb, kCodes>;
  if (const cudaError_t e = AllowLargeShared(kernel, pl.bytes, a.max_shared_bytes); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(GridTokens(a) * pl.head_blocks), static_cast<unsigned>(a.splits));
  kernel<<<grid, wg::kThreads, static_cast<size_t>(pl.bytes), s>>>(a, pl, err);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchWgmmaAttention(const AttentionArgs& a, const WgPlan& pl, int32_t* err, cudaStream_t s) {
  switch (pl.kblocks * 2 + pl.codes) {
    case 16: return Launch<8, false>(a, pl, err, s);
    case 17: return Launch<8, true>(a, pl, err, s);
    case 18: return Launch<9, false>(a, pl, err, s);
    case 19: return Launch<9, true>(a, pl, err, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace llmrt::cuda
