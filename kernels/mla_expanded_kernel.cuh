// The bodies of MLA's expanded-form kernels (kernels/kernels.h, "MLA in expanded form"), in a
// header of their own so that they compile twice: for the device in mla_expanded.cu, and on the
// host in tests/cuda_emulation/, which checks their indexing on every CI machine.
//
// The includer defines, before including this file, in namespace llmrt::cuda::xp:
//   void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
//       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 accumulating into d;
//   void LdMatrixTrans2(const uint16_t* row, uint32_t* b0, uint32_t* b1)
//       ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16: lanes 0-15 give the addresses of rows
//       k0 .. k0 + 15 (16-byte aligned), each holding the 8 columns of the B fragment's n;
//   void CpAsync16(void* shared_dst, const void* global_src)
//       cp.async.cg.shared.global of 16 bytes (both 16-byte aligned);
//   void CpAsyncWaitAll()
//       cp.async.wait_all: this thread's copies have landed (a barrier then publishes them).
//
// Fragments (g = lane / 4, c = lane % 4; a register holds two bfloat16 values, the lower
// column in the low half):
//   A (16x16, row-major): a0 row g cols 2c, 2c+1; a1 row g+8; a2 row g cols 2c+8, 2c+9; a3 row g+8
//   B (16x8, k x n):      b0 rows 2c, 2c+1 of col g; b1 rows 2c+8, 2c+9
//   C (16x8):             c0, c1 row g cols 2c, 2c+1; c2, c3 row g+8
// The scores' C fragments of two adjacent 8-position tiles are the A fragment of the
// probabilities for their 16 positions (FlashAttention-2), so the probabilities never go
// through shared memory.
#ifndef LLMRT_KERNELS_MLA_EXPANDED_KERNEL_CUH_
#define LLMRT_KERNELS_MLA_EXPANDED_KERNEL_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"

namespace llmrt::cuda::xp {

inline constexpr int kChunk = 64;  // positions a step

// Sequence s's token rows [*first, *end) (a sequence's rows are contiguous, in sequence order).
__device__ __forceinline__ void SeqTokens(const BatchRef& b, int64_t num_seqs, int64_t s, int64_t* first,
                                          int64_t* end) {
  *first = b.seq_first_token[s];
  *end = s + 1 < num_seqs ? b.seq_first_token[s + 1] : b.num_tokens;
}

// The sequence whose rows start at row q * ctx_stride of the gathered buffer: the q-th of those
// that bring at least min_seq_tokens tokens (all of them for 0: q itself); -1 past the last.
__device__ __forceinline__ int64_t GatheredSeq(const BatchRef& b, int64_t num_seqs, int64_t min_seq_tokens, int64_t q) {
  if (min_seq_tokens <= 0) return q < num_seqs ? q : -1;
  for (int64_t s = 0, k = 0; s < num_seqs; ++s) {
    int64_t first = 0, end = 0;
    SeqTokens(b, num_seqs, s, &first, &end);
    if (end - first < min_seq_tokens) continue;
    if (k++ == q) return s;
  }
  return -1;
}

// One warp a context row r = q * ctx_stride + p (8 warps a block) of the q-th gathered sequence
// (GatheredSeq), for `gathered` sequences.
__global__ void __launch_bounds__(256) GatherLatentKernel(KvRef kv, int64_t layer, BatchRef b, int64_t num_seqs,
                                                          int64_t kv_lora, int64_t rope, int64_t ctx_stride,
                                                          uint16_t* latent, uint16_t* rope_keys, int32_t* err,
                                                          int64_t min_seq_tokens = 0, int64_t gathered = -1) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= (gathered < 0 ? num_seqs : gathered) * ctx_stride) return;
  const int64_t q = r / ctx_stride, p = r - q * ctx_stride;
  const int64_t s = GatheredSeq(b, num_seqs, min_seq_tokens, q);
  if (s < 0) return;
  int64_t first = 0, end = 0;
  SeqTokens(b, num_seqs, s, &first, &end);
  RowPtr row{nullptr, false};
  bool found = false;
  if (end > first) {
    const Context c = ContextOf(kv, b, end - 1);
    if (p < c.ctx) {
      found = Locate(kv, layer, c, p, &row);
      if (!found && lane == 0) RaiseError(err, kErrPage);
    }
  }
  const float ls = LayerScale(kv, layer);
  uint16_t* lat = latent + r * kv_lora;
  uint16_t* rk = rope_keys + r * rope;
  for (int64_t i = lane; i < kv_lora; i += 32) lat[i] = found ? RoundBf16(RowValue(kv, row, i, ls)) : 0;
  for (int64_t i = lane; i < rope; i += 32) rk[i] = found ? RoundBf16(RowValue(kv, row, kv_lora + i, ls)) : 0;
}

