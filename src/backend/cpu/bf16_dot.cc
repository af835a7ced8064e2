// bf16 dot-product matmuls: activation rounding, the scalar emulation of `vdpbf16ps`, the
// AVX-512 loops (decode GEMV on `vdpbf16ps`, blocked GEMM on float32 FMAs forming the same
// steps) and the choice among them. See bf16_dot.h for
// the arithmetic every path shares.
#include "src/backend/cpu/bf16_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/backend/cpu/bf16_lanes.h"
#include "src/util/bf16.h"
#include "src/util/status.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LLMRT_BF16_X86 1
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#else
#define LLMRT_BF16_X86 0
#endif

namespace llmrt::cpu {
namespace {

constexpr int64_t kBlock = Bf16Activations::kBlock;

using bf16_lanes::DpStep;
using bf16_lanes::ReduceLanes;

// The scalar path: one output at a time, block by block, lane by lane, in the instruction's
// order. Weight columns past k read as +0, as the masked loads of the x86 path give.
void RowsScalar(const uint16_t* w, int64_t k, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                int64_t n1) {
  const int64_t nb = x.padded / kBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * k;
    for (int64_t t = 0; t < x.rows; ++t) {
      const uint16_t* xr = x.values.data() + t * x.padded;
      float lanes[16] = {};
      for (int64_t c = 0; c < nb; ++c) {
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t k0 = c * kBlock + 2 * i, k1 = k0 + 1;
          lanes[i] = DpStep(lanes[i], xr[k1], k1 < k ? wr[k1] : uint16_t{0});
          lanes[i] = DpStep(lanes[i], xr[k0], k0 < k ? wr[k0] : uint16_t{0});
        }
      }
      out[t * ldo + n] = ReduceLanes(lanes);
    }
  }
}

void DotLanesScalar(float acc[16], const uint16_t a[32], const uint16_t b[32]) {
  for (int i = 0; i < 16; ++i) acc[i] = DpStep(DpStep(acc[i], a[2 * i + 1], b[2 * i + 1]), a[2 * i], b[2 * i]);
}

}  // namespace

#if LLMRT_BF16_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
namespace bf16_avx512 {

// Register tile: R weight rows x TT activation rows, one 16-lane accumulator each, over blocks
// [0, nfull) of 32 columns and, when `masked`, one more block whose weight columns past the
// row's end are masked to +0. acc[(t * ld_acc + r) * 16] holds the lanes in and out, so that a
// column-blocked caller continues exactly where the previous block stopped; `first`: the lanes
// start at +0 instead (nothing is read). `sums` (4 x 4 tiles of a last column block, else
// nullptr): the outputs, ReduceLanes of each accumulator, go to sums[t * ld_sums + r] instead of
// the lanes to acc.
template <int R, int TT, bool kPrefetch = false>
inline void Tile(const uint16_t* w, int64_t ldw, const uint16_t* x, int64_t ldx, int64_t nfull, bool masked,
                 __mmask32 tail, float* acc, int64_t ld_acc, bool first, const char* next, float* sums,
                 int64_t ld_sums) {
  __m512 a[TT][R];
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a[t][r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (t * ld_acc + r) * 16);
  }
  auto step = [&](int64_t col, bool mask) __attribute__((always_inline)) {
    if constexpr (kPrefetch) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) __builtin_prefetch(next + r * 64, 0, 2);
      next += R * 64;
    }
    __m512i wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      wv[r] = mask ? _mm512_maskz_loadu_epi16(tail, w + r * ldw + col) : _mm512_loadu_si512(w + r * ldw + col);
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const __m512i xv = _mm512_loadu_si512(x + t * ldx + col);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[t][r] = _mm512_dpbf16_ps(a[t][r], (__m512bh)xv, (__m512bh)wv[r]);
    }
  };
  for (int64_t c = 0; c < nfull; ++c) step(c * kBlock, false);
  if (masked) step(nfull * kBlock, true);
  if constexpr (R == 4 && TT == 4) {
    if (sums != nullptr) {
      __m512 v[16];  // v[4r + t] = a[t][r]
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) v[m] = a[m % 4][m / 4];
      bf16_lanes::StoreTileSums4x4(v, sums, ld_sums);
      return;
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(acc + (t * ld_acc + r) * 16, a[t][r]);
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, bool, __mmask32, float*, int64_t,
                        bool, const char*, float*, int64_t);
constexpr int kMaxTileRows = 4;
constexpr int kMaxTileTokens = 4;  // 16 accumulators + 4 weight vectors + 1 activation of 32 registers

// kTiles[R - 1][TT - 1].
constexpr TileFn kTiles[kMaxTileRows][kMaxTileTokens] = {
    {Tile<1, 1>, Tile<1, 2>, Tile<1, 3>, Tile<1, 4>},
    {Tile<2, 1>, Tile<2, 2>, Tile<2, 3>, Tile<2, 4>},
    {Tile<3, 1>, Tile<3, 2>, Tile<3, 3>, Tile<3, 4>},
    {Tile<4, 1>, Tile<4, 2>, Tile<4, 3>, Tile<4, 4>},
};

// Four weight rows that also bring the next four (`next`, contiguous after them) into L2, one
// stretch per step, as the EXACT one-row kernel does on the same cores (Rows4 in matmul.cc):
// decode reads each weight once, and the hardware prefetchers alone restart on every group.
constexpr TileFn kPrefetchTiles[kMaxTileTokens] = {Tile<4, 1, true>, Tile<4, 2, true>, Tile<4, 3, true>,
                                                   Tile<4, 4, true>};

// Decode: four weight rows at a time stream over the whole row once per group of up to four
// activation rows; the accumulators stay in registers for the whole row. On AMD's cores the
// first pass over a group prefetches the next one, except that a single activation row takes
// one weight row at a time there, without prefetches: each thread then reads one sequential
// stream, which the hardware prefetchers follow best (Zen 4, two threads, BF16 policy, GLM-4.5
// structure, interleaved runs in the machine's fast memory phase: 32.3-33.4 against 29.9-31.3
// tok/s; see docs/cpu_performance.md's fourteenth run); from two rows on, sharing each weight
// vector among the rows matters more.
void Gemv(const uint16_t* w, int64_t k, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const int64_t nfull = k / kBlock;
  const bool masked = k % kBlock != 0;
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (k % kBlock)) - 1);
  static const bool amd = Bf16DpFullRate();
  alignas(64) float acc[kMaxTileRows * kMaxTileTokens * 16];
  if (x.rows == 1 && amd) {
    for (int64_t n = n0; n < n1; ++n) {
      Tile<1, 1>(w + n * k, k, x.values.data(), x.padded, nfull, masked, tail, acc, 1, /*first=*/true, nullptr,
                 nullptr, 0);
      out[n] = ReduceLanes(acc);
    }
    return;
  }
  for (int64_t n = n0; n < n1; n += kMaxTileRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kMaxTileRows, n1 - n));
    const bool prefetch = amd && !masked && n + 2 * kMaxTileRows <= n1;
    for (int64_t t = 0; t < x.rows; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.rows - t));
      const TileFn tile = prefetch && t == 0 ? kPrefetchTiles[nt - 1] : kTiles[nr - 1][nt - 1];
      tile(w + n * k, k, x.values.data() + t * x.padded, x.padded, nfull, masked, tail, acc, nr, /*first=*/true,
           reinterpret_cast<const char*>(w + (n + kMaxTileRows) * k), nullptr, 0);
      bf16_lanes::ReduceLanesBlock(acc, nt * nr, nr, out + t * ldo + n, ldo);
    }
  }
}

