// The paged KV cache on the device: row writes, calibration, exports and imports, softmax
// attention of each (token, head) over its paged context, and the DSA indexer's scores and top-k.
//
// Codecs: flat F32 / BF16 rows, flat FP8 e4m3 with the layer's scale, and tiled FP8 rows
// (segments of BF16 values or FP8 tiles with float32 scales in the row: src/quant/codecs/). Writes
// encode with the CPU codecs' exact operations (FloatToFp8 is Fp8E4M3::FromFloat bit for bit), so
// the cached bytes are the CPU's; reads decode each value as the codec's DecodeRow does (code
// times scale in float32). Under the FP8 phase policy (fresh rows) the positions a pass writes
// itself are read from its BF16 fresh rows. Tiled rows are decoded value by value through a
// segment lookup: correct for every layout, not tuned.
//
// Attention is computed in chunks of positions with a running maximum (the online softmax of
// FlashAttention): for each chunk the scores, then the rescaled accumulation of the value rows.
// The scalar kernel here runs one block per (token, head) on the CUDA cores: every value is
// rounded to float32 as the CPU does; the order of the sums differs from the CPU's (it normalizes
// the probabilities before the weighted sum), well inside the conformance tolerance
// (tests/backend/attention_scenario.h). LaunchAttention runs the tensor-core kernel
// (attention_tc.cu) instead wherever it applies and is chosen (AttentionKernel).
#include <cfloat>
#include <cmath>

#include "kernels/attention_tc.h"
#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"
#include "kernels/kv_kernels.cuh"
#include "kernels/mma.cuh"

namespace llmrt::cuda::dsa {
using cuda::LdMatrix4;
using cuda::Mma16816;
}  // namespace llmrt::cuda::dsa

#include "kernels/dsa_mma_kernels.cuh"

namespace llmrt::cuda {

// Dynamic shared memory of a kernel holding one row of `width` floats (above 48 KiB it must be
// allowed explicitly).
template <typename Kernel>
cudaError_t RowSharedMemory(Kernel kernel, int64_t width, size_t* bytes) {
  *bytes = static_cast<size_t>(width) * sizeof(float);
  return AllowDynamicShared(kernel, static_cast<int64_t>(*bytes));
}

cudaError_t LaunchKvWrite(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err, cudaStream_t s) {
  if (batch.num_tokens == 0) return cudaSuccess;
  size_t smem = 0;
  if (const cudaError_t e = RowSharedMemory(kvk::KvWriteKernel, kv.width, &smem); e != cudaSuccess) return e;
  kvk::KvWriteKernel<<<static_cast<unsigned>(batch.num_tokens), 128, smem, s>>>(kv, layer, parts, batch, err);
  return cudaGetLastError();
}

cudaError_t LaunchKvCalibrate(KvRef kv, int64_t layer, KvParts parts, cudaStream_t s) {
  kvk::KvCalibrateKernel<<<1, kvk::kCalibrateThreads, 0, s>>>(kv, layer, parts);
  return cudaGetLastError();
}

cudaError_t LaunchKvExportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, uint8_t* dst, int32_t* err,
                               cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  kvk::KvExportKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, layer, slots, dst, err);
  return cudaGetLastError();
}

cudaError_t LaunchKvImportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, const uint8_t* src,
                               KvRowRef src_row, float src_scale, bool same_codec, int32_t* err, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  size_t smem = 0;
  if (const cudaError_t e = RowSharedMemory(kvk::KvImportKernel, kv.width, &smem); e != cudaSuccess) return e;
  kvk::KvImportKernel<<<static_cast<unsigned>(n), 128, smem, s>>>(kv, layer, slots, src, src_row, src_scale, same_codec,
                                                             err);
  return cudaGetLastError();
}

namespace {

// Whether the build has the sm_90a machine code the warpgroup kernel needs (CMake's
// CMAKE_CUDA_ARCHITECTURES lists 90a; the PTX of other targets leaves the kernel empty).
#ifdef LLMRT_CUDA_SM90A
constexpr bool kWgmmaBuilt = true;
#else
constexpr bool kWgmmaBuilt = false;
#endif

bool PlanWgmma(const AttentionArgs& a, WgPlan* plan) { return kWgmmaBuilt && PlanWgmmaAttention(a, plan); }

}  // namespace

AttentionBlocks AttentionBlocksOf(const AttentionArgs& a) {
  if (WgPlan wplan; PlanWgmma(a, &wplan)) return AttentionBlocks{wplan.head_blocks, 1};
  TcPlan plan;
  if (!PlanTensorCoreAttention(a, &plan)) return AttentionBlocks{a.heads, 0};
  // The residency of the one-stage plan of one tile a block, so that the split (and with it the
  // order in which the combine adds the splits) does not depend on the load stages or the tiles a
  // block: automatic stages take two only where they keep that count, and two tiles a block
  // only where they keep as many warps; a forced choice that costs blocks leaves the split as it
  // was. Counted in tiles: a block of two tiles is two of them.
  AttentionArgs one = a;
  one.stages = 1;
  one.tiles_per_block = 1;
  TcPlan single;
  const int64_t per_sm = PlanTensorCoreAttention(one, &single) ? single.blocks_per_sm : plan.blocks_per_sm * plan.tiles;
  return AttentionBlocks{plan.head_tiles, per_sm};
}

