// The tensor-core attention kernel's body (kernels/attention_tc.cu describes the design), in a
// header of its own so that it compiles twice: for the device in attention_tc.cu, and on the host
// in tests/cuda_emulation/, where a few CUDA features are emulated (threads, barriers, shuffles,
// and the two tensor-core instructions by their PTX fragment tables) so that every CI machine
// checks this kernel's indexing without a GPU.
//
// The includer defines, before including this file, in namespace llmrt::cuda::tc:
//   void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
//       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 accumulating into d;
//   void LdMatrixTrans2(const uint16_t* row, uint32_t* b0, uint32_t* b1)
//       ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 (lanes 0-15 give the row addresses);
//   void LdMatrix4(const uint16_t* row, uint32_t (&r)[4]), LdMatrix2(const uint16_t* row, uint32_t (&r)[2])
//       ldmatrix.sync.aligned.m8n8.x4 / .x2 .shared.b16: lanes 8j .. 8j+7 give matrix j's eight
//       row addresses (16-byte aligned), and lane t receives row t / 4, columns 2(t % 4) and
//       2(t % 4) + 1 of matrix j in r[j];
//   void CpAsync16(void* shared_dst, const void* global_src)
//       cp.async.cg.shared.global of 16 bytes (both 16-byte aligned);
//   void CpAsyncWaitAll()
//       cp.async.wait_all: this thread's copies have landed (a barrier then publishes them).
#ifndef LLMRT_KERNELS_ATTENTION_TC_KERNEL_CUH_
#define LLMRT_KERNELS_ATTENTION_TC_KERNEL_CUH_

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/attention_tc.h"
#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"

namespace llmrt::cuda::tc {

// x as kTerms bfloat16 parts, largest first; each subtraction is exact.
template <int kTerms>
__device__ __forceinline__ void SplitBf16(float x, uint16_t (&parts)[kTerms]) {
#pragma unroll
  for (int i = 0; i < kTerms; ++i) {
    parts[i] = RoundBf16(x);
    x -= Bf16Bits(parts[i]);
  }
}

// Values [from, from + n) of a row into dst[0, n) as bfloat16 bits, zeros in [n, n_pad): BF16
// values as they are, FP8 codes by the hardware's e4m3x2 conversion (exact). One warp; wide loads and stores where both
// sides are aligned for them.
__device__ __forceinline__ void CopyRowValues(const uint8_t* row, bool codes, int64_t from, int n, int n_pad,
                              uint16_t* dst, int lane) {
  if (codes) {
    const uint8_t* src = row + from;
    int done = 0;
    if ((reinterpret_cast<uintptr_t>(src) & 3) == 0 && (reinterpret_cast<uintptr_t>(dst) & 7) == 0) {
      done = n & ~3;
      for (int i = lane * 4; i < done; i += 128) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(src + i);
        *reinterpret_cast<uint2*>(dst + i) = make_uint2(Fp8PairToBf16(w), Fp8PairToBf16(w >> 16));
      }
    }
    for (int i = done + lane; i < n; i += 32) dst[i] = static_cast<uint16_t>(Fp8PairToBf16(src[i]));
  } else {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + from;
    int done = 0;
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
      done = n & ~7;
      for (int i = lane * 8; i < done; i += 256) {
        *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
      }
    } else if ((reinterpret_cast<uintptr_t>(src) & 3) == 0 && (reinterpret_cast<uintptr_t>(dst) & 3) == 0) {
      done = n & ~1;
      for (int i = lane * 2; i < done; i += 64) {
        *reinterpret_cast<uint32_t*>(dst + i) = *reinterpret_cast<const uint32_t*>(src + i);
      }
    }
    for (int i = done + lane; i < n; i += 32) dst[i] = src[i];
  }
  for (int i = n + lane; i < n_pad; i += 32) dst[i] = 0;
}