// The GEMM's tile: the same lanes and steps as Tile, formed with float32 FMAs instead of
// `vdpbf16ps`. A block of 32 bf16 weights is split into its odd-column values (the high half of
// each 32-bit lane: an AND) and its even-column ones (a 16-bit shift), exactly as float32; the
// activations come pre-split the same way (Bf16Activations::split). Then lane i takes
// fma(x_odd, w_odd) and then fma(x_even, w_even): the instruction's two steps in its order. With
// MXCSR's DAZ and FTZ set around the loop (Gemm does) each FMA reads denormals as zero and
// flushes a denormal result, as `vdpbf16ps` does, so the bits are the instruction's. Why: on the
// cores this runs on, `vdpbf16ps` issues once per two cycles (32 products) while two FMA ports
// take 2 x 16 products per cycle; the split costs two integer ops per weight vector, shared by
// the tile's activation rows.
template <int R, int TT>
inline void TileFma(const uint16_t* w, int64_t ldw, const float* x, int64_t ldx, int64_t nfull, bool masked,
                    __mmask32 tail, float* acc, int64_t ld_acc) {
  __m512 a[TT][R];
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a[t][r] = _mm512_loadu_ps(acc + (t * ld_acc + r) * 16);
  }
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  auto step = [&](int64_t col, bool mask) __attribute__((always_inline)) {
    __m512 wo[R], we[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i v =
          mask ? _mm512_maskz_loadu_epi16(tail, w + r * ldw + col) : _mm512_loadu_si512(w + r * ldw + col);
      wo[r] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
      // (The zero-masked form: GCC 12's plain one merges into an undefined vector and warns.)
      we[r] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(static_cast<__mmask16>(0xFFFF), v, 16));
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const __m512 xo = _mm512_loadu_ps(x + t * ldx + col);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[t][r] = _mm512_fmadd_ps(xo, wo[r], a[t][r]);
      const __m512 xe = _mm512_loadu_ps(x + t * ldx + col + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[t][r] = _mm512_fmadd_ps(xe, we[r], a[t][r]);
    }
  };
  for (int64_t c = 0; c < nfull; ++c) step(c * kBlock, false);
  if (masked) step(nfull * kBlock, true);
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(acc + (t * ld_acc + r) * 16, a[t][r]);
  }
}

using TileFmaFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, bool, __mmask32, float*,
                           int64_t);
constexpr TileFmaFn kFmaTiles[kMaxTileRows][kMaxTileTokens] = {
    {TileFma<1, 1>, TileFma<1, 2>, TileFma<1, 3>, TileFma<1, 4>},
    {TileFma<2, 1>, TileFma<2, 2>, TileFma<2, 3>, TileFma<2, 4>},
    {TileFma<3, 1>, TileFma<3, 2>, TileFma<3, 3>, TileFma<3, 4>},
    {TileFma<4, 1>, TileFma<4, 2>, TileFma<4, 3>, TileFma<4, 4>},
};

// Prefill and batched decode: blocks of kGemmTokens activation rows x kGemmRows weight rows x
// kGemmBlocks column blocks. The weight block (16 KiB) stays in L1 while every token tile of
// the block passes over it; the activation block (64 KiB) stays in L2. The lanes of each
// (weight row, activation row) pair live in memory between column blocks and continue in the
// same order, so each output is the GEMV's bit for bit.
constexpr int64_t kGemmTokens = 64;
constexpr int64_t kGemmRows = 16;   // a multiple of kMaxTileRows
constexpr int64_t kGemmBlocks = 16;  // 512 columns
// The `vdpbf16ps` tiles (AMD) take 4096 columns per pass over 8 rows: a tile call loads and
// stores its 16 accumulators once per pass, which over 16 blocks cost a quarter of the
// instruction's rate (a 4 x 4 tile over 16 blocks in L1 ran at 75% of the measured peak of one
// `vdpbf16ps` per cycle, over 128 blocks at 81-90%). The weight block (64 KiB) and the
// activation block (512 KiB) stay in L2. Zen 4, one thread, 4096 x 4096: 16 / 64 / 512 rows
// 122 / 150 / 149 -> 138 / 173 / 169 GFLOP/s (234 peak); 4096 x 1024: 104 / 149 / 150 -> 159 /
// 171 / 167.
constexpr int64_t kGemmRowsDp = 8;
constexpr int64_t kGemmBlocksDp = 128;

// kDp: the tiles run `vdpbf16ps` on the bf16 values (cores that issue it once per cycle) instead
// of FMAs on the split halves; the same bits either way.
// `split`: the activations in Bf16Activations::split's layout (the FMA tiles; nullptr for kDp).
template <bool kDp>
void GemmT(const uint16_t* w, int64_t k, const Bf16Activations& x, const float* split, float* out, int64_t ldo,
           int64_t n0, int64_t n1) {
  LLMRT_CHECK(kDp || split != nullptr);
  const int64_t nb = x.padded / kBlock;
  const bool masked = k % kBlock != 0;
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (k % kBlock)) - 1);
  constexpr int64_t kRows = kDp ? kGemmRowsDp : kGemmRows, kBlocks = kDp ? kGemmBlocksDp : kGemmBlocks;
  thread_local CacheLineVector<float> accs;
  accs.resize(static_cast<size_t>(kGemmTokens * kRows * 16));
  float* acc = accs.data();
  for (int64_t t0 = 0; t0 < x.rows; t0 += kGemmTokens) {
    const int64_t tb = std::min(kGemmTokens, x.rows - t0);
    for (int64_t r0 = n0; r0 < n1; r0 += kRows) {
      const int64_t rb = std::min(kRows, n1 - r0);
      // The dp tiles of the first column block start their lanes at +0 (no fill, no loads).
      if (!kDp || nb == 0) std::fill(acc, acc + tb * rb * 16, 0.0f);
      // DAZ (bit 6) and FTZ (bit 15): the FMAs flush denormals as `vdpbf16ps` does.
      const unsigned csr = _mm_getcsr();
      if (!kDp) _mm_setcsr(csr | 0x8040u);
      // The dp path's full 4 x 4 tiles write their outputs from registers after the last column
      // block (when the rows come in whole tiles); the rest go through the lanes in `acc`.
      const int64_t tb_direct = kDp && nb > 0 && rb % kMaxTileRows == 0 ? tb / kMaxTileTokens * kMaxTileTokens : 0;
      for (int64_t c0 = 0; c0 < nb; c0 += kBlocks) {
        const int64_t cb = std::min(kBlocks, nb - c0);
        const bool last_masked = masked && c0 + cb == nb;
        const int64_t nfull = last_masked ? cb - 1 : cb;
        for (int64_t t = 0; t < tb; t += kMaxTileTokens) {
          const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, tb - t));
          const int64_t xo = (t0 + t) * x.padded + c0 * kBlock;
          for (int64_t r = 0; r < rb; r += kMaxTileRows) {
            const int nr = static_cast<int>(std::min<int64_t>(kMaxTileRows, rb - r));
            const uint16_t* wb = w + (r0 + r) * k + c0 * kBlock;
            if constexpr (kDp) {
              float* sums = c0 + cb == nb && t < tb_direct ? out + (t0 + t) * ldo + r0 + r : nullptr;
              kTiles[nr - 1][nt - 1](wb, k, x.values.data() + xo, x.padded, nfull, last_masked, tail,
                                     acc + (t * rb + r) * 16, rb, /*first=*/c0 == 0, nullptr, sums, ldo);
            } else {
              kFmaTiles[nr - 1][nt - 1](wb, k, split + xo, x.padded, nfull, last_masked, tail,
                                        acc + (t * rb + r) * 16, rb);
            }
          }
        }
      }
      if (!kDp) _mm_setcsr(csr);  // the lane sums below are ordinary float32 adds
      bf16_lanes::ReduceLanesBlock(acc + tb_direct * rb * 16, (tb - tb_direct) * rb, rb,
                                   out + (t0 + tb_direct) * ldo + r0, ldo);
    }
  }
}