cudaError_t LaunchAttention(const AttentionArgs& a, int32_t* err, cudaStream_t s) {
  if (!ListedRunsValid(a)) return cudaErrorInvalidValue;
  const int64_t blocks = GridTokens(a) * a.heads;
  if (blocks == 0) return cudaSuccess;
  if (a.skip_seq_tokens > 0 && (a.batch.seq_first_token == nullptr || a.num_seqs <= 0)) return cudaErrorInvalidValue;
  if (WgPlan plan; PlanWgmma(a, &plan)) {
    const cudaError_t e = LaunchWgmmaAttention(a, plan, err, s);
    if (e != cudaSuccess || a.splits == 1) return e;
    kvk::AttentionCombineKernel<<<static_cast<unsigned>(blocks), kvk::kAttnThreads, 0, s>>>(a);
    return cudaGetLastError();
  }
  if (TcPlan plan; PlanTensorCoreAttention(a, &plan)) {
    const cudaError_t e = LaunchTensorCoreAttention(a, plan, err, s);
    if (e != cudaSuccess || a.splits == 1) return e;
    kvk::AttentionCombineKernel<<<static_cast<unsigned>(blocks), kvk::kAttnThreads, 0, s>>>(a);
    return cudaGetLastError();
  }
  const size_t smem = static_cast<size_t>(a.q1_len + a.q2_len + a.dv + kvk::kChunk) * sizeof(float);
  if (const cudaError_t e = AllowDynamicShared(kvk::ScalarAttentionKernel, static_cast<int64_t>(smem), a.max_shared_bytes);
      e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.splits));
  kvk::ScalarAttentionKernel<<<grid, kvk::kAttnThreads, smem, s>>>(a, err);
  if (a.splits == 1) return cudaGetLastError();
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  kvk::AttentionCombineKernel<<<static_cast<unsigned>(blocks), kvk::kAttnThreads, 0, s>>>(a);
  return cudaGetLastError();
}

size_t DsaTopKCandidateBytes(int64_t tokens, int64_t max_ctx, int64_t top_k) {
  // Two stages where the first gives each token at least 4 blocks and the tokens' blocks alone
  // would not fill a device (at most 32 tokens).
  if (tokens < 1 || tokens > 32 || top_k < 1 || kDsaTopKChunk < 2 * top_k || max_ctx < 4 * kDsaTopKChunk) return 0;
  return static_cast<size_t>(tokens) * static_cast<size_t>(kvk::DsaCandidates(max_ctx, top_k, kDsaTopKChunk)) *
         (sizeof(uint32_t) + sizeof(int32_t));
}

