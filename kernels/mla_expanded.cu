// MLA in expanded form for passes of many tokens a sequence (kernels/kernels.h; the bodies are
// in mla_expanded_kernel.cuh).
#include <cstdint>

#include "kernels/async_copy.cuh"
#include "kernels/mma.cuh"

namespace llmrt::cuda::xp {
using cuda::CpAsync16;
using cuda::CpAsyncWaitAll;
using cuda::LdMatrixTrans2;
using cuda::Mma16816;
}  // namespace llmrt::cuda::xp

#include "kernels/mla_expanded_kernel.cuh"

namespace llmrt::cuda {
namespace {

template <int kQk, int kDv, bool kQReg, int kWarps>
cudaError_t Launch(const MlaExpandedArgs& a, cudaStream_t s) {
  constexpr int64_t rows = xp::kRowsOf<kQReg, kWarps>, bytes = xp::SharedBytes<kQk, kDv, kQReg, kWarps>();
  const int64_t tiles = (a.batch.num_tokens + rows - 1) / rows + a.num_seqs;  // bounds the tiles of every sequence
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(a.heads));
  auto kernel = xp::ExpandedAttentionKernel<kQk, kDv, kQReg, kWarps>;
  if (const cudaError_t e = AllowDynamicShared(kernel, bytes, a.max_shared_bytes); e != cudaSuccess) return e;
  kernel<<<grid, 32 * kWarps, bytes, s>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool PlanMlaExpanded(int64_t nope, int64_t rope, int64_t v, MlaExpandedPlan* plan) {
  return xp::PlanOf(nope, rope, v, plan);
}

cudaError_t LaunchMlaGatherLatent(KvRef kv, int64_t layer, BatchRef batch, int64_t num_seqs, int64_t kv_lora,
                                  int64_t rope, int64_t ctx_stride, uint16_t* latent, uint16_t* rope_keys, int32_t* err,
                                  cudaStream_t s, int64_t min_seq_tokens, int64_t gathered) {
  const int64_t rows = (gathered < 0 ? num_seqs : gathered) * ctx_stride;
  if (rows <= 0) return cudaSuccess;
  if (batch.seq_first_token == nullptr) return cudaErrorInvalidValue;
  xp::GatherLatentKernel<<<BlocksFor(rows, 8), 256, 0, s>>>(kv, layer, batch, num_seqs, kv_lora, rope, ctx_stride,
                                                            latent, rope_keys, err, min_seq_tokens, gathered);
  return cudaGetLastError();
}

cudaError_t LaunchMlaExpandedAttention(const MlaExpandedArgs& a, cudaStream_t s) {
  if (a.batch.num_tokens <= 0 || a.heads <= 0) return cudaSuccess;
  if (a.batch.seq_first_token == nullptr || a.kvx_ld % 8 != 0 || a.group < 1 || a.k_head_step < 0 ||
      a.v_off < 0 || a.v_head_step < 0 || a.k_head_step % 8 != 0 || a.v_off % 8 != 0 || a.v_head_step % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  cudaError_t e = cudaErrorInvalidValue;
  xp::VisitInstance(a.nope, a.rope, a.v, [&](auto in) {
    using I = decltype(in);
    e = Launch<I::kQk, I::kDv, I::kQReg, I::kWarps>(a, s);
  });
  return e;
}

}  // namespace llmrt::cuda