void Gemm(const uint16_t* w, int64_t k, const Bf16Activations& x, const float* split, float* out, int64_t ldo,
          int64_t n0, int64_t n1) {
  GemmT<false>(w, k, x, split, out, ldo, n0, n1);
}
void GemmDp(const uint16_t* w, int64_t k, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  GemmT<true>(w, k, x, nullptr, out, ldo, n0, n1);
}

// One row of RoundActivationsBf16, 32 columns at a time: F32ToBf16's integer rounding (add
// 0x7FFF plus the kept lowest bit, NaN quieted instead) on 16 lanes, the columns past k loaded
// as +0; `split` (when not null) gets the GEMM's layout. (The zero-masked forms of the shifts
// and the narrowing: GCC 12's plain ones merge into an undefined vector and warn.)
void RoundRow(const float* x, int64_t k, int64_t padded, uint16_t* d, float* split) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF), quiet = _mm512_set1_epi32(0x40);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  auto round16 = [&](__m512 v) __attribute__((always_inline)) {
    const __m512i b = _mm512_castps_si512(v);
    const __m512i top = _mm512_maskz_srli_epi32(kAll, b, 16);
    const __m512i r = _mm512_maskz_srli_epi32(
        kAll, _mm512_add_epi32(_mm512_add_epi32(b, bias), _mm512_and_si512(top, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, abs_mask), inf);
    return _mm512_maskz_cvtepi32_epi16(kAll, _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, quiet)));
  };
  for (int64_t c = 0; c < padded; c += kBlock) {
    const int64_t n = std::clamp<int64_t>(k - c, 0, kBlock);
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << n) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), x + c);
    const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), x + c + 16);
    const __m512i bv =
        _mm512_maskz_inserti64x4(static_cast<__mmask8>(0xFF), _mm512_castsi256_si512(round16(lo)), round16(hi), 1);
    _mm512_storeu_si512(d + c, bv);
    if (split != nullptr) {
      _mm512_storeu_ps(split + c, _mm512_castsi512_ps(_mm512_and_si512(bv, high)));
      _mm512_storeu_ps(split + c + 16, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, bv, 16)));
    }
  }
}

// One row of SplitActivationsBf16x3: the three parts of x[0, k) as bf16 rows hi, mid, lo (each
// `padded` long, zeros past k), 16 columns at a time (the masked forms of the shifts and the
// narrowing, as RoundRow).
void SplitRow3(const float* x, int64_t k, int64_t padded, uint16_t* hi, uint16_t* mid, uint16_t* lo) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)), exp = _mm512_set1_epi32(0x7F800000);
  const __m512i mant = _mm512_set1_epi32(0x007FFFFF), quiet = _mm512_set1_epi32(0x00400000);
  for (int64_t c = 0; c < padded; c += 16) {
    const int64_t n = std::clamp<int64_t>(k - c, 0, 16);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(m, x + c);
    const __m512i b = _mm512_castps_si512(a);
    const __mmask16 finite = _mm512_cmpneq_epi32_mask(_mm512_and_si512(b, exp), exp);
    const __mmask16 nan = _mm512_mask_test_epi32_mask(static_cast<__mmask16>(~finite), b, mant);
    const __m512i hb = _mm512_mask_or_epi32(_mm512_and_si512(b, high), nan, _mm512_and_si512(b, high), quiet);
    const __m512 r1 = _mm512_sub_ps(a, _mm512_castsi512_ps(hb));
    const __m512i mb = _mm512_maskz_and_epi32(finite, _mm512_castps_si512(r1), high);
    const __m512i lb = _mm512_maskz_and_epi32(finite, _mm512_castps_si512(_mm512_sub_ps(r1, _mm512_castsi512_ps(mb))), high);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + c), _mm512_maskz_cvtepi32_epi16(kAll, _mm512_maskz_srli_epi32(kAll, hb, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mid + c), _mm512_maskz_cvtepi32_epi16(kAll, _mm512_maskz_srli_epi32(kAll, mb, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + c), _mm512_maskz_cvtepi32_epi16(kAll, _mm512_maskz_srli_epi32(kAll, lb, 16)));
  }
}

// PackPairsGroup for at most four rows (decode: one token's three split parts): of each 64-byte
// line only the first four words can be nonzero, so a 4 x 4 transpose of words within each
// 128-bit lane gives every line's first 16 bytes, stored with the rest of the line zeroed (about
// a third of the full transpose's instructions).
void PackPairsFew(const uint16_t* values, int64_t rows, int64_t padded, uint16_t* d) {
  constexpr __mmask16 kAll = 0xFFFF;
  constexpr __mmask8 kAll8 = 0xFF;
  for (int64_t c = 0; c < padded; c += 32) {
    __m512i r[4];
    for (int i = 0; i < 4; ++i) r[i] = i < rows ? _mm512_loadu_si512(values + i * padded + c) : _mm512_setzero_si512();
    const __m512i t0 = _mm512_maskz_unpacklo_epi32(kAll, r[0], r[1]), t1 = _mm512_maskz_unpackhi_epi32(kAll, r[0], r[1]);
    const __m512i t2 = _mm512_maskz_unpacklo_epi32(kAll, r[2], r[3]), t3 = _mm512_maskz_unpackhi_epi32(kAll, r[2], r[3]);
    // q[s], 128-bit lane l: words 4l + s of rows 0-3, the start of line c / 2 + 4l + s.
    const __m512i q[4] = {_mm512_maskz_unpacklo_epi64(kAll8, t0, t2), _mm512_maskz_unpackhi_epi64(kAll8, t0, t2),
                          _mm512_maskz_unpacklo_epi64(kAll8, t1, t3), _mm512_maskz_unpackhi_epi64(kAll8, t1, t3)};
    uint16_t* line = d + (c / 2) * 32;
    // Lane l of q[s] moved to lane 0, the other lanes zeroed (the mask keeps words 0-3).
    constexpr __mmask16 kLane0 = 0x000F;
    for (int s = 0; s < 4; ++s) {
      _mm512_storeu_si512(line + s * 32, _mm512_maskz_shuffle_i32x4(kLane0, q[s], q[s], 0));
      _mm512_storeu_si512(line + (4 + s) * 32, _mm512_maskz_shuffle_i32x4(kLane0, q[s], q[s], 1));
      _mm512_storeu_si512(line + (8 + s) * 32, _mm512_maskz_shuffle_i32x4(kLane0, q[s], q[s], 2));
      _mm512_storeu_si512(line + (12 + s) * 32, _mm512_maskz_shuffle_i32x4(kLane0, q[s], q[s], 3));
    }
  }
}