// The same for a tiled row (layout r): each segment's part of [from, from + n), codes or BF16
// values by the segment.
__device__ __forceinline__ void CopyTiledValues(const uint8_t* row, const KvRowRef& r, int64_t from,
                                       int n, int n_pad, uint16_t* dst, int lane) {
  for (int k = 0; k < r.nseg; ++k) {
    const KvSegRef& sg = r.seg[k];
    const int64_t lo = from > sg.start ? from : sg.start;
    const int64_t hi = from + n < sg.start + sg.count ? from + n : sg.start + sg.count;
    if (lo >= hi) continue;
    const int cnt = static_cast<int>(hi - lo);
    CopyRowValues(row + sg.byte_offset, !sg.bf16, lo - sg.start, cnt, cnt, dst + (lo - from), lane);
  }
  for (int i = n + lane; i < n_pad; i += 32) dst[i] = 0;
}

// The A fragments (16 rows x 16 positions from k0) of the probabilities pf [kRows][kPf] times
// the positions' scales (scales[position * stride]), in kTerms bfloat16 parts: registers (row g,
// positions 2c, 2c+1), (g + 8, same), (g, 2c + 8, 2c + 9), (g + 8, same).
template <int kTerms>
__device__ __forceinline__ void ProbabilityFragments(const float* pf, int k0, int g, int c, const float* scales,
                                                     int stride, uint32_t (&af)[kTerms][4]) {
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const int r = g + 8 * (reg & 1), p0 = k0 + 2 * c + 8 * (reg >> 1);
    uint16_t lo[kTerms], hi[kTerms];
    SplitBf16<kTerms>(pf[r * kPf + p0] * scales[p0 * stride], lo);
    SplitBf16<kTerms>(pf[r * kPf + p0 + 1] * scales[(p0 + 1) * stride], hi);
#pragma unroll
    for (int i = 0; i < kTerms; ++i) af[i][reg] = lo[i] | (static_cast<uint32_t>(hi[i]) << 16);
  }
}

// The scale slot of value v of a tiled row: its tile's index among the row's float32 scales, or
// -1 for a BF16 segment (and past the segments).
__device__ __forceinline__ int TiledSlot(const KvRowRef& r, int64_t v) {
  for (int k = 0; k < r.nseg; ++k) {
    const KvSegRef& sg = r.seg[k];
    if (v < sg.start || v >= sg.start + sg.count) continue;
    return sg.bf16 ? -1 : static_cast<int>(sg.first_scale + (v - sg.start) / sg.tile);
  }
  return -1;
}

// Query column col of row r at its place in a row of the query's shared copy: 16-byte piece
// p at p ^ (r & qx) (qx 7: swizzled; 0: plain).
__device__ __forceinline__ int QueryColumn(int col, int r, int qx) { return (((col >> 3) ^ (r & qx)) << 3) | (col & 7); }

// A stage's row metadata in shared memory (TcPlan::off_r, kMetaBytes per stage).
struct RowMeta {
  const uint8_t** ptr;  // [kChunk] the row's address; null: missing
  int* flags;           // [kChunk] kRowValid, kRowFresh
  float* scale;         // [kChunk] flat FP8 rows: the layer scale; else 1
};
__device__ __forceinline__ RowMeta MetaOf(uint8_t* smem, const TcPlan& pl, int st) {
  uint8_t* m = smem + pl.off_r + st * kMetaBytes;
  return RowMeta{reinterpret_cast<const uint8_t**>(m), reinterpret_cast<int*>(m + kChunk * 8),
                 reinterpret_cast<float*>(m + kChunk * 12)};
}

