// MLA in expanded form for passes of many tokens a sequence (kernels/kernels.h; the bodies are
// in mla_expanded_kernel.cuh).
#include <cstdint>

#include "kernels/async_copy.cuh"
#include "kernels/mma.cuh"

namespace llmrt::cuda::xp {
using cuda::CpAsync16;
using cuda::CpAsyncWaitAll;
using cuda::Mma16816;

__device__ __forceinline__ void LdMatrixTrans2(const uint16_t* row, uint32_t* b0, uint32_t* b1) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(*b0), "=r"(*b1) : "r"(addr));
}
}  // namespace llmrt::cuda::xp

#include "kernels/mla_expanded_kernel.cuh"

namespace llmrt::cuda {
namespace {

template <int kQk, int kDv>
cudaError_t Launch(const MlaExpandedArgs& a, cudaStream_t s) {
  const int64_t tiles = (a.batch.num_tokens + xp::kRows - 1) / xp::kRows + a.num_seqs;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(a.heads));
  constexpr int64_t bytes = xp::SharedBytes<kQk, kDv>();
  if (const cudaError_t e = AllowDynamicShared(xp::ExpandedAttentionKernel<kQk, kDv>, bytes, a.max_shared_bytes);
      e != cudaSuccess) {
    return e;
  }
  xp::ExpandedAttentionKernel<kQk, kDv><<<grid, xp::kThreads, bytes, s>>>(a);
  return cudaGetLastError();
}

template <int kQk>
cudaError_t LaunchQk(const MlaExpandedArgs& a, cudaStream_t s) {
  if (a.v <= 32) return Launch<kQk, 32>(a, s);
  if (a.v <= 64) return Launch<kQk, 64>(a, s);
  return Launch<kQk, 128>(a, s);
}

}  // namespace

cudaError_t LaunchMlaGatherLatent(KvRef kv, int64_t layer, BatchRef batch, int64_t num_seqs, int64_t kv_lora,
                                  int64_t rope, int64_t ctx_stride, uint16_t* latent, uint16_t* rope_keys, int32_t* err,
                                  cudaStream_t s) {
  const int64_t rows = num_seqs * ctx_stride;
  if (rows <= 0) return cudaSuccess;
  if (batch.seq_first_token == nullptr) return cudaErrorInvalidValue;
  xp::GatherLatentKernel<<<BlocksFor(rows, 8), 256, 0, s>>>(kv, layer, batch, num_seqs, kv_lora, rope, ctx_stride,
                                                            latent, rope_keys, err);
  return cudaGetLastError();
}

cudaError_t LaunchMlaExpandedAttention(const MlaExpandedArgs& a, cudaStream_t s) {
  if (a.batch.num_tokens <= 0 || a.heads <= 0) return cudaSuccess;
  if (!MlaExpandedApplies(a.nope, a.rope, a.v) || a.batch.seq_first_token == nullptr || a.kvx_ld % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t qk = a.nope + a.rope;
  if (qk <= 64) return LaunchQk<64>(a, s);
  if (qk <= 128) return LaunchQk<128>(a, s);
  return LaunchQk<192>(a, s);
}

}  // namespace llmrt::cuda