// PackBf16Pairs for one group of up to 16 rows (`rows` of them; the rest zero), 16 pairs (32
// columns) at a time: a 16 x 16 transpose of 32-bit words.
void PackPairsGroup(const uint16_t* values, int64_t rows, int64_t padded, uint16_t* d) {
  if (rows <= 4) {
    PackPairsFew(values, rows, padded, d);
    return;
  }
  constexpr __mmask16 kAll = 0xFFFF;  // (the zero-masked forms: GCC 12 warns on the plain ones)
  constexpr __mmask8 kAll8 = 0xFF;
  for (int64_t c = 0; c < padded; c += 32) {
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = i < rows ? _mm512_loadu_si512(values + i * padded + c) : _mm512_setzero_si512();
    }
    // Rows i, i + 1 interleaved by 32 bits, then by 64, then 128-bit lanes: the classic transpose.
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_maskz_unpacklo_epi32(kAll, r[i], r[i + 1]);
      t[i + 1] = _mm512_maskz_unpackhi_epi32(kAll, r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_maskz_unpacklo_epi64(kAll8, t[i], t[i + 2]);
      r[i + 1] = _mm512_maskz_unpackhi_epi64(kAll8, t[i], t[i + 2]);
      r[i + 2] = _mm512_maskz_unpacklo_epi64(kAll8, t[i + 1], t[i + 3]);
      r[i + 3] = _mm512_maskz_unpackhi_epi64(kAll8, t[i + 1], t[i + 3]);
    }
    // Now r[4q + s] holds, in its 128-bit lane l, word 4l + s of rows 4q .. 4q + 3; output word
    // j = 4l + s wants lane l of r[s], r[4 + s], r[8 + s], r[12 + s]: two rounds of lane shuffles.
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_maskz_shuffle_i32x4(kAll, r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_maskz_shuffle_i32x4(kAll, r[i], r[i + 4], 0xDD);
      t[i + 8] = _mm512_maskz_shuffle_i32x4(kAll, r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_maskz_shuffle_i32x4(kAll, r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm512_maskz_shuffle_i32x4(kAll, t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_maskz_shuffle_i32x4(kAll, t[i], t[i + 8], 0xDD);
      r[i + 4] = _mm512_maskz_shuffle_i32x4(kAll, t[i + 4], t[i + 12], 0x88);
      r[i + 12] = _mm512_maskz_shuffle_i32x4(kAll, t[i + 4], t[i + 12], 0xDD);
    }
    for (int j = 0; j < 16; ++j) _mm512_storeu_si512(d + (c / 2 + j) * 32, r[j]);
  }
}

void DotLanes(float acc[16], const uint16_t a[32], const uint16_t b[32]) {
  const __m512 s = _mm512_loadu_ps(acc);
  const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
  _mm512_storeu_ps(acc, _mm512_dpbf16_ps(s, (__m512bh)va, (__m512bh)vb));
}

}  // namespace bf16_avx512
#pragma GCC pop_options

// ---- AMX tiles ----
namespace bf16_amx {

// Whether the CPU has AMX-TILE and AMX-BF16 and Linux grants this process the tile data state
// (asked once; the kernel refuses where the state is not enabled).
bool Available() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    if ((d & (1u << 22)) == 0 || (d & (1u << 24)) == 0) return false;  // AMX-BF16, AMX-TILE
#if defined(__linux__)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

// The 64-byte tile configuration (palette 1): tiles 0-3 accumulate 16 weight rows x 16 activation
// rows of float32, 4-5 hold 16 weight rows x 32 bf16 columns, 6-7 16 column pairs x 16 rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int64_t kGroup = 16;         // rows of a tile
constexpr int64_t kBlockPairs = 16;    // column pairs of a tile (32 columns)
constexpr int64_t kKBlocks = 16;       // column blocks per pass over the activations (512 columns)
constexpr int64_t kPrefetchBlocks = 4;  // how far ahead decode-sized calls request weight lines

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")

// Weight rows [n, n + 32) (those below n1) x every activation row. The accumulators live in
// `acc` ([2][groups][16][16] float32) between passes over blocks of columns, so the blocks are
// added in column order for every output, whatever the row range or the batch.
void RowPair(const uint16_t* w, int64_t k, const Bf16Activations& x, int64_t gfirst, int64_t gend, int64_t n,
             int64_t n1, float* acc, uint16_t* wtail, float* out, int64_t ldo) {
  const int64_t kp = x.padded, blocks = kp / kBlock, groups = gend - gfirst;
  const int64_t rows0 = std::min<int64_t>(kGroup, n1 - n), rows1 = std::max<int64_t>(0, std::min<int64_t>(kGroup, n1 - n - kGroup));
  // Weight rows read in place, or, for a short row group or a row length that is not whole
  // blocks, copied zero-padded (a tile load reads whole 64-byte rows of 16 rows).
  const bool direct = rows0 == kGroup && (rows1 == kGroup || rows1 == 0) && k % kBlock == 0;
  const uint16_t* wa = w + n * k;
  int64_t lda = k;
  if (!direct) {
    std::fill(wtail, wtail + 2 * kGroup * kp, uint16_t{0});
    for (int64_t r = 0; r < rows0 + rows1; ++r) std::memcpy(wtail + r * kp, w + (n + r) * k, k * sizeof(uint16_t));
    wa = wtail;
    lda = kp;
  }
  const bool two = rows1 > 0;
  // Decode-sized calls (one or two groups of activation rows) read 32 weight rows side by side,
  // 64 bytes of each per block and little work in between: more streams than the hardware
  // prefetchers follow well, so each row's line kPrefetchBlocks blocks ahead is requested.
  const bool prefetch = groups <= 2;
  const size_t ctile = kGroup * kGroup;
  for (int64_t b0 = 0; b0 < blocks; b0 += kKBlocks) {
    const int64_t b1 = std::min(blocks, b0 + kKBlocks);
    for (int64_t g = 0; g < groups; g += 2) {
      const bool g2 = g + 1 < groups;
      float* c00 = acc + (0 * groups + g) * ctile;
      float* c10 = acc + (1 * groups + g) * ctile;
      if (b0 == 0) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      } else {
        _tile_loadd(0, c00, 64);
        _tile_loadd(1, c10, 64);
        if (g2) {
          _tile_loadd(2, c00 + ctile, 64);
          _tile_loadd(3, c10 + ctile, 64);
        }
      }
      const uint16_t* p0 = x.pairs.data() + (gfirst + g) * (kp / 2) * 2 * kGroup;
      const uint16_t* p1 = p0 + (kp / 2) * 2 * kGroup;
      for (int64_t b = b0; b < b1; ++b) {
        if (prefetch && b + kPrefetchBlocks < blocks) {
          const char* pf = reinterpret_cast<const char*>(wa + (b + kPrefetchBlocks) * kBlock);
          for (int64_t r = 0; r < (two ? 2 : 1) * kGroup; ++r) _mm_prefetch(pf + r * lda * 2, _MM_HINT_T0);
        }
        _tile_loadd(4, wa + b * kBlock, lda * 2);
        if (two) _tile_loadd(5, wa + kGroup * lda + b * kBlock, lda * 2);
        _tile_loadd(6, p0 + b * kBlockPairs * 2 * kGroup, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two) _tile_dpbf16ps(1, 5, 6);
        if (g2) {
          _tile_loadd(7, p1 + b * kBlockPairs * 2 * kGroup, 64);
          _tile_dpbf16ps(2, 4, 7);
          if (two) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c00, 64);
      _tile_stored(1, c10, 64);
      if (g2) {
        _tile_stored(2, c00 + ctile, 64);
        _tile_stored(3, c10 + ctile, 64);
      }
    }
  }
  // acc[h][g][r][t]: weight row n + 16h + r, activation row 16 (gfirst + g) + t.
  const int64_t t0 = gfirst * kGroup, t1 = std::min(x.rows, gend * kGroup);
  const auto at = [&](int64_t h, int64_t t) {
    t -= t0;
    return acc + ((h * groups + t / kGroup) * kGroup) * kGroup + t % kGroup;
  };
  for (int64_t h = 0; h < (two ? 2 : 1); ++h) {
    const int64_t rows = h == 0 ? rows0 : rows1;
    if (x.parts == 3) {  // (chunks hold whole tokens: see Rows)
      for (int64_t t = t0 / 3; t < t1 / 3; ++t) {
        const float *hi = at(h, 3 * t), *mid = at(h, 3 * t + 1), *lo = at(h, 3 * t + 2);
        for (int64_t r = 0; r < rows; ++r) {
          out[t * ldo + n + h * kGroup + r] = (hi[r * kGroup] + mid[r * kGroup]) + lo[r * kGroup];
        }
      }
      continue;
    }
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = at(h, t);
      for (int64_t r = 0; r < rows; ++r) out[t * ldo + n + h * kGroup + r] = c[r * kGroup];
    }
  }
}

// Activation rows per pass over the weight rows, in groups of 16: a multiple of 3 groups, so that
// a chunk holds whole tokens of split activations (Bf16Activations::parts). Each weight row pair
// reads a chunk's activations (from L2) once per block of columns; with every row of a long
// prefill in one pass they would come from L3 instead.
constexpr int64_t kChunkGroups = 12;

void Rows(const uint16_t* w, int64_t k, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const int64_t groups = (x.rows + kGroup - 1) / kGroup;
  // Grow-only buffers (RowPair writes what it reads): calls alternate between row lengths (an
  // expert's gate and down), and growing a vector zero-fills what it adds.
  thread_local CacheLineVector<float> acc;
  thread_local std::vector<uint16_t> wtail;
  const size_t nacc = static_cast<size_t>(2 * std::min(groups, kChunkGroups) * kGroup * kGroup);
  const size_t ntail = static_cast<size_t>(2 * kGroup * x.padded);
  if (acc.size() < nacc) acc.resize(nacc);
  if (wtail.size() < ntail) wtail.resize(ntail);
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = kGroup;
    cfg.colsb[i] = 64;
  }
  _tile_loadconfig(&cfg);
  for (int64_t g = 0; g < groups; g += kChunkGroups) {
    const int64_t gend = std::min(groups, g + kChunkGroups);
    for (int64_t n = n0; n < n1; n += 2 * kGroup) RowPair(w, k, x, g, gend, n, n1, acc.data(), wtail.data(), out, ldo);
  }
  _tile_release();
}