// kQreg: TcPlan::qreg (an instance each way, so that the registers the query's fragments take are
// not reserved where they are not used). kTiles: TcPlan::tiles, head tiles per block: the warps
// of tile i are warps kWarps * i .. kWarps * i + kWarps - 1, each tile with its own query,
// probabilities and reductions; the rows' loads and decoding are shared by all the block's warps.
template <int kDv, int kTerms, bool kQreg, int kTiles>
__global__ void __launch_bounds__(kThreads * kTiles, MinBlocks(kDv, kTiles)) TcAttentionKernel(AttentionArgs a, TcPlan pl, int32_t* err) {
  constexpr int kNt = kDv / (8 * kWarps);  // n8 tiles of value columns per warp
  static_assert(kNt >= 1 && kDv % (8 * kWarps) == 0, "value columns split evenly over the warps");
  constexpr int kQSteps = kQreg ? kQuerySteps<kDv> : 1;  // query steps a warp holds in registers
  constexpr int kBlockWarps = kWarps * kTiles, kBlockThreads = kThreads * kTiles;
  const int lane = threadIdx.x & 31, bw = threadIdx.x >> 5, warp = bw % kWarps, gt = bw / kWarps, g = lane >> 2,
            c = lane & 3;  // bw: the warp in the block; warp: in its tile gt
  uint8_t* smem = DynamicShared<uint8_t>();
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem + gt * pl.qbytes);  // [kTerms][kRows][qstride]
  float* sp = reinterpret_cast<float*>(smem + gt * pl.qbytes);  // kQreg, once the fragments are loaded: [kWarps][kRows][kPf]
  uint16_t* kt0 = reinterpret_cast<uint16_t*>(smem + pl.off_k);   // [tile_stages][kChunk][ks]
  uint16_t* vt0 = pl.vs > 0 ? reinterpret_cast<uint16_t*>(smem + pl.off_v) : kt0;  // [tile_stages][kChunk][vs]
  const int vstride = pl.vs > 0 ? pl.vs : pl.ks;
  constexpr int kNv = kDv / 8;                                    // n8 tiles of value columns
  const bool staged_codec = pl.fp8 || pl.tiled;
  float* pf = reinterpret_cast<float*>(smem + pl.off_p) + gt * kRows * kPf;  // [kRows][kPf] probabilities
  float* reductions = reinterpret_cast<float*>(smem + pl.off_f);  // [2][kTiles][kWarps][kRows]
  float* red_max = reductions + gt * kWarps * kRows;               // [kWarps][kRows]
  float* red_sum = reductions + (kTiles + gt) * kWarps * kRows;    // [kWarps][kRows]
  // Tiled rows: the scale slot of each 16-column step of the keys and of each 8-column tile of the
  // values (-1: BF16), and each chunk row's scales for them.
  int* kslot = reinterpret_cast<int*>(reductions + 2 * kTiles * kWarps * kRows);  // [nks]
  int* vslot = kslot + pl.nks;                                            // [kNv] (tiled)
  float* kscale = reinterpret_cast<float*>(vslot + (pl.tiled ? kNv : 0));  // [kChunk][nks]
  float* vscale = kscale + kChunk * pl.nks;                               // [kChunk][kNv] (tiled)

  // (32-bit: token and head counts are far below 2^31, and the registers are scarce)
  const int i_token = static_cast<int>(blockIdx.x) / pl.head_blocks, t = ListedToken(a, i_token);
  const int tile = static_cast<int>(blockIdx.x) % pl.head_blocks * kTiles + gt;
  const int in_group = (tile % pl.tiles_per_group) * kRows;
  const int h0 = (tile / pl.tiles_per_group) * pl.group + in_group;
  const int nh = static_cast<int>(pl.group - in_group < kRows ? pl.group - in_group : kRows);
  const int split = static_cast<int>(blockIdx.y);
  if (SkipsToken(a, t)) return;  // another kernel's token (the whole block: one token)

  // The query rows in kTerms bfloat16 parts, zero-padded to kpad columns and 16 rows.
  for (int r = warp; r < kRows; r += kWarps) {  // warp w: rows w, w + kWarps, ... (no division)
    for (int col = lane; col < pl.kpad; col += 32) {
      float x = 0.0f;
      if (r < nh) {
        const int64_t h = h0 + r;
        if (col < a.q1_len) {
          x = a.q1[t * a.q1_ld + h * a.q1_head + col];
        } else if (col >= pl.q1_pad && col - pl.q1_pad < a.q2_len) {
          x = a.q2[t * a.q2_ld + h * a.q2_head + (col - pl.q1_pad)];
        }
      }
      uint16_t parts[kTerms];
      SplitBf16<kTerms>(x, parts);
#pragma unroll
      for (int i = 0; i < kTerms; ++i) qs[(i * kRows + r) * pl.qstride + QueryColumn(col, r, pl.qx)] = parts[i];
    }
  }
  const int64_t kv_index = h0 / a.kv_group;  // MLA: any (its head steps are 0)
  const int64_t k1 = a.k1_off + kv_index * a.k_head_step, v_off = a.v_off + kv_index * a.v_head_step;
  if (pl.tiled) {  // the plan checked each step and tile lies in one scale tile
    for (int ks = threadIdx.x; ks < pl.nks; ks += kBlockThreads) {
      const int col = ks * 16;
      kslot[ks] = TiledSlot(a.kv.row, col < pl.q1_pad ? k1 + col : a.k2_off + (col - pl.q1_pad));
    }
    for (int nv = threadIdx.x; nv < kNv; nv += kBlockThreads) {
      const int col = nv * 8;
      const int64_t v = pl.vs > 0 ? v_off + col : (col < pl.q1_pad ? k1 + col : a.k2_off + (col - pl.q1_pad));
      vslot[nv] = col < a.dv ? TiledSlot(a.kv.row, v) : -1;
    }
  }
  if (pl.async) {  // rows copied in place leave the padding columns alone: zero them once
    for (int e = threadIdx.x; e < pl.tile_stages * kChunk * pl.ks; e += kBlockThreads) kt0[e] = 0;
    if (pl.vs > 0) {
      for (int e = threadIdx.x; e < pl.tile_stages * kChunk * pl.vs; e += kBlockThreads) vt0[e] = 0;
    }
  }
  __syncthreads();

  // ldmatrix row addresses of the query's A fragments: matrix j (lanes 8j .. 8j + 7) is rows
  // 8(j & 1) .. + 7 at columns k0 + 8(j >> 1), i.e. 16-byte piece k0 / 8 + (j >> 1) at its
  // swizzled place in the row (the row's low bits are lane & 7).
  const uint16_t* qa = qs + ((lane & 7) + 8 * ((lane >> 3) & 1)) * pl.qstride;
  const int qpiece = lane >> 4, qsw = lane & pl.qx;
  const auto qat = [&](int i, int k0) { return qa + i * kRows * pl.qstride + ((((k0 >> 3) + qpiece) ^ qsw) << 3); };
  // kQreg: this warp's steps (warp, warp + kWarps, ...) of the query, all parts, for the call.
  uint32_t qf[kTerms][kQSteps][4];
