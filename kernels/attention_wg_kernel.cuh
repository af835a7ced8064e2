// The warpgroup-MMA attention kernel's body (kernels/attention_wg.cu describes the design), in a
// header of its own so that it compiles twice: for the device in attention_wg.cu, and on the
// host in tests/cuda_emulation/, where the warpgroup MMAs are computed from the PTX ISA's
// descriptor, swizzle and fragment rules.
//
// The includer defines, before including this file, in namespace llmrt::cuda::wg:
//   constexpr bool kHaveWgmma                  the instructions below exist (sm_90a);
//   uint8_t* WgShared()                        the block's dynamic shared memory, declared
//                                              1024-byte aligned (the swizzle's pattern);
//   uint32_t SharedAddress(const void* p)      p's address in the block's shared window;
//   void WgFence(), WgCommit(), WgWaitAll()    wgmma.fence / commit_group / wait_group 0;
//   void FenceProxyAsync()                     fence.proxy.async.shared::cta;
//   void FenceOperands(float (&r)[N])          a compiler barrier on r (no instruction);
//   void MmaM64N32(float (&d)[16], uint64_t a, uint64_t b, int accumulate)
//       wgmma.mma_async.m64n32k16.f32.bf16.bf16, A and B K-major (descriptors);
//   void MmaM64N256(float (&d)[128], uint64_t a, uint64_t b, int accumulate)
//       wgmma.mma_async.m64n256k16.f32.bf16.bf16, A K-major, B N-major (transposed);
//   void CpAsync16(void* shared_dst, const void* global_src), CpAsyncWaitAll()
//       cp.async.cg of 16 bytes, and cp.async.wait_all.
#ifndef LLMRT_KERNELS_ATTENTION_WG_KERNEL_CUH_
#define LLMRT_KERNELS_ATTENTION_WG_KERNEL_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/attention_tc.h"
#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"
#include "kernels/wgmma_layout.cuh"