#pragma GCC pop_options

}  // namespace bf16_amx

// ---- AVX2 + FMA: the instruction's steps with float32 FMAs (CPUs without AVX512_BF16) ----
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace bf16_avx2 {

// An output's 16 lanes live in two 8-float vectors (lanes 0-7, 8-15). A block of 32 bf16 weights
// is two 256-bit loads of 8 column pairs each; a pair's odd-column value is the high half of its
// 32-bit word (an AND), its even-column one the low half shifted up, both exactly as float32.
// The activations come as Bf16Activations::split (per block: the 16 odd-column values, then the
// 16 even-column ones). Lane i takes fma(x_odd, w_odd) and then fma(x_even, w_even), under
// MXCSR's DAZ and FTZ (set by the callers around the tiles), so the bits are `vdpbf16ps`'s, as
// in bf16_avx512::TileFma.
struct Lanes {
  __m256 lo, hi;
};

inline void SplitWeights(const uint16_t* w, __m256* wo_lo, __m256* wo_hi, __m256* we_lo, __m256* we_hi) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
  *wo_lo = _mm256_castsi256_ps(_mm256_and_si256(v0, high));
  *wo_hi = _mm256_castsi256_ps(_mm256_and_si256(v1, high));
  *we_lo = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));
  *we_hi = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
}

// R weight rows x TT activation rows over blocks [0, nfull), then, when `tails` is not null, one
// more block whose weights are tails[r] (the row's last k % 32 values, zero-padded to 32).
// acc[(t * ld_acc + r) * 16] holds the lanes in and out (as bf16_avx512::Tile).
// kPrefetch: read each weight row kPrefetchBytes ahead in software (the GEMV streams R rows from
// memory at once; the hardware prefetchers stop at every 4 KiB page).
constexpr int64_t kPrefetchBytes = 2048;
template <int R, int TT, bool kPrefetch>
inline void Tile(const uint16_t* w, int64_t ldw, const float* x, int64_t ldx, int64_t nfull,
                 const uint16_t (*tails)[kBlock], float* acc, int64_t ld_acc) {
  Lanes a[TT][R];
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a[t][r].lo = _mm256_loadu_ps(acc + (t * ld_acc + r) * 16);
      a[t][r].hi = _mm256_loadu_ps(acc + (t * ld_acc + r) * 16 + 8);
    }
  }
  auto step = [&](int64_t col, bool tail) __attribute__((always_inline)) {
    __m256 wo_lo[R], wo_hi[R], we_lo[R], we_hi[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w + r * ldw + col) + kPrefetchBytes, _MM_HINT_T0);
      SplitWeights(tail ? tails[r] : w + r * ldw + col, &wo_lo[r], &wo_hi[r], &we_lo[r], &we_hi[r]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const float* xs = x + t * ldx + col;
      const __m256 xo_lo = _mm256_loadu_ps(xs), xo_hi = _mm256_loadu_ps(xs + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a[t][r].lo = _mm256_fmadd_ps(xo_lo, wo_lo[r], a[t][r].lo);
        a[t][r].hi = _mm256_fmadd_ps(xo_hi, wo_hi[r], a[t][r].hi);
      }
      const __m256 xe_lo = _mm256_loadu_ps(xs + 16), xe_hi = _mm256_loadu_ps(xs + 24);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a[t][r].lo = _mm256_fmadd_ps(xe_lo, we_lo[r], a[t][r].lo);
        a[t][r].hi = _mm256_fmadd_ps(xe_hi, we_hi[r], a[t][r].hi);
      }
    }
  };
  for (int64_t c = 0; c < nfull; ++c) step(c * kBlock, false);
  if (tails != nullptr) step(nfull * kBlock, true);
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(acc + (t * ld_acc + r) * 16, a[t][r].lo);
      _mm256_storeu_ps(acc + (t * ld_acc + r) * 16 + 8, a[t][r].hi);
    }
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, const uint16_t (*)[kBlock], float*,
                        int64_t);