__device__ __forceinline__ uint32_t Pair(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// The kernel instances, by their template arguments.
template <int kQk_, int kDv_, bool kQReg_, int kWarps_>
struct Instance {
  static constexpr int kQk = kQk_, kDv = kDv_, kWarps = kWarps_;
  static constexpr bool kQReg = kQReg_;
};
// Calls visit(Instance<...>{}) with the instance that takes a head shape (kernels.h,
// MlaExpandedPlan); false, calling nothing, where none does.
template <typename Visit>
bool VisitInstance(int64_t nope, int64_t rope, int64_t v, Visit&& visit) {
  if (nope <= 0 || rope < 0 || v <= 0 || nope % 8 != 0 || rope % 8 != 0 || v % 8 != 0) return false;
  const int64_t qk = nope + rope;
  if (qk <= 192 && v <= 128) {
    if (qk <= 64) {
      if (v <= 32) return visit(Instance<64, 32, true, 4>{}), true;
      if (v <= 64) return visit(Instance<64, 64, true, 4>{}), true;
      return visit(Instance<64, 128, true, 4>{}), true;
    }
    if (qk <= 128) {
      if (v <= 32) return visit(Instance<128, 32, true, 4>{}), true;
      if (v <= 64) return visit(Instance<128, 64, true, 4>{}), true;
      return visit(Instance<128, 128, true, 4>{}), true;
    }
    if (v <= 32) return visit(Instance<192, 32, true, 4>{}), true;
    if (v <= 64) return visit(Instance<192, 64, true, 4>{}), true;
    return visit(Instance<192, 128, true, 4>{}), true;
  }
  if (qk <= 256 && v <= 256) return visit(Instance<256, 256, false, 8>{}), true;
  return false;
}

// Row strides (bf16) of a stage's K tile [kChunk][kQk] and V tile [kChunk][kDv]: rows 16-byte
// aligned, and 8 rows' 16-byte pieces spread over all 32 banks (the stride is 4 words past a
// multiple of 32, or 20 words for kDv 32, which spreads them too), for the K tile's 32-bit
// fragment loads and the V tile's ldmatrix.
template <int kQk>
inline constexpr int kKStride = kQk + 8;
template <int kDv>
inline constexpr int kVStride = kDv + 8;
// The instances (MlaExpandedShape, kernels.h): the query's fragments in registers (kQReg; the
// query tile staged in the second stage's K tile before the first chunk) or, for heads too wide
// for the registers, read from a tile of their own in shared memory every chunk.
template <bool kQReg, int kWarps>
inline constexpr int kRowsOf = 16 * kWarps;  // query tokens a block
// The dynamic shared memory of ExpandedAttentionKernel<kQk, kDv, kQReg, kWarps>: two stages of
// a K and a V tile, and the query tile where it stays in shared memory.
template <int kQk, int kDv, bool kQReg, int kWarps>
constexpr int64_t SharedBytes() {
  return static_cast<int64_t>(2 * kChunk * (kKStride<kQk> + kVStride<kDv>) + (kQReg ? 0 : 16 * kWarps * kKStride<kQk>)) *
         2;
}

// kernels.h PlanMlaExpanded.
inline bool PlanOf(int64_t nope, int64_t rope, int64_t v, MlaExpandedPlan* plan) {
  return VisitInstance(nope, rope, v, [&](auto in) {
    using I = decltype(in);
    plan->qk = I::kQk;
    plan->dv = I::kDv;
    plan->warps = I::kWarps;
    plan->query_in_registers = I::kQReg;
    plan->rows = kRowsOf<I::kQReg, I::kWarps>;
    plan->shared_bytes = SharedBytes<I::kQk, I::kDv, I::kQReg, I::kWarps>();
  });
}

// Block (tile, head): the tile-th group of kRows query tokens of its sequence (counted over the
// sequences in order; blocks past the last tile return), head blockIdx.y, kWarps warps of 16
// query rows each. kQk >= nope + rope and kDv >= v, multiples of 16 and 8: the query and key
// rows are zero past nope + rope, and n-tiles past v are skipped.
template <int kQk, int kDv, bool kQReg, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) ExpandedAttentionKernel(MlaExpandedArgs a) {
  constexpr int kThreads = 32 * kWarps, kRows = kRowsOf<kQReg, kWarps>;
  constexpr int kKs = kKStride<kQk>, kVs = kVStride<kDv>;
  constexpr int kStage = kChunk * (kKs + kVs);  // bf16 elements
  static_assert(!kQReg || kRows == kChunk, "a query tile in registers is staged in a K tile");
  uint16_t* const smem = DynamicShared<uint16_t>();
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, c = lane & 3;
  const int64_t h = blockIdx.y;
  // rank: the sequence's place among those taken (min_seq_tokens), whose rows the gather wrote.
  int64_t tile = blockIdx.x, s = 0, first = 0, end = 0, rank = 0;
  for (; s < a.num_seqs; ++s) {
    SeqTokens(a.batch, a.num_seqs, s, &first, &end);
    const bool ours = end - first >= a.min_seq_tokens;  // (others: the token-by-token kernel's)
    const int64_t n = ours ? (end - first + kRows - 1) / kRows : 0;
    if (tile < n) break;
    tile -= n;
    rank += ours ? 1 : 0;
  }
  if (s >= a.num_seqs) return;
  const int64_t t0 = first + tile * kRows;
  const int nt = static_cast<int>(end - t0 < kRows ? end - t0 : kRows);
  const int64_t qw = a.nope + a.rope;
  const int64_t kcol = (h / a.group) * a.k_head_step, vcol = a.v_off + (h / a.group) * a.v_head_step;
  // The block visits the positions of its last token's context, the largest (contexts grow
  // along a sequence).
  const int64_t last = a.batch.token_ctx[t0 + nt - 1];
  const int64_t base = rank * a.ctx_stride;

  // Chunk p0's K tile (nope columns from kvx, the rope key, zeros to kQk) and V tile into `stage`:
  // cp.async for the 16-byte pieces that exist, zeros (ordinary stores) for the others and for
  // positions past `last`.
  const auto load_chunk = [&](int64_t p0, int stage) {
    uint16_t* const kt = smem + stage * kStage;
    uint16_t* const vt = kt + kChunk * kKs;
    for (int i = static_cast<int>(threadIdx.x); i < kChunk * (kQk / 8); i += kThreads) {
      const int r = i / (kQk / 8), d = (i % (kQk / 8)) * 8;
      uint16_t* dst = kt + r * kKs + d;
      const int64_t row = base + p0 + r;
      if (p0 + r < last && d < a.nope) {
        CpAsync16(dst, a.kvx + row * a.kvx_ld + kcol + d);
      } else if (p0 + r < last && d < qw) {
        CpAsync16(dst, a.rope_keys + row * a.rope + (d - a.nope));
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    for (int i = static_cast<int>(threadIdx.x); i < kChunk * (kDv / 8); i += kThreads) {
      const int r = i / (kDv / 8), d = (i % (kDv / 8)) * 8;
      uint16_t* dst = vt + r * kVs + d;
      if (p0 + r < last && d < a.v) {
        CpAsync16(dst, a.kvx + (base + p0 + r) * a.kvx_ld + vcol + d);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // The query tile as bfloat16 (zeros past nope + rope and past the sequence's tokens), while
  // the first chunk loads into the first stage: in the second stage's K tile, from which each
  // warp takes its 16 rows' A fragments into registers (kQReg), or in its own tile after the
  // stages, from which they are read every chunk.
  load_chunk(0, 0);
  uint16_t* const qs = kQReg ? smem + kStage : smem + 2 * kStage;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kQk; i += kThreads) {
    const int r = i / kQk, d = i % kQk;
    const float x = r < nt && d < qw ? a.q[(t0 + r) * a.q_ld + h * qw + d] : 0.0f;
    qs[r * kKs + d] = RoundBf16(x);
  }
  __syncthreads();
  const int row0 = warp * 16 + g;  // this thread's rows: row0 and row0 + 8
  const auto query_fragment = [&](int k, uint32_t (&f)[4]) {
    f[0] = Pair(&qs[row0 * kKs + 16 * k + 2 * c]);
    f[1] = Pair(&qs[(row0 + 8) * kKs + 16 * k + 2 * c]);
    f[2] = Pair(&qs[row0 * kKs + 16 * k + 2 * c + 8]);
    f[3] = Pair(&qs[(row0 + 8) * kKs + 16 * k + 2 * c + 8]);
  };
  uint32_t qf[kQReg ? kQk / 16 : 1][4];
  if constexpr (kQReg) {
#pragma unroll
    for (int k = 0; k < kQk / 16; ++k) query_fragment(k, qf[k]);
  }
  // Each row's context (0 for rows past the tokens: nothing attended).
  const int64_t ctx0 = row0 < nt ? a.batch.token_ctx[t0 + row0] : 0;
  const int64_t ctx1 = row0 + 8 < nt ? a.batch.token_ctx[t0 + row0 + 8] : 0;
  const int ksteps = static_cast<int>((qw + 15) / 16);

  float o[kDv / 8][4];
#pragma unroll
  for (int n = 0; n < kDv / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  int stage = 0;
  for (int64_t p0 = 0; p0 < last; p0 += kChunk, stage ^= 1) {
    // This chunk's copies have landed and every thread's are published; every warp is done with
    // the other stage (the previous chunk, or the query tile), which the next chunk then loads
    // while this one is computed.
    CpAsyncWaitAll();
    __syncthreads();
    if (p0 + kChunk < last) load_chunk(p0 + kChunk, stage ^ 1);
    const uint16_t* const ks = smem + stage * kStage;
    const uint16_t* const vs = ks + kChunk * kKs;

    // Scores of the warp's 16 rows by the chunk's 64 positions (8 n-tiles).
    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < kQk / 16; ++k) {
      if (k >= ksteps) break;
      uint32_t f[4];
      const uint32_t* af = f;
      if constexpr (kQReg) {
        af = qf[k];
      } else {
        query_fragment(k, f);
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const uint16_t* kr = &ks[(8 * n + g) * kKs + 16 * k + 2 * c];
        Mma16816(sc[n], af, Pair(kr), Pair(kr + 8));
      }
    }
    // Scale and mask (position p attended by a row whose context holds it), the running maxima
    // over each row's quad.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t p = p0 + 8 * n + 2 * c + e;
        sc[n][e] = p < ctx0 ? sc[n][e] * a.scale : -INFINITY;
        sc[n][2 + e] = p < ctx1 ? sc[n][2 + e] * a.scale : -INFINITY;
        mx0 = fmaxf(mx0, sc[n][e]);
        mx1 = fmaxf(mx1, sc[n][2 + e]);
      }
    }
    QuadMax(mx0, mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    // Rescale what was summed under the old maxima (a row with nothing attended yet keeps 0).
    const float al0 = mn0 == -INFINITY ? 1.0f : expf(m0 - mn0);
    const float al1 = mn1 == -INFINITY ? 1.0f : expf(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    l0 *= al0;
    l1 *= al1;
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n) {
      o[n][0] *= al0;
      o[n][1] *= al0;
      o[n][2] *= al1;
      o[n][3] *= al1;
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[n][e] = mn0 == -INFINITY ? 0.0f : expf(sc[n][e] - mn0);
        sc[n][2 + e] = mn1 == -INFINITY ? 0.0f : expf(sc[n][2 + e] - mn1);
        l0 += sc[n][e];
        l1 += sc[n][2 + e];
      }
    }
    // out += P V: each 16-position k-step's A fragment from two score tiles, the B fragments of
    // the V tile's rows by ldmatrix .trans.
#pragma unroll
    for (int j = 0; j < kChunk / 16; ++j) {
      const uint32_t pa[4] = {PackBf16(sc[2 * j][0], sc[2 * j][1]), PackBf16(sc[2 * j][2], sc[2 * j][3]),
                              PackBf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                              PackBf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
      const uint16_t* const vrow = vs + (16 * j + (lane & 15)) * kVs;
#pragma unroll
      for (int n = 0; n < kDv / 8; ++n) {
        if (8 * n >= a.v) break;
        uint32_t b0, b1;
        LdMatrixTrans2(vrow + 8 * n, &b0, &b1);
        Mma16816(o[n], pa, b0, b1);
      }
    }
  }

  // Normalize (a row that attended nothing writes zeros, as the CPU does) and store.
  QuadSum(l0, l1);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int n = 0; n < kDv / 8; ++n) {
    const int col = 8 * n + 2 * c;
    if (col >= a.v) break;
    if (row0 < nt) {
      float* dst = a.out + (t0 + row0) * a.out_ld + h * a.v + col;
      dst[0] = o[n][0] * inv0;
      dst[1] = o[n][1] * inv0;
    }
    if (row0 + 8 < nt) {
      float* dst = a.out + (t0 + row0 + 8) * a.out_ld + h * a.v + col;
      dst[0] = o[n][2] * inv1;
      dst[1] = o[n][3] * inv1;
    }
  }
}

}  // namespace llmrt::cuda::xp

#endif  // LLMRT_KERNELS_MLA_EXPANDED_KERNEL_CUH_
