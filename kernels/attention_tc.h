// The tensor-core attention kernel's plan (kernels/attention_tc.cu), shared with the launcher in
// kernels/attention.cu. Plain C++: no CUDA syntax.
#ifndef LLMRT_KERNELS_ATTENTION_TC_H_
#define LLMRT_KERNELS_ATTENTION_TC_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/kernels.h"

namespace llmrt::cuda {

namespace tc {
inline constexpr int kWarps = 4, kThreads = 32 * kWarps;
inline constexpr int kRows = 16;           // query heads per block: the MMA's M
inline constexpr int kChunk = 8 * kWarps;  // positions per chunk: one n8 tile of scores per warp
inline constexpr int kPad = 8;             // elements after each shared row: conflict-free fragment loads
inline constexpr int kPf = kChunk + 4;     // probability row stride (floats)
inline constexpr int kMaxShared = 160 * 1024;
// A stage's row metadata: each chunk row's address (null: missing), flags (kRowValid, kRowFresh)
// and scale (flat FP8 rows: the layer's; else 1).
inline constexpr int kMetaBytes = kChunk * (8 + 4 + 4);
inline constexpr int kRowValid = 1, kRowFresh = 2;
// Query fragments a warp keeps in registers (TcPlan::qreg): its 16-column steps of the keys,
// steps warp, warp + kWarps, ...; enough for the usual key width of a value width: 576 and 320
// columns for 512 and 256 (MLA's latent and a rope of 64; Kimi K2: 9 steps a warp), 128 for 128
// and 64 (GQA heads; small MLA latents with a rope of 16), 64 for 32.
constexpr int QuerySteps(int dv_tile) { return dv_tile >= 512 ? 9 : dv_tile >= 256 ? 5 : dv_tile >= 64 ? 2 : 1; }
template <int kDvTile>
inline constexpr int kQuerySteps = QuerySteps(kDvTile);  // for device code (a constant's value)
// Blocks of `tiles` head tiles a multiprocessor holds by registers: the launch bounds' minimum
// (two blocks of 4 warps for 512 value columns, up to 255 registers a thread; three for 256, up
// to 168; four below, up to 128), the same warps in blocks of two tiles.
constexpr int MinBlocks(int dv_tile, int tiles) {
  const int b = dv_tile >= 512 ? 2 : dv_tile >= 256 ? 3 : 4;
  return b / tiles > 0 ? b / tiles : 1;
}
}  // namespace tc

// How a call runs on the tensor cores: blocks of up to 16 heads that share their K/V row
// region (an MLA layer's heads all share the latent row; a GQA group shares its KV head), the
// query and each chunk of rows as bfloat16 in shared memory, padded to whole MMA steps. Tiled
// FP8 rows are taken when every 16-column step of the keys and every 8-column tile of the values
// lies within one scale tile (or one BF16 segment), for every KV head.
struct TcPlan {
  int32_t dv_tile = 0;  // dv rounded up to 32, 64, 128, 256 or 512 (the kernel's instance)
  int32_t terms = 0;    // bfloat16 parts of the query and the probabilities (1 or 2)
  int32_t group = 0, tiles_per_group = 0, head_tiles = 0;  // heads per shared row region; tiles
  // Head tiles per block (1 or 2: blocks of kThreads * tiles threads, warp w computing for tile
  // w / kWarps; the two tiles share their row region) and blocks per token (head_tiles / tiles).
  int32_t tiles = 1, head_blocks = 0;
  int32_t q1_pad = 0, kpad = 0;  // q1 in columns [0, q1_len), q2 from q1_pad; kpad columns in all
  int32_t ks = 0;                // K tile row stride in elements
  int32_t qstride = 0, qx = 0;   // query row stride; qx 7: its 16-byte pieces are swizzled (piece
                                 // p of row r at p ^ (r & 7)), 0: rows padded instead
  // 1: each warp holds its steps' query fragments in registers for the whole call and multiplies
  // them by every position of a chunk, the warps' partial scores summed in shared memory (in the
  // query's place); 0: each warp reads every step's fragments from shared memory per chunk for its
  // 8 positions (keys wider than kWarps * QuerySteps(dv_tile) steps).
  int32_t qreg = 0;
  int32_t vs = 0;                // V tile row stride; 0: the values are the K tile's first columns
  int32_t fp8 = 0;               // flat FP8 rows: codes, times the layer scale after the sums
  int32_t tiled = 0;             // tiled FP8 rows: codes, times their tiles' scales (per step / tile)
  int32_t nks = 0;               // 16-column steps of the keys (kpad / 16)
  int32_t async = 0;             // rows loaded by cp.async (every offset and stride 16-byte aligned)
  int32_t ss = 0;                // staged FP8 row stride in bytes (the cache's row_bytes)
  int32_t stages = 1;            // 2: the next chunk's rows load while this one is computed
  int32_t tile_stages = 1;       // K / V tiles alternating between chunks (2: BF16 rows in place)
  int32_t blocks_per_sm = 0;     // blocks a multiprocessor holds (0: the device's size unknown)
  // Shared memory: the query (per tile, qbytes apart), K tile(s), V tile(s), probabilities (per
  // tile), reductions (per tile) and tiled rows' scale slots and scales, per-stage row metadata
  // (off_r, kMetaBytes each), staged FP8 rows (per stage); bytes in all.
  int32_t qbytes = 0, off_k = 0, off_v = 0, off_p = 0, off_f = 0, off_r = 0, off_s = 0, bytes = 0;
};

// False when the scalar kernel runs `a` (chosen, or a case the tensor-core kernel does not take).
bool PlanTensorCoreAttention(const AttentionArgs& a, TcPlan* plan);
// The attention kernel (not the combine of splits) on the tensor cores.
cudaError_t LaunchTensorCoreAttention(const AttentionArgs& a, const TcPlan& plan, int32_t* err, cudaStream_t s);

namespace wg {
inline constexpr int kThreads = 256;     // two warpgroups
inline constexpr int kHeads = 64;        // query heads per block: the warpgroup MMA's M
inline constexpr int kChunk = 64;        // positions per chunk; each warpgroup scores 32 of them
inline constexpr int kBlockBytes = 8192;  // a [64 rows][64 columns] bfloat16 block of a tile
// A stage's row addresses and flags, and (rows of codes) scales.
inline constexpr int kMetaBytes = kChunk * (8 + 4), kScaleBytes = kChunk * 4;
inline constexpr int kRowValid = 1, kRowFresh = 2;
}  // namespace wg

// How a call runs on the warpgroup MMAs (AttentionKernel::kWgmma; kernels/attention_wg.cu): MLA
// heads (all sharing the latent row) in blocks of 64, the latent of 512 both the keys' first
// columns and the values, the rope key after it (up to 64 columns), BF16 or flat FP8 rows whose
// columns come in whole pieces (8 values; 16 codes). Shared memory, from a 1024-byte aligned base: the query
// [kblocks][64 heads][64 columns], the K tile [kblocks][64 positions][64 columns] (BF16 rows:
// two, the copies' stages; FP8 rows: one, decoded from the stages' codes), the probabilities
// [64 heads][64 positions] (each block stored with the 128-byte swizzle the MMAs read), the
// staged codes [2][64][ss] (FP8), then the stages' row metadata and the reductions.
struct WgPlan {
  int32_t head_blocks = 0;  // blocks of 64 heads per token
  int32_t kblocks = 0;      // 64-column blocks of the keys: the latent's 8, then the rope key's
  int32_t codes = 0;        // flat FP8 rows: e4m3 codes times the layer's scale (after the products)
  int32_t ss = 0;           // a staged row of codes: the latent's, then the rope key's (bytes)
  int32_t off_k = 0, off_p = 0, off_s = 0, off_r = 0, off_f = 0, bytes = 0;
};
// False when `a` is not the warpgroup kernel's (not chosen, another shape or codec, a device
// other than sm_90, or less shared memory than it needs): the tensor-core plan runs it instead.
bool PlanWgmmaAttention(const AttentionArgs& a, WgPlan* plan);
cudaError_t LaunchWgmmaAttention(const AttentionArgs& a, const WgPlan& plan, int32_t* err, cudaStream_t s);

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_ATTENTION_TC_H_