// The GEMV's tiles: up to four weight rows (8 accumulators, 16 split weights in flight) over one
// activation row; the GEMM's: one weight row, split once, over up to four activation rows.
constexpr int kGemvRows = 4;
constexpr int kGemmTileTokens = 4;
constexpr TileFn kGemvTiles[kGemvRows] = {Tile<1, 1, true>, Tile<2, 1, true>, Tile<3, 1, true>, Tile<4, 1, true>};
constexpr TileFn kGemmTiles[kGemmTileTokens] = {Tile<1, 1, false>, Tile<1, 2, false>, Tile<1, 3, false>,
                                                Tile<1, 4, false>};

// The last k % 32 weights of rows n .. n + nr - 1, zero-padded to a block.
inline void Tails(const uint16_t* w, int64_t k, int64_t n, int nr, uint16_t (*tails)[kBlock]) {
  const int64_t nfull = k / kBlock, rest = k % kBlock;
  for (int r = 0; r < nr; ++r) {
    std::memset(tails[r], 0, sizeof(tails[r]));
    std::memcpy(tails[r], w + (n + r) * k + nfull * kBlock, static_cast<size_t>(rest) * sizeof(uint16_t));
  }
}

// DAZ (bit 6) and FTZ (bit 15) for the scope: the FMAs flush denormals as `vdpbf16ps` does. The
// lane sums after it are ordinary float32 adds.
class FlushDenormals {
 public:
  FlushDenormals() : csr_(_mm_getcsr()) { _mm_setcsr(csr_ | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(csr_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned csr_;
};

// Decode: four weight rows at a time stream over the whole row once per activation row.
void Gemv(const uint16_t* w, int64_t k, const float* split, int64_t rows, int64_t padded, float* out, int64_t ldo,
          int64_t n0, int64_t n1) {
  const int64_t nfull = k / kBlock;
  const bool masked = k % kBlock != 0;
  alignas(32) float acc[kGemvRows * 16];
  alignas(32) uint16_t tails[kGemvRows][kBlock];
  for (int64_t n = n0; n < n1; n += kGemvRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kGemvRows, n1 - n));
    if (masked) Tails(w, k, n, nr, tails);
    for (int64_t t = 0; t < rows; ++t) {
      std::memset(acc, 0, sizeof(acc));
      {
        FlushDenormals flush;
        kGemvTiles[nr - 1](w + n * k, k, split + t * padded, padded, nfull, masked ? tails : nullptr, acc, 1);
      }
      for (int r = 0; r < nr; ++r) out[t * ldo + n + r] = ReduceLanes(acc + r * 16);
    }
  }
}

// Prefill and batched decode: blocks of kGemmTokens activation rows x kGemmRows weight rows x
// kGemmBlocks column blocks, as bf16_avx512::Gemm (the weight block stays in L1 while the token
// tiles pass over it; the lanes continue across column blocks in memory, so each output is the
// GEMV's bit for bit).
void Gemm(const uint16_t* w, int64_t k, const float* split, int64_t rows, int64_t padded, float* out, int64_t ldo,
          int64_t n0, int64_t n1) {
  constexpr int64_t kTokens = 64, kRows = 16, kBlocks = 16;
  const int64_t nb = padded / kBlock;
  const bool masked = k % kBlock != 0;
  thread_local CacheLineVector<float> accs;
  accs.resize(static_cast<size_t>(kTokens * kRows * 16));
  float* acc = accs.data();
  alignas(32) uint16_t tails[kRows][kBlock];
  for (int64_t t0 = 0; t0 < rows; t0 += kTokens) {
    const int64_t tb = std::min(kTokens, rows - t0);
    for (int64_t r0 = n0; r0 < n1; r0 += kRows) {
      const int64_t rb = std::min(kRows, n1 - r0);
      std::fill(acc, acc + tb * rb * 16, 0.0f);
      if (masked) Tails(w, k, r0, static_cast<int>(rb), tails);
      {
        FlushDenormals flush;
        for (int64_t c0 = 0; c0 < nb; c0 += kBlocks) {
          const int64_t cb = std::min(kBlocks, nb - c0);
          const bool last_masked = masked && c0 + cb == nb;
          const int64_t nfull = last_masked ? cb - 1 : cb;
          for (int64_t t = 0; t < tb; t += kGemmTileTokens) {
            const int nt = static_cast<int>(std::min<int64_t>(kGemmTileTokens, tb - t));
            const float* xs = split + (t0 + t) * padded + c0 * kBlock;
            for (int64_t r = 0; r < rb; ++r) {
              kGemmTiles[nt - 1](w + (r0 + r) * k + c0 * kBlock, k, xs, padded, nfull,
                                 last_masked ? tails + r : nullptr, acc + (t * rb + r) * 16, rb);
            }
          }
        }
      }
      for (int64_t t = 0; t < tb; ++t) {
        for (int64_t r = 0; r < rb; ++r) out[(t0 + t) * ldo + r0 + r] = ReduceLanes(acc + (t * rb + r) * 16);
      }
    }
  }
}

void DotLanes(float acc[16], const uint16_t a[32], const uint16_t b[32]) {
  __m256 ao_lo, ao_hi, ae_lo, ae_hi, bo_lo, bo_hi, be_lo, be_hi;
  SplitWeights(a, &ao_lo, &ao_hi, &ae_lo, &ae_hi);
  SplitWeights(b, &bo_lo, &bo_hi, &be_lo, &be_hi);
  FlushDenormals flush;
  __m256 lo = _mm256_loadu_ps(acc), hi = _mm256_loadu_ps(acc + 8);
  lo = _mm256_fmadd_ps(ao_lo, bo_lo, lo);
  hi = _mm256_fmadd_ps(ao_hi, bo_hi, hi);
  lo = _mm256_fmadd_ps(ae_lo, be_lo, lo);
  hi = _mm256_fmadd_ps(ae_hi, be_hi, hi);
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
}

}  // namespace bf16_avx2
#pragma GCC pop_options

#endif  // LLMRT_BF16_X86