cudaError_t LaunchDsaSelect(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef batch, int64_t heads,
                            int64_t head_dim, int64_t key_offset, float key_scale, int64_t top_k, float* scores,
                            int32_t* selected, int64_t selected_ld, int32_t* err, cudaStream_t s, DsaScores form,
                            void* candidates, bool* on_tensor_cores) {
  if (on_tensor_cores != nullptr) *on_tensor_cores = false;
  if (batch.num_tokens == 0) return cudaSuccess;
  if (batch.num_tokens > INT32_MAX || (batch.max_ctx + 127) / 128 > 65535) return cudaErrorInvalidValue;
  if (batch.max_ctx > top_k) {
    const auto launch_tiled = [&](auto kernel, int tile, int per) {
      const int64_t bytes = kvk::DsaTiledBytes(tile, per);
      if (AllowDynamicShared(kernel, bytes) != cudaSuccess) {
        (void)cudaGetLastError();  // the device allows less: not an error
        return false;
      }
      const dim3 grid(static_cast<unsigned>(batch.num_tokens), BlocksFor(batch.max_ctx, kvk::DsaTilePositions(tile, per)));
      kernel<<<grid, kvk::kDsaTileThreads, static_cast<size_t>(bytes), s>>>(q, w, kv, layer, batch, heads, head_dim,
                                                                            key_offset, key_scale, top_k, scores, err);
      return true;
    };
    bool launched = false;
    // The tensor cores where the heads, the head dimension and the key's groups of scales allow;
    // else the tiled kernel.
    dsa::KeyGroups groups;
    if (form == DsaScores::kTensorCores && dsa::DsaMmaTiles(heads) > 0 &&
        dsa::MakeKeyGroups(kv.row, key_offset, head_dim, &groups)) {
      const auto launch_mma = [&](auto kernel, int tiles) {
        const int64_t bytes = dsa::DsaMmaBytes(tiles, head_dim);
        if (AllowDynamicShared(kernel, bytes) != cudaSuccess) {
          (void)cudaGetLastError();  // the device allows less: not an error
          return false;
        }
        int device = 0, sms = 1;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
          (void)cudaGetLastError();
          sms = 1;
        }
        const int per = dsa::DsaMmaTilesPerBlock(batch.num_tokens, batch.max_ctx, sms);
        const dim3 grid(static_cast<unsigned>(batch.num_tokens), BlocksFor(batch.max_ctx, dsa::kMmaPositions * per));
        kernel<<<grid, dsa::kMmaThreads, static_cast<size_t>(bytes), s>>>(
            q, w, kv, layer, batch, heads, head_dim, key_offset, key_scale, top_k, groups, per, scores, err);
        return true;
      };
      switch (dsa::DsaMmaTiles(heads)) {
        case 1: launched = launch_mma(dsa::DsaScoreMmaKernel<1>, 1); break;
        case 2: launched = launch_mma(dsa::DsaScoreMmaKernel<2>, 2); break;
        default: launched = launch_mma(dsa::DsaScoreMmaKernel<4>, 4); break;
      }
      if (on_tensor_cores != nullptr) *on_tensor_cores = launched;
    }
    if (!launched && (form == DsaScores::kTiled || form == DsaScores::kTensorCores)) {
      const int tile = kvk::DsaTileHeads(heads);
      // A pass of few blocks (decode over a context of a few tiles) takes one position a thread.
      const bool few = tile > 0 && batch.num_tokens * static_cast<int64_t>(BlocksFor(
                                                          batch.max_ctx, kvk::DsaTilePositions(tile))) < kvk::kDsaFewBlocks;
      switch (tile) {
        case 16:  // 80 KiB of shared memory; else the 32-head tile's 43 KiB
          launched = few ? launch_tiled(kvk::DsaScoreTiledKernel<16, 1>, 16, 1)
                         : launch_tiled(kvk::DsaScoreTiledKernel<16>, 16, 4) ||
                               launch_tiled(kvk::DsaScoreTiledKernel<32>, 32, 2);
          break;
        case 32:
          launched = few ? launch_tiled(kvk::DsaScoreTiledKernel<32, 1>, 32, 1)
                         : launch_tiled(kvk::DsaScoreTiledKernel<32>, 32, 2);
          break;
        case 64: launched = launch_tiled(kvk::DsaScoreTiledKernel<64>, 64, 1); break;
        default: break;
      }
    }
    // The staged kernel where its shared memory fits the device (GLM-5's 32 heads of 128: 84 KiB);
    // else one thread per position reading its row from global memory.
    if (!launched && form != DsaScores::kThread) {
      const int64_t staged = kvk::DsaStagedBytes(heads, head_dim);
      if (AllowDynamicShared(kvk::DsaScoreStagedKernel, staged) == cudaSuccess) {
        const dim3 grid(static_cast<unsigned>(batch.num_tokens), BlocksFor(batch.max_ctx, kvk::kDsaPositions));
        kvk::DsaScoreStagedKernel<<<grid, kvk::kDsaPositions, static_cast<size_t>(staged), s>>>(
            q, w, kv, layer, batch, heads, head_dim, key_offset, key_scale, top_k, scores, err);
        launched = true;
      } else {
        (void)cudaGetLastError();  // the device allows less: not an error
      }
    }
    if (!launched) {
      const dim3 grid(static_cast<unsigned>(batch.num_tokens), BlocksFor(batch.max_ctx, 128));
      kvk::DsaScoreKernel<<<grid, 128, 0, s>>>(q, w, kv, layer, batch, heads, head_dim, key_offset, key_scale, top_k,
                                          scores, err);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (candidates != nullptr && DsaTopKCandidateBytes(batch.num_tokens, batch.max_ctx, top_k) > 0) {
    const int64_t ld = kvk::DsaCandidates(batch.max_ctx, top_k, kDsaTopKChunk);
    uint32_t* keys = static_cast<uint32_t*>(candidates);
    int32_t* pos = reinterpret_cast<int32_t*>(keys + batch.num_tokens * ld);
    const dim3 grid(static_cast<unsigned>(batch.num_tokens), BlocksFor(batch.max_ctx, static_cast<int>(kDsaTopKChunk)));
    kvk::DsaTopKChunkKernel<<<grid, sel::kSelectThreads, 0, s>>>(batch, top_k, kDsaTopKChunk, scores, keys, pos, ld);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    kvk::DsaTopKMergeKernel<<<static_cast<unsigned>(batch.num_tokens), sel::kSelectThreads, 0, s>>>(
        batch, top_k, kDsaTopKChunk, keys, pos, ld, selected, selected_ld, err);
    return cudaGetLastError();
  }
  kvk::DsaTopKKernel<<<static_cast<unsigned>(batch.num_tokens), sel::kSelectThreads, 0, s>>>(
      batch, top_k, scores, selected, selected_ld, err);
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