#pragma unroll
  for (int s = 0; s < kQSteps; ++s) {
    const int k0 = (s * kWarps + warp) * 16;
#pragma unroll
    for (int i = 0; i < kTerms; ++i) {
      if (kQreg && k0 < pl.kpad) {
        LdMatrix4(qat(i, k0), qf[i][s]);
      } else {
        qf[i][s][0] = qf[i][s][1] = qf[i][s][2] = qf[i][s][3] = 0u;
      }
    }
  }
  // (The query's area is rewritten, as partial scores, only after the chunk loop's barriers.)

  const BatchRef& b = a.batch;
  const Context cx = ContextOf(a.kv, b, t);
  const float layer_scale = LayerScale(a.kv, a.layer);
  const int32_t* sel = a.selected != nullptr ? a.selected + t * a.top_k : nullptr;
  // (The reductions' area is free until the chunk loop.)
  const int64_t n = sel != nullptr ? SelectedCount(sel, a.top_k, reinterpret_cast<int*>(reductions)) : cx.ctx;
  // This split's positions [begin, end): equal shares in whole chunks.
  const int64_t share = ((n + a.splits - 1) / a.splits + kChunk - 1) / kChunk * kChunk;
  const int64_t begin = split * share, end = begin + share < n ? begin + share : n;

  float o[kNt][4];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8
  bool bad = false;
  const int j0 = warp * 8 + 2 * c;  // this thread's two score columns: j0, j0 + 1
  // Whether a row of the cache is copied in place into the tiles (BF16 values): every BF16 row,
  // and a staged codec's fresh rows with one stage (with two, the tile they would land in is
  // being read: the decode pass below reads them from global memory instead).
  const auto in_place = [&](int flags) { return !staged_codec || ((flags & kRowFresh) != 0 && pl.stages == 1); };
  // Asynchronous loads (pl.async), in two halves: the rows of the chunk at c0 found into stage
  // st's metadata (one thread per row) ...
  const auto locate = [&](int64_t c0, int st) {
    if (threadIdx.x < kChunk) {
      const int i = threadIdx.x;
      RowPtr row{nullptr, false};
      bool ok = false;
      if (c0 + i < end) {
        const int64_t p = sel != nullptr ? sel[c0 + i] : c0 + i;
        ok = Locate(a.kv, a.layer, cx, p, &row);
        if (!ok) bad = true;
      }
      const RowMeta m = MetaOf(smem, pl, st);
      m.ptr[i] = ok ? row.data : nullptr;
      m.flags[i] = (ok ? kRowValid : 0) | (ok && row.fresh ? kRowFresh : 0);
      m.scale[i] = ok && pl.fp8 && !row.fresh ? layer_scale : 1.0f;
    }
  };
  // ... and, once the metadata is published, 16-byte asynchronous copies of them (BF16 rows' key
  // and value columns straight into stage st's tiles, FP8 rows whole into its staging area),
  // the block's warp w taking rows w, w + kBlockWarps, ..., a row's pieces over the lanes.
  const auto issue = [&](int st) {
    const RowMeta m = MetaOf(smem, pl, st);
    uint16_t* kt = kt0 + (pl.tile_stages > 1 ? st : 0) * kChunk * pl.ks;
    uint16_t* vt = pl.vs > 0 ? vt0 + (pl.tile_stages > 1 ? st : 0) * kChunk * pl.vs : kt;
    uint8_t* stage = smem + pl.off_s + st * kChunk * pl.ss;
    const int pk1 = static_cast<int>(a.q1_len / 8), pk2 = pl.kpad > pl.q1_pad ? static_cast<int>(a.q2_len / 8) : 0;
    const int pd = pk1 + pk2 + (pl.vs > 0 ? static_cast<int>(a.dv / 8) : 0);
    for (int i = bw; i < kChunk; i += kBlockWarps) {
      const uint8_t* src = m.ptr[i];
      const int flags = m.flags[i];
      if (src == nullptr && staged_codec) continue;  // the decode pass zeroes it
      if (in_place(flags)) {  // a missing row: zeros
        for (int j = lane; j < pd; j += 32) {
          int64_t from;
          uint16_t* dst;
          if (j < pk1) {
            from = k1 + 8 * j;
            dst = kt + i * pl.ks + 8 * j;
          } else if (j < pk1 + pk2) {
            from = a.k2_off + 8 * (j - pk1);
            dst = kt + i * pl.ks + pl.q1_pad + 8 * (j - pk1);
          } else {
            from = v_off + 8 * (j - pk1 - pk2);
            dst = vt + i * pl.vs + 8 * (j - pk1 - pk2);
          }
          if (src != nullptr) {
            CpAsync16(dst, src + from * 2);
          } else {
            *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
          }
        }
      } else if ((flags & kRowFresh) == 0) {
        for (int j = lane; j < pl.ss / 16; j += 32) CpAsync16(stage + i * pl.ss + 16 * j, src + 16 * j);
      }
    }
  };
  // With two stages the next chunk's rows are found before this chunk's copies are awaited and
  // copied while this chunk is computed; with one, after this chunk is done.
  if (pl.async && begin < end) {
    locate(begin, 0);
    __syncthreads();
    issue(0);
  }
  int st = 0;
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int64_t next = c0 + kChunk;
    if (pl.async) {
      if (pl.stages == 2 && next < end) locate(next, st ^ 1);
      CpAsyncWaitAll();
      __syncthreads();  // this chunk's rows have landed; the next chunk's addresses are published
      if (pl.stages == 2 && next < end) issue(st ^ 1);
    }
    const RowMeta meta = MetaOf(smem, pl, st);
    uint16_t* kt = kt0 + (pl.tile_stages > 1 ? st : 0) * kChunk * pl.ks;
    uint16_t* vt = pl.vs > 0 ? vt0 + (pl.tile_stages > 1 ? st : 0) * kChunk * pl.vs : kt;
    uint8_t* stage = smem + pl.off_s + st * kChunk * pl.ss;
    // Decode: the block's warp w takes rows w, w + kBlockWarps, ... (finding and loading them
    // itself without pl.async). Rows copied in place need nothing more (their metadata was set with their
    // addresses).
    for (int i = bw; i < kChunk && (!pl.async || staged_codec); i += kBlockWarps) {
      RowPtr row{nullptr, false};
      bool ok = false;
      if (pl.async) {
        ok = meta.ptr[i] != nullptr;
        row.fresh = (meta.flags[i] & kRowFresh) != 0;
        row.data = ok && !row.fresh ? stage + i * pl.ss : meta.ptr[i];
      } else if (c0 + i < end) {
        const int64_t p = sel != nullptr ? sel[c0 + i] : c0 + i;
        ok = Locate(a.kv, a.layer, cx, p, &row);
        if (!ok) bad = true;
      }
      uint16_t* krow = kt + i * pl.ks;
      const bool codes = pl.fp8 && !row.fresh, tiled = pl.tiled && !row.fresh;
      if (ok && pl.async && in_place(meta.flags[i])) {
        // BF16 values, already in place
      } else if (ok && tiled) {
        CopyTiledValues(row.data, a.kv.row, k1, static_cast<int>(a.q1_len), pl.q1_pad, krow, lane);
        if (pl.kpad > pl.q1_pad) {
          CopyTiledValues(row.data, a.kv.row, a.k2_off, static_cast<int>(a.q2_len), pl.kpad - pl.q1_pad,
                          krow + pl.q1_pad, lane);
        }
        if (pl.vs > 0) {
          CopyTiledValues(row.data, a.kv.row, v_off, static_cast<int>(a.dv), kDv, vt + i * pl.vs, lane);
        }
      } else if (ok) {
        CopyRowValues(row.data, codes, k1, static_cast<int>(a.q1_len), pl.q1_pad, krow, lane);
        if (pl.kpad > pl.q1_pad) {
          CopyRowValues(row.data, codes, a.k2_off, static_cast<int>(a.q2_len), pl.kpad - pl.q1_pad,
                        krow + pl.q1_pad, lane);
        }
        if (pl.vs > 0) CopyRowValues(row.data, codes, v_off, static_cast<int>(a.dv), kDv, vt + i * pl.vs, lane);
      } else {
        for (int j = lane; j < pl.kpad; j += 32) krow[j] = 0;
        if (pl.vs > 0) {
          for (int j = lane; j < kDv; j += 32) vt[i * pl.vs + j] = 0;
        }
      }
      if (lane == 0 && !pl.async) {
        meta.flags[i] = (ok ? kRowValid : 0) | (ok && row.fresh ? kRowFresh : 0);
        meta.scale[i] = ok && codes ? layer_scale : 1.0f;
      }
      if (pl.tiled) {  // fresh and missing rows: 1
        const float* scales = ok && tiled ? reinterpret_cast<const float*>(row.data + a.kv.row.scale_offset) : nullptr;
        for (int ks = lane; ks < pl.nks; ks += 32) {
          kscale[i * pl.nks + ks] = ok && tiled && kslot[ks] >= 0 ? scales[kslot[ks]] : 1.0f;
        }
        for (int nv = lane; nv < kNv; nv += 32) {
          vscale[i * kNv + nv] = ok && tiled && vslot[nv] >= 0 ? scales[vslot[nv]] : 1.0f;
        }
      }
    }
    __syncthreads();

    // Scores of the 16 rows at this thread's positions j0, j0 + 1 (rows g, g + 8) into acc.
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint16_t* kb = kt + (warp * 8 + (lane & 7)) * pl.ks + 8 * (lane >> 3);
    if constexpr (kQreg) {
      // This warp's steps of the query (registers) times all 32 positions: four n8 tiles of
      // positions, each an independent accumulator chain; ldmatrix .x2 B fragments (lanes 0-7:
      // the tile's positions at columns k0 .., lanes 8-15: at k0 + 8 ..). Tiled rows: each step's
      // products times its tile's scale.
      float sa[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) sa[nt][0] = sa[nt][1] = sa[nt][2] = sa[nt][3] = 0.0f;
      const uint16_t* kr = kt + (lane & 7) * pl.ks + 8 * ((lane >> 3) & 1);
#pragma unroll
      for (int s = 0; s < kQSteps; ++s) {
        const int k0 = (s * kWarps + warp) * 16;
        if (k0 >= pl.kpad) break;  // uniform over the warp
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          uint32_t bq[2];
          LdMatrix2(kr + nt * 8 * pl.ks + k0, bq);
          if (pl.tiled) {
            float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < kTerms; ++i) Mma16816(step, qf[i][s], bq[0], bq[1]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              sa[nt][e] = fmaf(step[e], kscale[(nt * 8 + 2 * c + (e & 1)) * pl.nks + k0 / 16], sa[nt][e]);
            }
          } else {
#pragma unroll
            for (int i = 0; i < kTerms; ++i) Mma16816(sa[nt], qf[i][s], bq[0], bq[1]);
          }
        }
      }
      // The warps' partial sums (over their steps), added in warp order.
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sp[(warp * kRows + g + 8 * (e >> 1)) * kPf + nt * 8 + 2 * c + (e & 1)] = sa[nt][e];
      }
      __syncthreads();
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = g + 8 * (e >> 1), j = j0 + (e & 1);
        float x = sp[r * kPf + j];
        for (int w = 1; w < kWarps; ++w) x += sp[(w * kRows + r) * kPf + j];
        acc[e] = x;
      }
    } else if (pl.tiled) {  // each step's products times its tile's scale (one per position)
      for (int k0 = 0; k0 < pl.kpad; k0 += 16) {
        uint32_t bq[2];
        LdMatrix2(kb + k0, bq);
        float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < kTerms; ++i) {
          uint32_t af[4];
          LdMatrix4(qat(i, k0), af);
          Mma16816(step, af, bq[0], bq[1]);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] = fmaf(step[e], kscale[(j0 + (e & 1)) * pl.nks + k0 / 16], acc[e]);
      }
    } else {
      // An accumulator per (query part, even or odd step): 2 * kTerms independent chains, so that
      // consecutive MMAs do not wait on each other's results (an MMA's latency is several times
      // its issue interval, and a block's warps are few).
      float acc2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float acc3[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float acc4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int k0 = 0;
      for (; k0 + 32 <= pl.kpad; k0 += 32) {
        uint32_t bq[4];
        LdMatrix4(kb + k0, bq);  // steps k0 (bq[0], bq[1]) and k0 + 16 (bq[2], bq[3])
#pragma unroll
        for (int i = 0; i < kTerms; ++i) {
          uint32_t af[4], ag[4];
          LdMatrix4(qat(i, k0), af);
          LdMatrix4(qat(i, k0 + 16), ag);
          Mma16816(i == 0 ? acc : acc3, af, bq[0], bq[1]);
          Mma16816(i == 0 ? acc2 : acc4, ag, bq[2], bq[3]);
        }
      }
      if (k0 < pl.kpad) {  // a last step of 16
        uint32_t bq[2];
        LdMatrix2(kb + k0, bq);
#pragma unroll
        for (int i = 0; i < kTerms; ++i) {
          uint32_t af[4];
          LdMatrix4(qat(i, k0), af);
          Mma16816(acc, af, bq[0], bq[1]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = (acc[e] + acc2[e]) + (acc3[e] + acc4[e]);
    }
    float s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = j0 + (e & 1);
      s[e] = (meta.flags[j] & kRowValid) != 0 ? acc[e] * meta.scale[j] * a.scale : -INFINITY;
    }
    float mx0 = fmaxf(s[0], s[1]), mx1 = fmaxf(s[2], s[3]);
    QuadMax(mx0, mx1);
    if (c == 0) {
      red_max[warp * kRows + g] = mx0;
      red_max[warp * kRows + g + 8] = mx1;
    }
    __syncthreads();
    float cm0 = -INFINITY, cm1 = -INFINITY;
    for (int w = 0; w < kWarps; ++w) {
      cm0 = fmaxf(cm0, red_max[w * kRows + g]);
      cm1 = fmaxf(cm1, red_max[w * kRows + g + 8]);
    }
    const float nm0 = fmaxf(m0, cm0), nm1 = fmaxf(m1, cm1);
    const float f0 = m0 == -INFINITY ? 0.0f : expf(m0 - nm0), f1 = m1 == -INFINITY ? 0.0f : expf(m1 - nm1);
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = s[e] == -INFINITY ? 0.0f : expf(s[e] - (e < 2 ? nm0 : nm1));
    float ps0 = p[0] + p[1], ps1 = p[2] + p[3];
    QuadSum(ps0, ps1);
    if (c == 0) {
      red_sum[warp * kRows + g] = ps0;
      red_sum[warp * kRows + g + 8] = ps1;
    }
    pf[g * kPf + j0] = p[0];
    pf[g * kPf + j0 + 1] = p[1];
    pf[(g + 8) * kPf + j0] = p[2];
    pf[(g + 8) * kPf + j0 + 1] = p[3];
    __syncthreads();
    float cs0 = 0.0f, cs1 = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      cs0 += red_sum[w * kRows + g];
      cs1 += red_sum[w * kRows + g + 8];
    }
    l0 = l0 * f0 + cs0;
    l1 = l1 * f1 + cs1;
    m0 = nm0;
    m1 = nm1;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      o[nt][0] *= f0;
      o[nt][1] *= f0;
      o[nt][2] *= f1;
      o[nt][3] *= f1;
    }
    // Values: this warp's kDv / kWarps columns over the chunk's positions. The A operand is the
    // probabilities times the rows' scales for the columns (flat rows: one per row; tiled rows:
    // one per row and value tile, rebuilt where the tile changes), in kTerms bfloat16 parts.
#pragma unroll
    for (int k0 = 0; k0 < kChunk; k0 += 16) {
      uint32_t af[kTerms][4];
      if (!pl.tiled) {
        ProbabilityFragments<kTerms>(pf, k0, g, c, meta.scale, 1, af);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const int n0 = warp * (kDv / kWarps) + nt * 8;
          uint32_t b0, b1;
          LdMatrixTrans2(vt + (k0 + (lane & 15)) * vstride + n0, &b0, &b1);
#pragma unroll
          for (int i = 0; i < kTerms; ++i) Mma16816(o[nt], af[i], b0, b1);
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const int n0 = warp * (kDv / kWarps) + nt * 8;
          if (nt == 0 || vslot[n0 / 8] != vslot[n0 / 8 - 1]) {  // uniform over the block
            ProbabilityFragments<kTerms>(pf, k0, g, c, vscale + n0 / 8, kNv, af);
          }
          uint32_t b0, b1;
          LdMatrixTrans2(vt + (k0 + (lane & 15)) * vstride + n0, &b0, &b1);
#pragma unroll
          for (int i = 0; i < kTerms; ++i) Mma16816(o[nt], af[i], b0, b1);
        }
      }
    }
    __syncthreads();  // the tiles, scales, probabilities and metadata are rewritten next
    if (pl.async && pl.stages == 1 && next < end) {
      locate(next, 0);
      __syncthreads();
      issue(0);
    }
    if (pl.stages == 2) st ^= 1;
  }
  if (bad) RaiseError(err, sel != nullptr ? kErrSelected : kErrPage);

  // (The token found again: kept live through the chunks, it cost the 512-column instances
  // registers they spill.)
  const int i_out = static_cast<int>(blockIdx.x) / pl.head_blocks, t_out = ListedToken(a, i_out);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + 8 * half;
    if (r >= nh) continue;
    const int64_t h = h0 + r;
    float mul;  // (1 with splits: the same bits)
    float* dst = AttentionOutputRow(a, t_out, i_out, h, split, half == 0 ? m0 : m1, half == 0 ? l0 : l1,
                                    warp == 0 && c == 0, &mul);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int col = warp * (kDv / kWarps) + nt * 8 + 2 * c;
      if (col < a.dv) dst[col] = o[nt][2 * half] * mul;
      if (col + 1 < a.dv) dst[col + 1] = o[nt][2 * half + 1] * mul;
    }
  }
}

}  // namespace llmrt::cuda::tc

#endif  // LLMRT_KERNELS_ATTENTION_TC_KERNEL_CUH_