namespace llmrt::cuda::wg {

// One block per (token, 64 heads, split). Warpgroup wgi (threads 128 wgi ..) scores positions
// 32 wgi .. 32 wgi + 31 of each chunk and accumulates value columns 256 wgi .. 256 wgi + 255.
// A thread of warp w (in its warpgroup), lane 4g + c, holds rows r0 = 16w + g and r0 + 8 of
// both its fragments: scores s[i] at column 8(i / 4) + 2c + (i % 2), values o[k] at column
// 8(k / 4) + 2c + (k % 2), of row r0 + 8((i / 2) % 2).
// kKb: WgPlan::kblocks (8: no rope key; 9), so that the scores' MMAs unroll. kCodes:
// WgPlan::codes (flat FP8 rows: the copies stage the codes, which all threads then decode into
// the one K tile; their layer scale multiplies the scores and the probabilities).
template <int kKb, bool kCodes>
__global__ void __launch_bounds__(kThreads, 1) WgAttentionKernel(AttentionArgs a, WgPlan pl, int32_t* err) {
  uint8_t* smem = WgShared();
  const uint32_t base = SharedAddress(smem);
  // The launcher takes this kernel only where its sm_90a code is built, and its shared memory
  // is declared 1024-byte aligned: a build or a declaration that breaks either fails loudly.
  if (!kHaveWgmma || (base & 1023u) != 0) {
    if (threadIdx.x == 0) RaiseError(err, kErrKernel);
    return;
  }
  const int tid = static_cast<int>(threadIdx.x), wgi = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2,
            c = lane & 3, r0 = 16 * w + g;
  constexpr int kb = kKb, pieces = 8 * kb;  // a row's 16-byte pieces
  const uint32_t stage_bytes = static_cast<uint32_t>(kb * kBlockBytes);
  const uint8_t** meta_ptr = reinterpret_cast<const uint8_t**>(smem + pl.off_r);  // [2][kChunk]
  int* meta_flags = reinterpret_cast<int*>(smem + pl.off_r + 2 * kChunk * 8);   // [2][kChunk]
  float* meta_scale = reinterpret_cast<float*>(smem + pl.off_r + 2 * kChunk * 12);  // [2][kChunk] (codes)
  float* red_max = reinterpret_cast<float*>(smem + pl.off_f);                  // [2][kHeads]
  float* red_sum = red_max + 2 * kHeads;                                       // [2][kHeads]

  const int i_token = static_cast<int>(blockIdx.x) / pl.head_blocks, t = ListedToken(a, i_token);
  const int h0 = static_cast<int>(blockIdx.x) % pl.head_blocks * kHeads;
  const int nh = static_cast<int>(a.heads - h0 < kHeads ? a.heads - h0 : kHeads);
  const int split = static_cast<int>(blockIdx.y);
  if (SkipsToken(a, t)) return;  // another kernel's token (the whole block: one token)
  const int q1_len = static_cast<int>(a.q1_len), q2_len = a.q2 != nullptr ? static_cast<int>(a.q2_len) : 0;

  const BatchRef& b = a.batch;
  const Context cx = ContextOf(a.kv, b, t);
  const int32_t* sel = a.selected != nullptr ? a.selected + t * a.top_k : nullptr;
  // (The row sums' area is free until the end.)
  const int64_t n = sel != nullptr ? SelectedCount(sel, a.top_k, reinterpret_cast<int*>(red_sum)) : cx.ctx;
  // This split's positions [begin, end): equal shares in whole chunks.
  const int64_t share = ((n + a.splits - 1) / a.splits + kChunk - 1) / kChunk * kChunk;
  const int64_t begin = split * share, end = begin + share < n ? begin + share : n;
  bool bad = false;
  const float layer_scale = kCodes ? LayerScale(a.kv, a.layer) : 1.0f;
  // The rows of the chunk at c0 found into stage st's metadata (one thread per row) ...
  const auto locate = [&](int64_t c0, int st) {
    if (tid < kChunk) {
      RowPtr row{nullptr, false};
      bool ok = false;
      if (c0 + tid < end) {
        const int64_t p = sel != nullptr ? sel[c0 + tid] : c0 + tid;
        ok = Locate(a.kv, a.layer, cx, p, &row);
        if (!ok) bad = true;
      }
      meta_ptr[st * kChunk + tid] = ok ? row.data : nullptr;
      meta_flags[st * kChunk + tid] = (ok ? kRowValid : 0) | (ok && row.fresh ? kRowFresh : 0);
      if constexpr (kCodes) meta_scale[st * kChunk + tid] = ok && !row.fresh ? layer_scale : 1.0f;
    }
  };
  // ... and, once published, copied in 16-byte pieces (consecutive threads: consecutive pieces
  // of a row): BF16 rows into stage st's K tile, the rope key's padding and missing rows zero;
  // rows of codes, their keys' columns, into stage st's staging area (the decode pass reads the
  // phase policy's BF16 fresh rows and zeroes missing rows itself).
  const auto issue = [&](int st) {
    if constexpr (kCodes) {
      uint8_t* staged = smem + pl.off_s + st * kChunk * pl.ss;
      // Piece i = tid + kThreads n of the chunk's rows: row r, piece p, stepped without a division.
      const int row_pieces = pl.ss / 16, dr = kThreads / row_pieces, dp = kThreads - dr * row_pieces;
      int r = tid / row_pieces, p = tid - r * row_pieces;
      while (r < kChunk) {
        const int at = 16 * p;
        const uint8_t* src = meta_ptr[st * kChunk + r];
        if (src != nullptr && (meta_flags[st * kChunk + r] & kRowFresh) == 0) {
          CpAsync16(staged + r * pl.ss + at, src + (at < q1_len ? a.k1_off + at : a.k2_off + (at - q1_len)));
        }
        r += dr;
        p += dp;
        while (p >= row_pieces) {
          p -= row_pieces;
          ++r;
        }
      }
      return;
    }
    uint8_t* kt = smem + pl.off_k + st * stage_bytes;
    for (int i = tid; i < kChunk * pieces; i += kThreads) {
      const int r = i / pieces, piece = i % pieces, col = 8 * piece;
      const uint8_t* src = meta_ptr[st * kChunk + r];
      const int64_t from = col < q1_len ? a.k1_off + col : col - q1_len < q2_len ? a.k2_off + (col - q1_len) : -1;
      uint8_t* dst = kt + (piece >> 3) * kBlockBytes + PieceOffset(r, piece & 7);
      if (src != nullptr && from >= 0) {
        CpAsync16(dst, src + from * 2);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  if (begin >= end) {  // no position: (-inf, 0) for the combine of splits, or zeros, as the CPU
    if (a.splits > 1) {
      if (tid < nh) {
        float* part = a.partial + ((i_token * a.heads + h0 + tid) * a.splits + split) * (a.dv + 2);
        part[0] = -INFINITY;
        part[1] = 0.0f;
      }
    } else {
      for (int i = tid; i < nh * 256; i += kThreads) {  // pairs of the heads' 512 columns
        const int r = i >> 8, col = 2 * (i & 255);
        *reinterpret_cast<float2*>(a.out + t * a.out_ld + (h0 + r) * a.dv + col) = make_float2(0.0f, 0.0f);
      }
    }
    return;
  }
  locate(begin, 0);
  __syncthreads();
  issue(0);

  // The query [64 heads][kb * 64 columns] as bfloat16, rows past the heads and columns past the
  // query's zero: piece i of the row's pieces (the latent's, then the rope's); after the first
  // chunk's copies are on their way.
  for (int i = tid; i < kHeads * pieces; i += kThreads) {
    const int r = i / pieces, piece = i % pieces;
    uint32_t packed[4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      float x[2] = {0.0f, 0.0f};
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int col = 8 * piece + e + k;
        if (r >= nh) continue;
        const int64_t h = h0 + r;
        if (col < q1_len) {
          x[k] = a.q1[t * a.q1_ld + h * a.q1_head + col];
        } else if (col - q1_len < q2_len) {
          x[k] = a.q2[t * a.q2_ld + h * a.q2_head + (col - q1_len)];
        }
      }
      packed[e / 2] = RoundBf16(x[0]) | (static_cast<uint32_t>(RoundBf16(x[1])) << 16);
    }
    *reinterpret_cast<uint4*>(smem + (piece >> 3) * kBlockBytes + PieceOffset(r, piece & 7)) =
        make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }

  float o[128];
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows r0, r0 + 8 (l: this warpgroup's)
  const uint32_t q_addr = base, p_addr = base + static_cast<uint32_t>(pl.off_p);
  uint16_t* ps = reinterpret_cast<uint16_t*>(smem + pl.off_p);
  int st = 0;
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int64_t next = c0 + kChunk;
    if (next < end) locate(next, st ^ 1);
    CpAsyncWaitAll();
    FenceProxyAsync();  // this thread's copies and zero pieces, for the MMAs' reads
    __syncthreads();    // this chunk's rows are in place; the next chunk's addresses are published
    if (next < end) issue(st ^ 1);
    if constexpr (kCodes) {
      // Decode this chunk's rows into the K tile, 8 values a piece: codes from the staging area
      // (exact in bfloat16; the scale comes after the products), the pass's own BF16 rows from
      // global memory, zeros for missing rows and the rope's padding.
      uint8_t* kt = smem + pl.off_k;
      const uint8_t* staged = smem + pl.off_s + st * kChunk * pl.ss;
      for (int i = tid; i < kChunk * pieces; i += kThreads) {
        const int r = i / pieces, piece = i % pieces, col = 8 * piece;
        const uint8_t* src = meta_ptr[st * kChunk + r];
        const bool value = src != nullptr && col < q1_len + q2_len;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (value && (meta_flags[st * kChunk + r] & kRowFresh) != 0) {
          const int64_t from = col < q1_len ? a.k1_off + col : a.k2_off + (col - q1_len);
          v = *reinterpret_cast<const uint4*>(src + from * 2);
        } else if (value) {
          const uint2 c8 = *reinterpret_cast<const uint2*>(staged + r * pl.ss + col);
          v = make_uint4(Fp8PairToBf16(c8.x), Fp8PairToBf16(c8.x >> 16), Fp8PairToBf16(c8.y), Fp8PairToBf16(c8.y >> 16));
        }
        *reinterpret_cast<uint4*>(kt + (piece >> 3) * kBlockBytes + PieceOffset(r, piece & 7)) = v;
      }
      FenceProxyAsync();
      __syncthreads();  // the K tile is whole
    }
    const uint32_t k_addr = base + static_cast<uint32_t>(pl.off_k) + (kCodes ? 0u : st * stage_bytes);

    // Scores: the 64 heads times this warpgroup's 32 positions, over the kb * 4 steps of 16
    // columns (a step: 32 bytes into each 128-byte row of its block).
    float s[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = 0.0f;
    FenceOperands(s);
    WgFence();
    // (A step's descriptors are the first's plus its offset in 16-byte units: shared addresses
    // stay below 2^18, so the start field does not carry.)
    const uint64_t dq = Descriptor(q_addr, 16, 1024), dk = Descriptor(k_addr + wgi * 32 * 128, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < 4 * kb; ++ks) {
      const uint32_t off = static_cast<uint32_t>((ks >> 2) * kBlockBytes + (ks & 3) * 32) >> 4;
      MmaM64N32(s, dq + off, dk + off, ks > 0);
    }
    WgCommit();
    WgWaitAll();
    FenceOperands(s);

    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int j = 32 * wgi + 8 * (i >> 2) + 2 * c + (i & 1);
      const float row_scale = kCodes ? meta_scale[st * kChunk + j] : 1.0f;
      s[i] = (meta_flags[st * kChunk + j] & kRowValid) != 0 ? s[i] * row_scale * a.scale : -INFINITY;
      if ((i >> 1) & 1) {
        mx1 = fmaxf(mx1, s[i]);
      } else {
        mx0 = fmaxf(mx0, s[i]);
      }
    }
    QuadMax(mx0, mx1);
    if (c == 0) {
      red_max[wgi * kHeads + r0] = mx0;
      red_max[wgi * kHeads + r0 + 8] = mx1;
    }
    __syncthreads();
    const float nm0 = fmaxf(m0, fmaxf(red_max[r0], red_max[kHeads + r0]));
    const float nm1 = fmaxf(m1, fmaxf(red_max[r0 + 8], red_max[kHeads + r0 + 8]));
    const float f0 = m0 == -INFINITY ? 0.0f : expf(m0 - nm0), f1 = m1 == -INFINITY ? 0.0f : expf(m1 - nm1);
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const bool hi = (i >> 1) & 1;
      const float nm = hi ? nm1 : nm0;
      const float p0 = s[i] == -INFINITY ? 0.0f : expf(s[i] - nm), p1 = s[i + 1] == -INFINITY ? 0.0f : expf(s[i + 1] - nm);
      if (hi) {
        ps1 += p0 + p1;
      } else {
        ps0 += p0 + p1;
      }
      // The probabilities (times their rows' scales) as bfloat16, [64 heads][64 positions] with
      // the 128-byte swizzle.
      const int row = r0 + (hi ? 8 : 0), col = 32 * wgi + 8 * (i >> 2) + 2 * c;
      const float v0 = kCodes ? p0 * meta_scale[st * kChunk + col] : p0;
      const float v1 = kCodes ? p1 * meta_scale[st * kChunk + col + 1] : p1;
      *reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(ps) + PieceOffset(row, col >> 3) + (col & 7) * 2) =
          RoundBf16(v0) | (static_cast<uint32_t>(RoundBf16(v1)) << 16);
    }
    QuadSum(ps0, ps1);
    l0 = l0 * f0 + ps0;
    l1 = l1 * f1 + ps1;
    m0 = nm0;
    m1 = nm1;
#pragma unroll
    for (int k = 0; k < 128; ++k) o[k] *= ((k >> 1) & 1) ? f1 : f0;
    FenceProxyAsync();  // this thread's probabilities, for the MMAs' reads
    __syncthreads();    // both warpgroups' probabilities are written; the maxima are read

    // Values: the probabilities [64 x 64] times this warpgroup's 256 columns of the latent
    // (blocks 4 wgi .. 4 wgi + 3 of the K tile, read N-major: 64-column blocks 8 KiB apart,
    // groups of 8 positions 1 KiB apart), 16 positions a step.
    const uint32_t v_addr = k_addr + static_cast<uint32_t>(wgi * 4 * kBlockBytes);
    FenceOperands(o);
    WgFence();
    const uint64_t dp = Descriptor(p_addr, 16, 1024), dv = Descriptor(v_addr, kBlockBytes, 1024);
#pragma unroll
    for (int j = 0; j < 4; ++j) MmaM64N256(o, dp + (32 * j >> 4), dv + (2048 * j >> 4), 1);
    WgCommit();
    WgWaitAll();
    FenceOperands(o);
    st ^= 1;
  }
  if (bad) RaiseError(err, sel != nullptr ? kErrSelected : kErrPage);

  // The row sums: each warpgroup's over its positions, added in warpgroup order.
  if (c == 0) {
    red_sum[wgi * kHeads + r0] = l0;
    red_sum[wgi * kHeads + r0 + 8] = l1;
  }
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + 8 * half;
    if (r >= nh) continue;
    const int64_t h = h0 + r;
    float mul;  // (the row's quad in the first warpgroup writes its max and sum)
    float* dst = AttentionOutputRow(a, t, i_token, h, split, half == 0 ? m0 : m1, red_sum[r] + red_sum[kHeads + r],
                                    wgi == 0 && c == 0, &mul);
#pragma unroll
    for (int k = 0; k < 128; k += 4) {  // columns 8(k / 4) + 2c and the next
      const int col = 256 * wgi + 8 * (k >> 2) + 2 * c;
      *reinterpret_cast<float2*>(dst + col) = make_float2(o[k + 2 * half] * mul, o[k + 2 * half + 1] * mul);
    }
  }
}

}  // namespace llmrt::cuda::wg

#endif  // LLMRT_KERNELS_ATTENTION_WG_KERNEL_CUH_