#if LLMRT_BF16_X86
namespace {
// PackBf16Pairs' layout into d (every word of its ceil(rows / 16) groups written), on AVX-512.
void PackPairsAvx512(const uint16_t* values, int64_t rows, int64_t padded, uint16_t* d) {
  for (int64_t g = 0; 16 * g < rows; ++g) {
    bf16_avx512::PackPairsGroup(values + g * 16 * padded, std::min<int64_t>(16, rows - 16 * g), padded,
                                d + g * padded * 16);
  }
}
}  // namespace
#endif

void PackBf16Pairs(const uint16_t* values, int64_t rows, int64_t padded, CacheLineVector<uint16_t>* pairs) {
  const int64_t groups = (rows + 15) / 16, half = padded / 2;
#if LLMRT_BF16_X86
  if (padded % 32 == 0 && Bf16IsaAvailable(Bf16Isa::kAvx512Bf16)) {
    pairs->resize(static_cast<size_t>(groups * half * 32));  // every word written below
    PackPairsAvx512(values, rows, padded, pairs->data());
    return;
  }
#endif
  pairs->assign(static_cast<size_t>(groups * half * 32), uint16_t{0});
  for (int64_t t = 0; t < rows; ++t) {
    const uint16_t* v = values + t * padded;
    uint16_t* d = pairs->data() + (t / 16) * half * 32 + (t % 16) * 2;
    for (int64_t j = 0; j < half; ++j) {
      d[j * 32] = v[2 * j];
      d[j * 32 + 1] = v[2 * j + 1];
    }
  }
}

namespace {

// The split layout of Bf16Activations (per block of 32: the odd-column values, then the even
// ones, as float32) of `rows` rows of bf16 values (row stride `padded`).
void SplitBf16(const uint16_t* values, int64_t rows, int64_t padded, float* split) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* v = values + r * padded;
    float* d = split + r * padded;
    for (int64_t c = 0; c < padded; c += kBlock) {
      for (int64_t i = 0; i < 16; ++i) {
        d[c + i] = Bf16ToF32(v[c + 2 * i + 1]);
        d[c + 16 + i] = Bf16ToF32(v[c + 2 * i]);
      }
    }
  }
}

}  // namespace

void RoundRowsBf16(const float* x, int64_t ldx, int64_t t, int64_t k, int64_t padded, uint16_t* out) {
  LLMRT_CHECK(t >= 0 && k >= 0 && padded >= k && padded % kBlock == 0);
#if LLMRT_BF16_X86
  if (Bf16IsaAvailable(Bf16Isa::kAvx512Bf16)) {
    for (int64_t r = 0; r < t; ++r) bf16_avx512::RoundRow(x + r * ldx, k, padded, out + r * padded, nullptr);
    return;
  }
#endif
  for (int64_t r = 0; r < t; ++r) {
    uint16_t* d = out + r * padded;
    F32ToBf16Array(x + r * ldx, d, static_cast<size_t>(k));
    std::fill(d + k, d + padded, uint16_t{0});
  }
}

void RoundActivationsBf16(const float* x, int64_t ldx, int64_t t, int64_t k, Bf16Activations* out) {
  LLMRT_CHECK(t >= 0 && k >= 0);
  out->rows = t;
  out->cols = k;
  out->parts = 1;
  out->padded = (k + kBlock - 1) / kBlock * kBlock;
  out->values.resize(static_cast<size_t>(t * out->padded));
  // The tiles' layout wherever the AMX path can run (it is then the best path); the FMA GEMM's
  // split layout wherever that loop is the one a batch takes (Bf16MatMulRows makes it for an
  // explicit kGemm otherwise): not where the `vdpbf16ps` GEMM runs on the values (AMD), whose
  // matmuls would write 8 bytes of floats per activation for nothing.
  const bool amx = Bf16IsaAvailable(Bf16Isa::kAmx);
  const bool dp_gemm = !amx && Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) && Bf16DpFullRate();
  // (The AVX2 path reads only the split layout.)
  const bool gemm = (t >= kBf16GemmMinTokens && !dp_gemm) || BestBf16Isa() == Bf16Isa::kAvx2Fma;
  if (!amx) out->pairs.clear();
  if (gemm) {
    out->split.resize(out->values.size());
  } else {
    out->split.clear();
  }
#if LLMRT_BF16_X86
  if (Bf16IsaAvailable(Bf16Isa::kAvx512Bf16)) {
    for (int64_t r = 0; r < t; ++r) {
      bf16_avx512::RoundRow(x + r * ldx, k, out->padded, out->values.data() + r * out->padded,
                            gemm ? out->split.data() + r * out->padded : nullptr);
    }
    if (amx) PackBf16Pairs(out->values.data(), t, out->padded, &out->pairs);
    return;
  }
#endif
  RoundRowsBf16(x, ldx, t, k, out->padded, out->values.data());
  // The GEMM's float32 layout, only where the GEMM may run.
  if (gemm) SplitBf16(out->values.data(), t, out->padded, out->split.data());
}

namespace {

// Tokens [c0, c1) of a split (SplitActivationsBf16x3): their parts, then, on the AMX layout,
// the groups of 16 rows that hold them (c0 a multiple of 16: a chunk's groups are its own).
void SplitTokens(const float* x, int64_t ldx, int64_t k, int64_t c0, int64_t c1, Bf16Activations* out) {
  const int64_t kp = out->padded;
#if LLMRT_BF16_X86
  const bool avx512 = Bf16IsaAvailable(Bf16Isa::kAvx512Bf16);
#endif
  for (int64_t r = c0; r < c1; ++r) {
    const float* xr = x + r * ldx;
    uint16_t* hi = out->values.data() + 3 * r * kp;
    uint16_t* mid = hi + kp;
    uint16_t* lo = mid + kp;
#if LLMRT_BF16_X86
    if (avx512) {
      bf16_avx512::SplitRow3(xr, k, kp, hi, mid, lo);
      continue;
    }
#endif
    for (int64_t c = 0; c < kp; ++c) {
      uint32_t b = 0;
      if (c < k) std::memcpy(&b, xr + c, 4);
      if ((b & 0x7F800000u) == 0x7F800000u) {  // infinity or NaN: hi alone (a NaN quieted)
        hi[c] = static_cast<uint16_t>((b >> 16) | ((b & 0x007FFFFFu) != 0 ? 0x0040u : 0u));
        mid[c] = lo[c] = 0;
        continue;
      }
      const uint32_t hb = b & 0xFFFF0000u;
      float a, hf, mf;
      std::memcpy(&a, &b, 4);
      std::memcpy(&hf, &hb, 4);
      const float r1 = a - hf;  // exact: the bits of a below hi's
      uint32_t rb;
      std::memcpy(&rb, &r1, 4);
      const uint32_t mb = rb & 0xFFFF0000u;
      std::memcpy(&mf, &mb, 4);
      const float r2 = r1 - mf;  // exact, and at most 8 significant bits: a bf16 value
      uint32_t lb;
      std::memcpy(&lb, &r2, 4);
      hi[c] = static_cast<uint16_t>(hb >> 16);
      mid[c] = static_cast<uint16_t>(mb >> 16);
      lo[c] = static_cast<uint16_t>(lb >> 16);
    }
  }
#if LLMRT_BF16_X86
  if (!out->pairs.empty()) {  // the AMX layout (sized by the caller)
    const int64_t rows = 3 * c1;
    for (int64_t g = 3 * c0 / 16; 16 * g < rows; ++g) {
      bf16_avx512::PackPairsGroup(out->values.data() + g * 16 * kp, std::min<int64_t>(16, rows - 16 * g), kp,
                                  out->pairs.data() + g * kp * 16);
    }
  }
#endif
}

constexpr int64_t kSplitChunk = 16;  // tokens per parallel chunk (3 x 16 rows: whole groups)

}  // namespace

void SplitActivationsBf16x3(const float* x, int64_t ldx, int64_t t, int64_t k, Bf16Activations* out,
                            const ParallelRunner* parallel) {
  LLMRT_CHECK(t >= 0 && k >= 0);
  out->rows = 3 * t;
  out->cols = k;
  out->parts = 3;
  out->padded = (k + kBlock - 1) / kBlock * kBlock;
  const int64_t kp = out->padded;
  // The buffers only grow (every element a call uses is written): calls alternate between batch
  // sizes (the MoE's experts each take their own tokens), and growing a std::vector zero-fills
  // what it adds, 1.4% of a 64-session step when they were resized to each call.
  const size_t nv = static_cast<size_t>(3 * t * kp);
  if (out->values.size() < nv) out->values.resize(nv);
  out->split.clear();
  bool amx = false;
#if LLMRT_BF16_X86
  amx = Bf16IsaAvailable(Bf16Isa::kAmx);  // (which implies AVX-512)
#endif
  if (amx) {
    const size_t np = static_cast<size_t>((out->rows + 15) / 16 * kp * 16);
    if (out->pairs.size() < np) out->pairs.resize(np);
  } else {
    out->pairs.clear();
  }
  const int64_t chunks = (t + kSplitChunk - 1) / kSplitChunk;
  const auto body = [&](size_t b, size_t e) {
    SplitTokens(x, ldx, k, static_cast<int64_t>(b) * kSplitChunk,
                std::min<int64_t>(t, static_cast<int64_t>(e) * kSplitChunk), out);
  };
  if (parallel != nullptr && chunks >= 2) {
    (*parallel)(static_cast<size_t>(chunks), body);
  } else {
    body(0, static_cast<size_t>(chunks));
  }
}

const char* Bf16IsaName(Bf16Isa isa) {
  switch (isa) {
    case Bf16Isa::kScalar: return "scalar";
    case Bf16Isa::kAvx512Bf16: return "avx512-bf16";
    case Bf16Isa::kAmx: return "amx-bf16";
    case Bf16Isa::kAvx2Fma: return "avx2-fma";
  }
  return "unknown";
}

bool Bf16IsaAvailable(Bf16Isa isa) {
  switch (isa) {
    case Bf16Isa::kScalar: return true;
#if LLMRT_BF16_X86
    case Bf16Isa::kAvx512Bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    case Bf16Isa::kAmx:
      return Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) && bf16_amx::Available();
    case Bf16Isa::kAvx2Fma:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    default: return false;
#endif
  }
  return false;
}

bool Bf16DpFullRate() {
#if LLMRT_BF16_X86
  // AMD's cores with AVX512_BF16 (Zen 4 on) issue `vdpbf16ps` as fast as an FMA, 32 products
  // against 16; Intel's (Cooper Lake, Sapphire Rapids) once per two cycles.
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

Bf16Isa BestBf16Isa() {
  static const Bf16Isa best = Bf16IsaAvailable(Bf16Isa::kAmx)          ? Bf16Isa::kAmx
                              : Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) ? Bf16Isa::kAvx512Bf16
                              : Bf16IsaAvailable(Bf16Isa::kAvx2Fma)    ? Bf16Isa::kAvx2Fma
                                                                       : Bf16Isa::kScalar;
  return best;
}

void Bf16MatMulRows(Bf16Isa isa, Bf16Loop loop, const uint16_t* w, int64_t k, const Bf16Activations& x, float* out,
                    int64_t ldo, int64_t n0, int64_t n1) {
  LLMRT_CHECK(x.cols == k && Bf16IsaAvailable(isa) && n0 <= n1);
  LLMRT_CHECK(x.parts == 1 || (x.parts == 3 && isa == Bf16Isa::kAmx && x.rows % 3 == 0));
  if (x.rows == 0 || n0 == n1) return;
  // The split layout of the FMA loops, made here where the rounding left it out.
  auto split_of = [&x]() -> const float* {
    if (x.split.size() == x.values.size()) return x.split.data();
    thread_local CacheLineVector<float> own;
    own.resize(x.values.size());
    SplitBf16(x.values.data(), x.rows, x.padded, own.data());
    return own.data();
  };
  switch (isa) {
#if LLMRT_BF16_X86
    case Bf16Isa::kAvx2Fma: {
      // Both loops read the split layout; activations rounded where another path is the best
      // carry it only from kBf16GemmMinTokens rows on, so it is made here for the others.
      const float* split = split_of();
      const bool gemm = loop == Bf16Loop::kGemm || (loop == Bf16Loop::kAuto && x.rows >= kBf16GemmMinTokens);
      return gemm ? bf16_avx2::Gemm(w, k, split, x.rows, x.padded, out, ldo, n0, n1)
                  : bf16_avx2::Gemv(w, k, split, x.rows, x.padded, out, ldo, n0, n1);
    }
    case Bf16Isa::kAmx:
      LLMRT_CHECK(x.pairs.size() >= static_cast<size_t>((x.rows + 15) / 16 * x.padded * 16));
      return bf16_amx::Rows(w, k, x, out, ldo, n0, n1);
    case Bf16Isa::kAvx512Bf16: {
      if (loop == Bf16Loop::kAuto) {
        loop = x.rows < kBf16GemmMinTokens ? Bf16Loop::kGemv
               : Bf16DpFullRate()          ? Bf16Loop::kGemmDp
                                           : Bf16Loop::kGemm;
      }
      if (loop == Bf16Loop::kGemmDp) return bf16_avx512::GemmDp(w, k, x, out, ldo, n0, n1);
      return loop == Bf16Loop::kGemm ? bf16_avx512::Gemm(w, k, x, split_of(), out, ldo, n0, n1)
                                     : bf16_avx512::Gemv(w, k, x, out, ldo, n0, n1);
    }
#endif
    default: return RowsScalar(w, k, x, out, ldo, n0, n1);
  }
}

void Bf16MatMulRowsBest(const uint16_t* w, int64_t k, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                        int64_t n1) {
  Bf16MatMulRows(BestBf16Isa(), Bf16Loop::kAuto, w, k, x, out, ldo, n0, n1);
}

void Bf16DotLanes(Bf16Isa isa, float acc[16], const uint16_t a[32], const uint16_t b[32]) {
  LLMRT_CHECK(Bf16IsaAvailable(isa));
  switch (isa) {
#if LLMRT_BF16_X86
    case Bf16Isa::kAvx512Bf16: return bf16_avx512::DotLanes(acc, a, b);
    case Bf16Isa::kAvx2Fma: return bf16_avx2::DotLanes(acc, a, b);
#endif
    default: return DotLanesScalar(acc, a, b);
  }
}

}  // namespace llmrt::cpu
