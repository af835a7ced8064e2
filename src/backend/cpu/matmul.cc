// Matrix products over weight formats, SIMD with Highway runtime dispatch.
//
// Decode multiplies a few activation rows by large weight matrices: it is bound by the bytes
// of weights read. The kernel streams each weight row once per group of two activation rows,
// four weight rows at a time (eight independent accumulators), widening bfloat16 to float32 in
// registers (a 16-bit shift), so that bf16 weights cost half the bytes of f32 ones.
//
// Quantized weights (FP8 block-scaled, INT4 group-scaled) are decoded one scale block (FP8) or
// group (INT4) at a time into float32 codes (SIMD), multiplied by the activations, and folded
// into a per-row vector accumulator with the block's scale (w = q * scale). Prefill decodes the
// blocks of four rows once for all its activation rows. INT4 blocks are laid out per 32-column
// chunk as its 16 even columns then its 16 odd ones (the two nibbles of 16 bytes), and the
// activations are permuted to match once per call (PrepareActivations).

#ifndef LLMRT_BACKEND_CPU_MATMUL_ONCE_
#define LLMRT_BACKEND_CPU_MATMUL_ONCE_
#include <cstdint>
namespace llmrt::cpu {
// The longest weight rows (bytes) the one-row dense kernel prefetches ahead of its loads (see
// Rows4): every length on AMD cores with AVX-512 (Zen 4 on), 2 KiB elsewhere.
inline int64_t PrefetchRowBytes() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int64_t bytes =
      __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f") ? INT64_MAX : int64_t{2048};
  return bytes;
#else
  return 2048;
#endif
}
}  // namespace llmrt::cpu
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "src/backend/cpu/bf16_lanes.h"
#include "src/backend/cpu/cache_line_vector.h"
#include "src/backend/cpu/kernels.h"
#include "src/quant/fp8.h"
#include "src/quant/weight_quant.h"
#include "src/util/bf16.h"
#include "src/util/status.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

HWY_INLINE hn::Vec<DF> LoadW(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE hn::Vec<DF> LoadW(DF df, const uint16_t* p) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint16_t, DF> du16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
}
// float8 e4m3fn bytes -> float32 / 256, exactly. The byte's sign and 7 magnitude bits placed as
// a float16's sign, exponent and top mantissa bits make the float16 2^(e - 15) * 1.m (or the
// subnormal m * 2^-17): the e4m3 value 2^(e - 7) * 1.m (or m * 2^-9) over 2^8, and the
// float16 -> float32 conversion (vcvtph2ps) is exact. Sign-extending the byte to 16 bits and
// shifting by 7 leaves its sign in bits 14 and 15; one mask clears bit 14. That is three integer
// instructions and the conversion per 16 codes, where placing the bits into a float32 directly
// needs a multiply by 2^120 whose subnormal inputs (the codes with a zero exponent, which real
// checkpoints hold) take a slow microcode path on x86. The matmuls fold the 2^8 into the scales
// (kFp8Fold): multiplying by a power of two is exact, so the products and sums are those of the
// true values scaled by 2^-8, and the results are the same floats. (0x7F, NaN in e4m3fn, does
// not occur in checkpoints and reads as 480.)
constexpr float kFp8Fold = 256.0f;
HWY_INLINE hn::Vec<DF> Fp8ToF32Folded(DF df, const uint8_t* p) {
  const hn::Rebind<int8_t, DF> di8;
  const hn::Rebind<int16_t, DF> di16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto b = hn::PromoteTo(di16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p)));
  const auto bits = hn::And(hn::ShiftLeft<7>(b), hn::Set(di16, static_cast<int16_t>(0xBFFF)));
  return hn::PromoteTo(df, hn::BitCast(df16, bits));
}
// The true values (FP8 KV rows), for the paths that do not fold.
HWY_INLINE hn::Vec<DF> Fp8ToF32(DF df, const uint8_t* p) {
  return hn::Mul(Fp8ToF32Folded(df, p), hn::Set(df, kFp8Fold));
}

HWY_INLINE hn::Vec<DF> LoadW(DF df, const uint8_t* p) { return Fp8ToF32(df, p); }

// INT4 codes widened to 32-bit lanes (a byte each: the low nibble one column's code q, the high
// nibble the next column's) -> q - 8 of each nibble as floats, exactly. A nibble ORed into the
// mantissa of 2^23 (bits 0-3) or of 2^19 (bits 4-7, where one unit of the nibble is 2^4 units
// in the last place of 2^19) makes the float 2^k + q, and subtracting 2^k + 8 leaves q - 8
// exactly: no integer-to-float conversion, and on AVX-512 each mask-and-OR is one vpternlogd
// (two instructions per half, where masking or shifting, converting and subtracting took three).
HWY_INLINE void Int4Nibbles(DF df, hn::Vec<hn::RebindToUnsigned<DF>> c, hn::Vec<DF>* lo, hn::Vec<DF>* hi) {
  const hn::RebindToUnsigned<DF> du32;
  *lo = hn::Sub(hn::BitCast(df, hn::OrAnd(hn::Set(du32, 0x4B000000u), c, hn::Set(du32, 0x0Fu))),
                hn::Set(df, 8388616.0f));  // 2^23 + 8
  *hi = hn::Sub(hn::BitCast(df, hn::OrAnd(hn::Set(du32, 0x49000000u), c, hn::Set(du32, 0xF0u))),
                hn::Set(df, 524296.0f));  // 2^19 + 8
}
HWY_INLINE float ScalarW(const float* p) { return *p; }
HWY_INLINE float ScalarW(const uint16_t* p) { return Bf16ToF32(*p); }
HWY_INLINE float ScalarW(const uint8_t* p) { return Fp8E4M3::ToFloat(*p); }

// Four weight rows against one or two activation rows: the vector part of the dot products,
// one accumulator per (weight row, activation row) pair. kPrefetch: also bring the next four
// rows (`next`, contiguous after these) into L2, one stretch of them per iteration: the group's
// 4 x K values take K / N iterations, and the next group is as long, so the prefetches run a
// whole group ahead of the loads and finish with the loop. Decode reads each weight once, and
// the hardware prefetchers alone restart on every group of short rows. Rows of up to
// PrefetchRowBytes() take it. On Zen 3 longer rows stream well without it and lose to it (it
// competes with the hardware prefetchers). One thread, Zen 3, bf16 rows, GB/s against a plain
// read loop's 11-15: 512 columns 5-6 -> 9.5-10.6 with it, 1024: 7.5 -> 10.7-11.2, 2048: about
// even, 4096: 10.4-13.3 -> 9.1-12.2, 7168: 14.4-15.6 -> 11.5-13.2. On Zen 4 (AMD with AVX-512)
// every row length gains from it: two threads, a 512 MiB matrix, 4096 columns 23-31 -> 29-41
// GB/s, 7168 columns 24-34 -> 29-37; batch-1 decode step p50 about 5% lower.
template <bool kPrefetch, bool kTwo, typename WT, class V>
HWY_INLINE void Rows4(DF df, const WT* w0, int64_t K, int64_t kv, const float* xa, const float* xb, const WT* next,
                      V& a0, V& a1, V& a2, V& a3, V& b0, V& b1, V& b2, V& b3) {
  constexpr size_t kStep = 4 * hn::MaxLanes(DF()) * sizeof(WT);  // bytes of the group per iteration
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const WT* w1 = w0 + K;
  const WT* w2 = w1 + K;
  const WT* w3 = w2 + K;
  const char* pf = reinterpret_cast<const char*>(next);
  for (int64_t k = 0; k < kv; k += N) {
    if constexpr (kPrefetch) {
      for (size_t b = 0; b < kStep; b += 64) __builtin_prefetch(pf + b, 0, 2);
      pf += kStep;
    }
    const auto va = hn::LoadU(df, xa + k);
    const auto v0 = LoadW(df, w0 + k);
    const auto v1 = LoadW(df, w1 + k);
    const auto v2 = LoadW(df, w2 + k);
    const auto v3 = LoadW(df, w3 + k);
    a0 = hn::MulAdd(v0, va, a0);
    a1 = hn::MulAdd(v1, va, a1);
    a2 = hn::MulAdd(v2, va, a2);
    a3 = hn::MulAdd(v3, va, a3);
    if constexpr (kTwo) {
      const auto vb = hn::LoadU(df, xb + k);
      b0 = hn::MulAdd(v0, vb, b0);
      b1 = hn::MulAdd(v1, vb, b1);
      b2 = hn::MulAdd(v2, vb, b2);
      b3 = hn::MulAdd(v3, vb, b3);
    }
  }
}

template <typename WT>
void MatMulRowsT(const WT* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out,
                 int64_t ldo, int64_t n0, int64_t n1) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t kv = K - K % N;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const WT* w0 = w + n * K;
    const WT* w1 = w0 + K;
    const WT* w2 = w1 + K;
    const WT* w3 = w2 + K;
    // The first pass over short rows prefetches the next four when they are in the range.
    const bool prefetch = n + 8 <= n1 && K % N == 0 && K * static_cast<int64_t>(sizeof(WT)) <= PrefetchRowBytes();
    for (int64_t t = 0; t < T; t += 2) {
      const bool two = t + 1 < T;
      const float* xa = x + t * ldx;
      const float* xb = two ? xa + ldx : xa;
      auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
      auto b0 = hn::Zero(df), b1 = hn::Zero(df), b2 = hn::Zero(df), b3 = hn::Zero(df);
      if (prefetch && t == 0) {
        if (two) {
          Rows4<true, true>(df, w0, K, kv, xa, xb, w0 + 4 * K, a0, a1, a2, a3, b0, b1, b2, b3);
        } else {
          Rows4<true, false>(df, w0, K, kv, xa, xb, w0 + 4 * K, a0, a1, a2, a3, b0, b1, b2, b3);
        }
      } else if (two) {
        Rows4<false, true>(df, w0, K, kv, xa, xb, w0, a0, a1, a2, a3, b0, b1, b2, b3);
      } else {
        Rows4<false, false>(df, w0, K, kv, xa, xb, w0, a0, a1, a2, a3, b0, b1, b2, b3);
      }
      float sa[4] = {hn::GetLane(hn::SumOfLanes(df, a0)), hn::GetLane(hn::SumOfLanes(df, a1)),
                     hn::GetLane(hn::SumOfLanes(df, a2)), hn::GetLane(hn::SumOfLanes(df, a3))};
      float sb[4] = {hn::GetLane(hn::SumOfLanes(df, b0)), hn::GetLane(hn::SumOfLanes(df, b1)),
                     hn::GetLane(hn::SumOfLanes(df, b2)), hn::GetLane(hn::SumOfLanes(df, b3))};
      const WT* rows[4] = {w0, w1, w2, w3};
      for (int64_t k = kv; k < K; ++k) {
        for (int r = 0; r < 4; ++r) {
          const float wv = ScalarW(rows[r] + k);
          sa[r] += wv * xa[k];
          sb[r] += wv * xb[k];
        }
      }
      for (int r = 0; r < 4; ++r) {
        out[t * ldo + n + r] = sa[r];
        if (two) out[(t + 1) * ldo + n + r] = sb[r];
      }
    }
  }
  for (; n < n1; ++n) {
    const WT* w0 = w + n * K;
    for (int64_t t = 0; t < T; ++t) {
      const float* xa = x + t * ldx;
      auto a0 = hn::Zero(df);
      for (int64_t k = 0; k < kv; k += N) a0 = hn::MulAdd(LoadW(df, w0 + k), hn::LoadU(df, xa + k), a0);
      float s = hn::GetLane(hn::SumOfLanes(df, a0));
      for (int64_t k = kv; k < K; ++k) s += ScalarW(w0 + k) * xa[k];
      out[t * ldo + n] = s;
    }
  }
}

// ---- many activation rows: a cache-blocked GEMM with the direct kernel's per-element order ----
//
// With many activation rows (prefill, batched decode) the direct kernel above streams every
// activation row once per four weight rows, from L3 or memory, and widens each bf16 code once
// per two activation rows. Here the work is blocked: kGemmTokens activation rows at a time, the
// weight rows kDenseRows at a time and the columns kGemmCols at a time, and register tiles of
// kTileRows weight rows x kTileTokens activation rows run over the block's weights and the
// activations from L1/L2. Every (weight row,
// activation row) pair keeps its own vector accumulator, kept in memory between column blocks,
// so each lane adds the same products in the same order as the direct kernel, then the same lane
// sum and the same scalar tail: the result is bit-identical to the direct kernel's, whatever the
// batch size or the blocking. Batch invariance of the engine rests on that.
//
// Tiles: a tile holds its kTileRows weight vectors in registers and loads the activation rows'
// vectors one at a time, so it needs kTileRows x kTileTokens accumulators + kTileRows + 1
// registers and kTileRows + kTileTokens loads per kTileRows x kTileTokens FMAs. 32 registers
// (AVX-512): 4 x 4 (21 registers). 16 registers (AVX2): 3 x 4 (all 16; 7 loads per 12 FMAs,
// 12 independent accumulator chains, against 4 x 2's 6 loads per 8 FMAs and 8 chains, which
// is what an FMA latency of 4 cycles on two ports just covers).
//
// Widening: on AVX-512 the block's bf16 codes are widened once into a float32 panel that the
// tiles read (the widening's shift and zero-extension would take the FMA ports there). Elsewhere
// the tiles widen the codes they load in registers, once per tile (the AVX2 CPUs measured run
// them on other pipes than the FMAs): no panel is written and read back, which at 8-64
// activation rows cost as much as the FMAs (one thread, 4096 x 4096 bf16, Zen 3: 8 rows 28.8
// -> 49 GFLOP/s, 64 rows 47 -> 53-58).

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kTileRows = 4;
constexpr bool kWidenToPanel = true;
#else
constexpr int kTileRows = 3;
constexpr bool kWidenToPanel = false;
#endif
constexpr int kTileTokens = 4;
constexpr int64_t kGemmTokens = 64;    // activation rows per block: kGemmTokens x kGemmCols floats in L2
constexpr int64_t kGemmRows = 16;      // weight rows per block of the quantized GEMM below (a multiple of 4)
constexpr int64_t kDenseRows = 4 * kTileRows;  // weight rows per block of the dense GEMM
// Columns per block, rounded up to whole vectors. AVX-512: a float32 panel of 16 rows x 1024
// columns (64 KiB) and the activation block (256 KiB) in L2; a tile loads and stores its
// accumulators once per block, which over 256 columns (16 steps) cost a sixth of the FMA rate.
// Zen 4, one thread, 16 / 64 / 512 activation rows, 256 -> 1024 columns: EXACT BF16 4096 x 4096
// 62 / 75 / 75 -> 60 / 85 / 83 GFLOP/s, 4096 x 1024 62 / 78 / 76 -> 78 / 91 / 90, 2048 x 7168
// 58 / 80 / 79 -> 62 / 89 / 87 (117 peak: one 16-lane FMA per cycle); the quantized GEMM's
// weight bytes per second, 16 / 64 rows, in L2: FP8 1.53 / 0.42 -> 1.70 / 0.47 GB/s, INT4 g32
// 0.66 / 0.19 -> 0.73 / 0.22.
constexpr int64_t kGemmCols = kWidenToPanel ? 1024 : 512;
constexpr int64_t kGemmMinTokens = 8;  // below this the direct kernel runs (bandwidth-bound decode)

// Keeps v in a register: without it GCC folds the weight loads into the FMAs as memory
// operands, one load per FMA instead of one per tile row (the tile is then bound by loads).
template <class V>
HWY_INLINE void InRegister(V& v) {
#if HWY_TARGET == HWY_AVX2
  asm("" : "+x"(v.raw));
#else
  (void)v;
#endif
}

// Whether full tiles sum their lanes in registers at the end of a row (kDirectSums): on AVX-512
// with GCC, where Highway's SumOfLanes is _mm512_reduce_add_ps, whose adds (halves, then 128-bit
// lanes, then [0] + [2] and [1] + [3], then those two) are bf16_lanes::ReduceLanes's tree, so
// that bf16_lanes::ReduceLanes16 gives the direct kernel's bits for 16 outputs at once.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && LLMRT_BF16_LANES_X86 && HWY_HAVE_SCALABLE == 0
constexpr bool kDirectSums = true;
#else
constexpr bool kDirectSums = false;
#endif

// Accumulators acc[(t * ld_acc + r) * N] (t < TT, r < RW) += w rows [r] . x[t] over `len`
// columns (a multiple of N): one vector accumulator per pair, as MatMulRowsT keeps. `sums`
// (kDirectSums, 4 x 4 tiles over a row's last columns, else nullptr): the lane sums go to
// sums[t * ld_sums + r] instead of the accumulators to acc.
template <int TT, int RW, typename WT>
HWY_INLINE void GemmTile(DF df, const WT* w, int64_t ldw, const float* const* xs, int64_t len, float* acc,
                         int64_t ld_acc, bool first, float* sums, int64_t ld_sums) {
  static_assert(RW >= 1 && RW <= 4);
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  V a[TT][RW];
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < RW; ++r) a[t][r] = first ? hn::Zero(df) : hn::LoadU(df, acc + (t * ld_acc + r) * N);
  }
  for (int64_t k = 0; k < len; k += N) {
    // Named registers, not an array: GCC keeps an array of vectors on the stack as well.
    V w0 = LoadW(df, w + k), w1, w2, w3;
    InRegister(w0);
    if constexpr (RW >= 2) {
      w1 = LoadW(df, w + ldw + k);
      InRegister(w1);
    }
    if constexpr (RW >= 3) {
      w2 = LoadW(df, w + 2 * ldw + k);
      InRegister(w2);
    }
    if constexpr (RW >= 4) {
      w3 = LoadW(df, w + 3 * ldw + k);
      InRegister(w3);
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const V xv = hn::LoadU(df, xs[t] + k);
      a[t][0] = hn::MulAdd(w0, xv, a[t][0]);
      if constexpr (RW >= 2) a[t][1] = hn::MulAdd(w1, xv, a[t][1]);
      if constexpr (RW >= 3) a[t][2] = hn::MulAdd(w2, xv, a[t][2]);
      if constexpr (RW >= 4) a[t][3] = hn::MulAdd(w3, xv, a[t][3]);
    }
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && LLMRT_BF16_LANES_X86 && HWY_HAVE_SCALABLE == 0
  if constexpr (kDirectSums && TT == 4 && RW == 4) {
    if (sums != nullptr) {
      __m512 v[16];  // v[4r + t] = a[t][r]
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) v[m] = a[m % 4][m / 4].raw;
      bf16_lanes::StoreTileSums4x4(v, sums, ld_sums);
      return;
    }
  }
#else
  (void)sums;
  (void)ld_sums;
#endif
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < RW; ++r) hn::StoreU(a[t][r], df, acc + (t * ld_acc + r) * N);
  }
}

template <int RW, typename WT>
HWY_INLINE void GemmTileT(DF df, int nt, const WT* w, int64_t ldw, const float* const* xs, int64_t len, float* acc,
                          int64_t ld_acc, bool first, float* sums, int64_t ld_sums) {
  switch (nt) {
    case 1: GemmTile<1, RW>(df, w, ldw, xs, len, acc, ld_acc, first, nullptr, 0); break;
    case 2: GemmTile<2, RW>(df, w, ldw, xs, len, acc, ld_acc, first, nullptr, 0); break;
    case 3: GemmTile<3, RW>(df, w, ldw, xs, len, acc, ld_acc, first, nullptr, 0); break;
    case 4: GemmTile<4, RW>(df, w, ldw, xs, len, acc, ld_acc, first, sums, ld_sums); break;
    default: LLMRT_CHECK(false);
  }
}

// A tile of nt activation rows x nr weight rows (nr < kTileRows only for a range's last rows).
template <typename WT>
HWY_INLINE void GemmTileN(DF df, int nt, int nr, const WT* w, int64_t ldw, const float* const* xs, int64_t len,
                          float* acc, int64_t ld_acc, bool first, float* sums = nullptr, int64_t ld_sums = 0) {
  switch (nr) {
    case kTileRows: GemmTileT<kTileRows>(df, nt, w, ldw, xs, len, acc, ld_acc, first, sums, ld_sums); break;
    case 1: GemmTileT<1>(df, nt, w, ldw, xs, len, acc, ld_acc, first, nullptr, 0); break;
    case 2: GemmTileT<2>(df, nt, w, ldw, xs, len, acc, ld_acc, first, nullptr, 0); break;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    case 3: GemmTileT<3>(df, nt, w, ldw, xs, len, acc, ld_acc, first, nullptr, 0); break;
#endif
    default: LLMRT_CHECK(false);
  }
}

// Rows [n0, n1) of x w^T for T activation rows; see above.
template <typename WT>
void MatMulRowsGemm(const WT* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo,
                    int64_t n0, int64_t n1) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t kv = K - K % N;
  const int64_t kc_max = (kGemmCols + N - 1) / N * N;
  constexpr bool kPanel = kWidenToPanel && !std::is_same_v<WT, float>;
  thread_local CacheLineVector<float> panel, accs;
  if (kPanel) panel.resize(static_cast<size_t>(kDenseRows * kc_max));
  accs.resize(static_cast<size_t>(kGemmTokens * kDenseRows * N));
  float* acc = accs.data();
  for (int64_t t0 = 0; t0 < T; t0 += kGemmTokens) {
    const int64_t tb = std::min(kGemmTokens, T - t0);
    for (int64_t r0 = n0; r0 < n1; r0 += kDenseRows) {
      const int64_t rb = std::min(kDenseRows, n1 - r0);
      // The first column block's tiles start their accumulators at zero (no fill, no loads).
      if (kv == 0) std::fill(acc, acc + tb * rb * N, 0.0f);
      // Rows with no scalar tail, whole 4 x 4 tiles: their outputs come from the tiles.
      const int64_t tb_direct =
          kDirectSums && kv == K && kv > 0 && kTileRows == 4 && rb % kTileRows == 0 ? tb / 4 * 4 : 0;
      for (int64_t k0 = 0; k0 < kv; k0 += kc_max) {
        const int64_t kc = std::min(kc_max, kv - k0);
        // The next block's codes are requested now, so that the memory fetches them while this
        // block's tiles run: its rows are separate runs of kGemmCols codes, too short for the
        // hardware prefetchers to pick up in time (float32 weights are read from L2 or in
        // longer runs per row, and go without).
        if constexpr (!std::is_same_v<WT, float>) {
          const int64_t nk = k0 + kc_max < kv ? k0 + kc_max : 0, nr = nk ? r0 : r0 + kDenseRows;
          if (nr < n1) {
            const int64_t nrb = std::min(kDenseRows, n1 - nr);
            const int64_t bytes = std::min(kc_max, kv - nk) * static_cast<int64_t>(sizeof(WT));
            for (int64_t r = 0; r < nrb; ++r) {
              const char* p = reinterpret_cast<const char*>(w + (nr + r) * K + nk);
              for (int64_t b = 0; b < bytes; b += 64) hwy::Prefetch(p + b);
            }
          }
        }
        const auto tiles = [&](const auto* pw, int64_t ldw) {
          for (int64_t t = 0; t < tb; t += kTileTokens) {
            const int nt = static_cast<int>(std::min<int64_t>(kTileTokens, tb - t));
            const float* xs[kTileTokens];
            for (int i = 0; i < nt; ++i) xs[i] = x + (t0 + t + i) * ldx + k0;
            for (int64_t r = 0; r < rb; r += kTileRows) {
              const int nr = static_cast<int>(std::min<int64_t>(kTileRows, rb - r));
              float* sums = k0 + kc == kv && t < tb_direct ? out + (t0 + t) * ldo + r0 + r : nullptr;
              GemmTileN(df, nt, nr, pw + r * ldw, ldw, xs, kc, acc + (t * rb + r) * N, rb, k0 == 0, sums, ldo);
            }
          }
        };
        if constexpr (kPanel) {
          for (int64_t r = 0; r < rb; ++r) {
            const WT* src = w + (r0 + r) * K + k0;
            float* dst = panel.data() + r * kc;
            for (int64_t k = 0; k < kc; k += N) hn::StoreU(LoadW(df, src + k), df, dst + k);
          }
          tiles(panel.data(), kc);
        } else {
          tiles(w + r0 * K + k0, K);
        }
      }
      // The direct kernel's epilogue: lane sum, then the columns past the last whole vector.
      for (int64_t t = tb_direct; t < tb; ++t) {
        const float* xa = x + (t0 + t) * ldx;
        for (int64_t r = 0; r < rb; ++r) {
          const WT* wr = w + (r0 + r) * K;
          float s = hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, acc + (t * rb + r) * N)));
          for (int64_t k = kv; k < K; ++k) s += ScalarW(wr + k) * xa[k];
          out[(t0 + t) * ldo + r0 + r] = s;
        }
      }
    }
  }
}

template <typename WT>
void MatMulRowsDense(const WT* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo,
                     int64_t n0, int64_t n1) {
  if (T < kGemmMinTokens) {
    MatMulRowsT(w, K, x, ldx, T, out, ldo, n0, n1);
    return;
  }
  MatMulRowsGemm(w, K, x, ldx, T, out, ldo, n0, n1);
}

void MatMulRowsF32(const void* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out,
                   int64_t ldo, int64_t n0, int64_t n1) {
  MatMulRowsDense(static_cast<const float*>(w), K, x, ldx, T, out, ldo, n0, n1);
}
void MatMulRowsBf16(const void* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out,
                    int64_t ldo, int64_t n0, int64_t n1) {
  MatMulRowsDense(static_cast<const uint16_t*>(w), K, x, ldx, T, out, ldo, n0, n1);
}

template <typename BT>
float DotT(const float* a, const BT* b, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto s0 = hn::Zero(df), s1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), LoadW(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + N), LoadW(df, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(df, a + i), LoadW(df, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * ScalarW(b + i);
  return s;
}
float DotF32(const float* a, const void* b, int64_t n) {
  return DotT(a, static_cast<const float*>(b), n);
}
float DotBf16(const float* a, const void* b, int64_t n) {
  return DotT(a, static_cast<const uint16_t*>(b), n);
}
// FP8 KV rows: unscaled e4m3 codes (the caller applies the codec scale).
float DotFp8(const float* a, const void* b, int64_t n) {
  return DotT(a, static_cast<const uint8_t*>(b), n);
}

template <typename XT>
void AxpyT(float alpha, const XT* x, float* y, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto va = hn::Set(df, alpha);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, LoadW(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += alpha * ScalarW(x + i);
}
void AxpyF32(float alpha, const void* x, float* y, int64_t n) {
  AxpyT(alpha, static_cast<const float*>(x), y, n);
}
void AxpyBf16(float alpha, const void* x, float* y, int64_t n) {
  AxpyT(alpha, static_cast<const uint16_t*>(x), y, n);
}
void AxpyFp8(float alpha, const void* x, float* y, int64_t n) {
  AxpyT(alpha, static_cast<const uint8_t*>(x), y, n);
}

// y[i] = scale * x[i] (for bf16 and f32 x and scale 1: the exact values).
template <typename XT>
void ToF32T(float scale, const XT* x, float* y, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(vs, LoadW(df, x + i)), df, y + i);
  for (; i < n; ++i) y[i] = scale * ScalarW(x + i);
}
void ToF32(float scale, DType dtype, const void* x, float* y, int64_t n) {
  switch (dtype) {
    case DType::kF32: ToF32T(scale, static_cast<const float*>(x), y, n); return;
    case DType::kBF16: ToF32T(scale, static_cast<const uint16_t*>(x), y, n); return;
    case DType::kF8E4M3: ToF32T(scale, static_cast<const uint8_t*>(x), y, n); return;
    default: LLMRT_CHECK(false);
  }
}

// out[m * ldo + c] += sum_j p[m * ldp + j] * v[j * ldv + c] for m < M, c < cols: for each output,
// one fused multiply-add per j in increasing j, the operations Axpy makes row by row (the same
// floats), but in tiles of MT output rows x CV vectors kept in registers over all j, so v is
// loaded once per MT output rows and the outputs once per call (4 x 2: eight independent chains
// cover the FMA latency on two ports).
template <int MT, int CV, typename VT>
HWY_INLINE void AccumulateTile(DF df, const float* const* pr, const VT* v, int64_t ldv, int64_t n, float* const* outs,
                               int64_t c) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  using V = hn::Vec<DF>;
  V a[MT][CV];  // every index a constant once unrolled: registers, not the stack
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
#pragma GCC unroll 8
    for (int k = 0; k < CV; ++k) a[i][k] = hn::LoadU(df, outs[i] + c + k * N);
  }
  for (int64_t j = 0; j < n; ++j) {
    const VT* vj = v + j * ldv + c;
    V pb[MT];
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) pb[i] = hn::Set(df, pr[i][j]);
#pragma GCC unroll 8
    for (int k = 0; k < CV; ++k) {
      const V vk = LoadW(df, vj + k * N);
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) a[i][k] = hn::MulAdd(pb[i], vk, a[i][k]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
#pragma GCC unroll 8
    for (int k = 0; k < CV; ++k) hn::StoreU(a[i][k], df, outs[i] + c + k * N);
  }
}
template <int MT, int CV, typename VT>
HWY_INLINE void AccumulateRowGroup(DF df, const float* p, int64_t ldp, int64_t m0, const VT* v, int64_t ldv, int64_t n,
                                   int64_t cv, float* out, int64_t ldo) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* pr[MT];
  float* outs[MT];
  for (int i = 0; i < MT; ++i) {
    pr[i] = p + (m0 + i) * ldp;
    outs[i] = out + (m0 + i) * ldo;
  }
  int64_t c = 0;
  for (; c + CV * N <= cv; c += CV * N) AccumulateTile<MT, CV>(df, pr, v, ldv, n, outs, c);
  for (; c < cv; c += N) AccumulateTile<MT, 1>(df, pr, v, ldv, n, outs, c);
}
constexpr int64_t kAccumulateRows = 64;
// x = softmax(scale * x) in place: the scaled values' maximum subtracted, exp in float32 lanes
// (Highway's Exp, within 1 ulp of the correctly rounded value; a NaN stays NaN), the sum of the
// exponentials in float64 lanes, then one multiply by its inverse.
void SoftmaxScaled(float* x, int64_t n, float scale) {
  if (n <= 0) return;
  const DF df;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dfd;  // as many floats as dd has doubles
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), Nd = static_cast<int64_t>(hn::Lanes(dd));
  const auto vs = hn::Set(df, scale);
  auto vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::Mul(hn::LoadU(df, x + i), vs);
    hn::StoreU(v, df, x + i);
    vmax = hn::Max(vmax, v);
  }
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; i < n; ++i) {
    x[i] *= scale;
    mx = std::max(mx, x[i]);
  }
  const auto vm = hn::Set(df, mx);
  auto exp_keep_nan = [&](decltype(vm) v) {
    const auto d = hn::Sub(v, vm);
    return hn::IfThenElse(hn::Eq(d, d), hn::Exp(df, d), d);
  };
  auto s0 = hn::Zero(dd), s1 = hn::Zero(dd);
  auto add = [&](const float* e) {  // N stored exponentials, widened Nd at a time
    for (int64_t k = 0; k < N; k += 2 * Nd) {
      s0 = hn::Add(s0, hn::PromoteTo(dd, hn::LoadU(dfd, e + k)));
      if (k + Nd < N) s1 = hn::Add(s1, hn::PromoteTo(dd, hn::LoadU(dfd, e + k + Nd)));
    }
  };
  for (i = 0; i + N <= n; i += N) {
    hn::StoreU(exp_keep_nan(hn::LoadU(df, x + i)), df, x + i);
    add(x + i);
  }
  if (i < n) {  // the tail through one padded vector, its padding zeroed before the sum
    HWY_ALIGN float tail[hn::MaxLanes(df)] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
    hn::Store(hn::IfThenElseZero(hn::FirstN(df, static_cast<size_t>(n - i)), exp_keep_nan(hn::Load(df, tail))), df,
              tail);
    std::memcpy(x + i, tail, static_cast<size_t>(n - i) * sizeof(float));
    add(tail);
  }
  const float inv = static_cast<float>(1.0 / hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1))));
  const auto vinv = hn::Set(df, inv);
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vinv), df, x + i);
  for (; i < n; ++i) x[i] *= inv;
}

template <typename VT>
void AccumulateRowsT(const float* p, int64_t ldp, int64_t M, const VT* v, int64_t ldv, int64_t n, int64_t cols,
                     float* out, int64_t ldo) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t cv = cols - cols % N;
  // v in blocks of kAccumulateRows rows (in L2 for every group of output rows); the outputs
  // pass through memory between blocks, which leaves each one's chain of operations as it is.
  for (int64_t j0 = 0; j0 < n; j0 += kAccumulateRows) {
    const int64_t nj = std::min(kAccumulateRows, n - j0);
    const VT* vb = v + j0 * ldv;
    int64_t m0 = 0;
    for (; m0 + 4 <= M; m0 += 4) AccumulateRowGroup<4, 2>(df, p + j0, ldp, m0, vb, ldv, nj, cv, out, ldo);
  }
  // The last M % 4 output rows, and the columns past the last whole vector, row by row as Axpy:
  // one or two output rows (decode's query absorption over kv_b, read from memory) stream v
  // in order, which tiles down column strips would not.
  for (int64_t m = 0; m < M; ++m) {
    const int64_t c0 = m < M - M % 4 ? cv : 0;
    for (int64_t j = 0; j < n; ++j) AxpyT(p[m * ldp + j], v + j * ldv + c0, out + m * ldo + c0, cols - c0);
  }
}
void AccumulateRows(const float* p, int64_t ldp, int64_t M, DType vdtype, const void* v, int64_t ldv, int64_t n,
                    int64_t cols, float* out, int64_t ldo) {
  switch (vdtype) {
    case DType::kF32: AccumulateRowsT(p, ldp, M, static_cast<const float*>(v), ldv, n, cols, out, ldo); return;
    case DType::kBF16: AccumulateRowsT(p, ldp, M, static_cast<const uint16_t*>(v), ldv, n, cols, out, ldo); return;
    default: LLMRT_CHECK(false);
  }
}

// Rows [r0, r0 + n) of an FP8 block-scaled matrix as float32: each code's value times its
// block's scale, rounded once, which is DequantizeFp8BlockRow's arithmetic, so the floats are
// those of the matrix dequantized at load (Fp8ToF32 is the code's exact value; the NaN code,
// absent from checkpoints, reads as 480 here as in every FP8 matmul path).
void Fp8BlockRowsToF32(const uint8_t* codes, const float* scales, int64_t cols, int64_t block_rows,
                       int64_t block_cols, int64_t r0, int64_t n, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t nbc = (cols + block_cols - 1) / block_cols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = r0 + i;
    const float* s = scales + (row / block_rows) * nbc;
    const uint8_t* q = codes + row * cols;
    float* o = out + i * cols;
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      float scale;  // checkpoint bytes need not be aligned
      std::memcpy(&scale, s + c0 / block_cols, sizeof(scale));
      const auto vs = hn::Set(df, scale);
      const int64_t c1 = std::min(cols, c0 + block_cols);
      int64_t c = c0;
      for (; c + N <= c1; c += N) hn::StoreU(hn::Mul(Fp8ToF32(df, q + c), vs), df, o + c);
      for (; c < c1; ++c) o[c] = Fp8E4M3::ToFloat(q[c]) * scale;
    }
  }
}

// ---- quantized weights ----

// Raw codes of one block as float32 (no scale): FP8 in natural order, over kFp8Fold (the
// QuantView's FP8 scales carry it); INT4 as q - 8, each
// 32-column chunk as its 16 even columns then its 16 odd ones.
void RawFp8(const uint8_t* q, int64_t width, float* dst) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* table = Fp8E4M3::DecodeTable();
  int64_t k = 0;
  for (; k + N <= width; k += N) hn::StoreU(Fp8ToF32Folded(df, q + k), df, dst + k);
  for (; k < width; ++k) dst[k] = table[q[k]] * (1.0f / kFp8Fold);
}

void RawInt4(const uint8_t* q, int64_t width, float* dst) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::RebindToUnsigned<DF> du32;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t k = 0; k < width; k += 32) {
    const uint8_t* p = q + k / 2;
    for (int64_t j = 0; j < 16; j += N) {
      hn::Vec<DF> lo, hi;
      Int4Nibbles(df, hn::PromoteTo(du32, hn::LoadU(du8, p + j)), &lo, &hi);
      hn::StoreU(lo, df, dst + k + j);
      hn::StoreU(hi, df, dst + k + 16 + j);
    }
  }
}

// One block of two rows of decoded codes (raw, raw + stride) against two activation rows: each
// x vector is loaded once for both rows and each code vector once for both activations. sums
// and tails are indexed [t * 2 + r]. The order every quantized path uses (the decode path
// decodes in registers in the same order): vectors alternate between two accumulators from the
// block's start (INT4: per 32 columns, the even-column codes into one, the odd into the other),
// leftover columns are summed in scalar.
HWY_INLINE void BlockDot2x2(DF df, const float* raw, int64_t stride, const float* x0, const float* x1, int64_t width,
                            bool int4, hn::Vec<DF>* sums, float* tails) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* w0 = raw;
  const float* w1 = raw + stride;
  auto p00 = hn::Zero(df), p01 = hn::Zero(df), p10 = hn::Zero(df), p11 = hn::Zero(df);  // a0[t][r]
  auto q00 = hn::Zero(df), q01 = hn::Zero(df), q10 = hn::Zero(df), q11 = hn::Zero(df);  // a1[t][r]
  // One vector of columns at k: both rows against both activations into four accumulators.
  auto fma4 = [&](int64_t k, hn::Vec<DF>& a00, hn::Vec<DF>& a01, hn::Vec<DF>& a10, hn::Vec<DF>& a11) {
    const auto x0k = hn::LoadU(df, x0 + k), x1k = hn::LoadU(df, x1 + k);
    const auto w0k = hn::LoadU(df, w0 + k), w1k = hn::LoadU(df, w1 + k);
    a00 = hn::MulAdd(w0k, x0k, a00);
    a01 = hn::MulAdd(w1k, x0k, a01);
    a10 = hn::MulAdd(w0k, x1k, a10);
    a11 = hn::MulAdd(w1k, x1k, a11);
  };
  int64_t k = 0;
  if (int4) {
    for (; k < width; k += 32) {
      for (int64_t j = 0; j < 16; j += N) {
        fma4(k + j, p00, p01, p10, p11);
        fma4(k + 16 + j, q00, q01, q10, q11);
      }
    }
  } else {
    for (; k + 2 * N <= width; k += 2 * N) {
      fma4(k, p00, p01, p10, p11);
      fma4(k + N, q00, q01, q10, q11);
    }
    for (; k + N <= width; k += N) fma4(k, p00, p01, p10, p11);
  }
  sums[0] = hn::Add(p00, q00);
  sums[1] = hn::Add(p01, q01);
  sums[2] = hn::Add(p10, q10);
  sums[3] = hn::Add(p11, q11);
  for (int i = 0; i < 4; ++i) {
    const float* w = i % 2 == 0 ? w0 : w1;
    const float* xt = i < 2 ? x0 : x1;
    float st = 0.0f;
    for (int64_t c = k; c < width; ++c) st += w[c] * xt[c];
    tails[i] = st;
  }
}

// Activation rows up to which codes are decoded in registers for each row (decode); beyond,
// blocks of four rows are decoded once and reused by every activation row (prefill).
constexpr int64_t kDirectMaxRows = 4;

// The per-matrix facts every quantized path reads: block width (FP8: block_cols columns; INT4:
// one group), the number of blocks per row, and each (row, block)'s codes and scale.
struct QuantView {
  const Weight& w;
  bool int4;
  int64_t K, bw, nb, nbc;
  explicit QuantView(const Weight& wt)
      : w(wt),
        int4(wt.format == kWeightInt4Group),
        K(wt.cols),
        bw(int4 ? wt.params.group : wt.params.block_cols),
        nb((K + bw - 1) / bw),
        nbc((K + wt.params.block_cols - 1) / std::max<int64_t>(wt.params.block_cols, 1)) {}
  float scale(int64_t row, int64_t b) const { return scales_of(row).at(b); }
  // A row's scales, found once per row: the FP8 block row is a division, which costs as much
  // as decoding a block when it is done per block.
  // FP8 scales come times kFp8Fold: the raw FP8 codes every quantized path multiplies are the
  // values over kFp8Fold (Fp8ToF32Folded, RawFp8).
  struct RowScales {
    const uint16_t* bf16;  // INT4
    const float* f32;      // FP8
    float fold;
    float at(int64_t b) const { return bf16 != nullptr ? Bf16ToF32(bf16[b]) : f32[b] * fold; }
  };
  RowScales scales_of(int64_t row) const {
    if (int4) return {w.scales.data_as<uint16_t>() + row * (K / w.params.group), nullptr, 1.0f};
    return {nullptr, w.scales.data_as<float>() + (row / w.params.block_rows) * nbc, kFp8Fold};
  }
  const uint8_t* codes(int64_t row, int64_t b) const {
    return int4 ? w.data.data_as<uint8_t>() + row * (K / 2) + b * bw / 2 : w.data.data_as<uint8_t>() + row * K + b * bw;
  }
};

constexpr int64_t kQuantPrefetchBytes = 2048;

// The general loop's scalar tail of a row whose blocks have no leftover columns: the sum, block
// by block in order, of 0 x each block's scale, which is +0 unless a scale is not finite and
// then the NaN that the first such 0 x scale makes (an addition keeps its first NaN operand).
// One vector pass over the scales finds whether that NaN occurs, instead of a scalar
// multiply-add per block.
HWY_INLINE float EmptyTailSum(DF df, const float* scales, int64_t nb) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto any = hn::Zero(df);
  int64_t b = 0;
  for (; b + N <= nb; b += N) any = hn::Add(any, hn::Mul(hn::Zero(df), hn::LoadU(df, scales + b)));
  bool finite = hn::AllFalse(df, hn::IsNaN(any));
  for (; b < nb; ++b) finite = finite && std::isfinite(scales[b]);
  if (finite) return 0.0f;
  float tail = 0.0f;
  for (b = 0; b < nb; ++b) tail += 0.0f * scales[b];
  return tail;
}

// Whether QuantRowsTiled below takes a matrix: INT4 groups of whole 32-column chunks, or FP8
// blocks of whole pairs of vectors, dividing the row.
HWY_INLINE bool TiledApplies(const QuantView& v) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  return v.K % v.bw == 0 && (v.int4 ? v.bw % 32 == 0 : v.bw % (2 * N) == 0);
}

// Rows [n0, n1), R at a time, times TT (1-4) activation rows at once, for the matrices
// TiledApplies takes (n1 - n0 a multiple of R; each of the R rows is computed exactly as alone):
// each vector of codes is decoded once for every activation row, and a row's codes and scales
// are addressed directly. Per (row, activation row) the operations and their order are
// QuantRowsDirect's below (per block the partial sums a0 / a1 (INT4: even / odd columns of each
// 32; FP8: alternate vectors), then acc = (a0 + a1) * scale + acc, and the empty scalar tail
// times the scale), so the results are the same floats. (The general loop decodes every code
// again for each activation row, and its per-block checks and scale lookups cost as much as the
// arithmetic of a 32-column INT4 group.)
template <int TT, int R, bool kInt4, int NB = 1>
HWY_INLINE void QuantRowsTiled(const QuantView& v, const float* x, int64_t ldx, float* out, int64_t ldo, int64_t n0,
                               int64_t n1) {
  const DF df;
  using V = hn::Vec<DF>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), bw = v.bw, nb = v.nb;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::RebindToUnsigned<DF> du32;
  constexpr int64_t kCodesPerByte = kInt4 ? 2 : 1;
  static_assert(NB == 1 || !kInt4, "INT4 takes one group at a time");
  const int64_t block_bytes = bw / kCodesPerByte;
  // The R rows' block scales as floats, converted once per row: read from memory, a scale is
  // broadcast by the load port (AVX-512: an FMA's broadcast operand), where one converted in a
  // general register per block takes two vector instructions to move and broadcast.
  thread_local CacheLineVector<float> scale_rows;
  scale_rows.resize(static_cast<size_t>(R * nb));
  for (int64_t n = n0; n + R <= n1; n += R) {
    const uint8_t* q[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const QuantView::RowScales rs = v.scales_of(n + r);
      float* sr = scale_rows.data() + r * nb;
      int64_t b = 0;
      if constexpr (kInt4) {
        for (; b + N <= nb; b += N) hn::StoreU(LoadW(df, rs.bf16 + b), df, sr + b);
      } else {
        for (; b + N <= nb; b += N) hn::StoreU(hn::Mul(hn::LoadU(df, rs.f32 + b), hn::Set(df, rs.fold)), df, sr + b);
      }
      for (; b < nb; ++b) sr[b] = rs.at(b);
      q[r] = v.codes(n + r, 0);
    }
    V acc[R][TT];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) acc[r][t] = hn::Zero(df);
    }
    // Blocks [b, b + NBB) of every row: each block's partial sums a0 / a1 start from zero, so
    // the blocks' chains are independent and run side by side (with one or two activation rows,
    // one block's two chains leave the FMA latency exposed), and the blocks then enter acc one
    // after another in order, as one block at a time would.
    auto blocks = [&](auto nbb, int64_t b) __attribute__((always_inline)) HWY_ATTR {
      constexpr int NBB = decltype(nbb)::value;
      // A row is one stream of codes, and the hardware prefetchers stop at every 4 KiB page:
      // read ahead in software, across pages, once per 64-byte line.
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* qb = q[r] + b * block_bytes;
        if constexpr (kInt4) {
          if (((b * block_bytes) & 63) == 0) hwy::Prefetch(qb + kQuantPrefetchBytes);  // groups of 32-128 columns
        } else {
          for (int64_t o = (64 - (b * block_bytes) % 64) % 64; o < NBB * block_bytes; o += 64) {
            hwy::Prefetch(qb + o + kQuantPrefetchBytes);
          }
        }
      }
      V a0[R][NBB][TT], a1[R][NBB][TT];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int j = 0; j < NBB; ++j) {
#pragma GCC unroll 4
          for (int t = 0; t < TT; ++t) a0[r][j][t] = a1[r][j][t] = hn::Zero(df);
        }
      }
      // Two vectors of codes of row r, block b + j, c0 and c1, meet the activations at column
      // offsets o0, o1 of the block.
      auto step = [&](int r, int j, const V c0, const V c1, int64_t o0, int64_t o1) __attribute__((always_inline))
                  HWY_ATTR {
#pragma GCC unroll 4
                    for (int t = 0; t < TT; ++t) {
                      const float* xt = x + t * ldx + (b + j) * bw;
                      a0[r][j][t] = hn::MulAdd(c0, hn::LoadU(df, xt + o0), a0[r][j][t]);
                      a1[r][j][t] = hn::MulAdd(c1, hn::LoadU(df, xt + o1), a1[r][j][t]);
                    }
                  };
      if constexpr (kInt4) {
        for (int64_t k = 0; k < bw; k += 32) {
          for (int64_t j = 0; j < 16; j += N) {
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
              V lo, hi;
              Int4Nibbles(df, hn::PromoteTo(du32, hn::LoadU(du8, q[r] + b * block_bytes + k / 2 + j)), &lo, &hi);
              step(r, 0, lo, hi, k + j, k + 16 + j);
            }
          }
        }
      } else {
        for (int64_t k = 0; k < bw; k += 2 * N) {
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
            for (int j = 0; j < NBB; ++j) {
              const uint8_t* qb = q[r] + (b + j) * block_bytes;
              step(r, j, Fp8ToF32Folded(df, qb + k), Fp8ToF32Folded(df, qb + k + N), k, k + N);
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int j = 0; j < NBB; ++j) {
          const V vs = hn::Set(df, scale_rows[static_cast<size_t>(r * nb + b + j)]);
#pragma GCC unroll 4
          for (int t = 0; t < TT; ++t) acc[r][t] = hn::MulAdd(hn::Add(a0[r][j][t], a1[r][j][t]), vs, acc[r][t]);
        }
      }
    };
    int64_t b = 0;
    for (; b + NB <= nb; b += NB) blocks(std::integral_constant<int, NB>(), b);
    for (; b < nb; ++b) blocks(std::integral_constant<int, 1>(), b);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float tail = EmptyTailSum(df, scale_rows.data() + r * nb, nb);
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) out[t * ldo + n + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][t])) + tail;
    }
  }
}

// Rows [n0, n1) R at a time (the rows left over one at a time): the R rows' accumulator chains
// are independent, so with few activation rows they cover the FMA latency that one row's chains
// alone (two per activation row, one more per scale group) leave exposed.
template <int TT, int R, bool kInt4, int NB = 1>
HWY_INLINE void QuantRowsTiledRows(const QuantView& v, const float* x, int64_t ldx, float* out, int64_t ldo,
                                   int64_t n0, int64_t n1) {
  const int64_t split = n0 + (n1 - n0) / R * R;
  QuantRowsTiled<TT, R, kInt4, NB>(v, x, ldx, out, ldo, n0, split);
  if (R > 1) QuantRowsTiled<TT, 1, kInt4, NB>(v, x, ldx, out, ldo, split, n1);
}

template <bool kInt4>
HWY_INLINE void QuantRowsTiledN(int64_t tt, const QuantView& v, const float* x, int64_t ldx, float* out, int64_t ldo,
                                int64_t n0, int64_t n1) {
  // INT4 at batch 1 ran at the latency of its accumulator chains (one thread, weights in L2:
  // 3.4 -> 4.6-4.9 GB/s of codes with four rows at a time). FP8 keeps one row at a time: four
  // row streams of FP8 codes read memory more slowly than one (4.3-5.4 against 6.7-6.9 GB/s
  // from DRAM), which costs more than the chains.
  constexpr int kR1 = kInt4 ? 4 : 1, kR2 = kInt4 ? 2 : 1;
  // FP8 at batch 1: two blocks of the row at a time (QuantRowsTiled), for four accumulator
  // chains from one stream of codes (2 threads from DRAM, 4096 columns, Zen 4: 22.2-22.6 ->
  // 24.4-24.5 GB/s of codes on the AVX2 target, 20.7-24.8 -> 24.7-25.1 on AVX3). With two
  // activation rows there are four chains already, and a second block only slowed it.
  if (false && !kInt4 && tt == 1) return QuantRowsTiledRows<1, 1, false, 2>(v, x, ldx, out, ldo, n0, n1);
  switch (tt) {
    case 1: return QuantRowsTiledRows<1, kR1, kInt4>(v, x, ldx, out, ldo, n0, n1);
    case 2: return QuantRowsTiledRows<2, kR2, kInt4>(v, x, ldx, out, ldo, n0, n1);
    case 3: return QuantRowsTiledRows<3, 1, kInt4>(v, x, ldx, out, ldo, n0, n1);
    default: return QuantRowsTiledRows<4, 1, kInt4>(v, x, ldx, out, ldo, n0, n1);
  }
}

// Rows [n0, n1) for any number of activation rows, one (row, activation row) at a time with the
// codes decoded in registers: the reference order every quantized path keeps (decode's path).
void QuantRowsDirect(const QuantView& v, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo, int64_t n0,
                     int64_t n1) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), K = v.K, bw = v.bw, nb = v.nb;
  const bool int4 = v.int4;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::RebindToUnsigned<DF> du32;
  const float* table = Fp8E4M3::DecodeTable();
  if (TiledApplies(v)) {
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      const float* xt = x + t0 * ldx;
      float* ot = out + t0 * ldo;
      const int64_t tt = std::min<int64_t>(4, T - t0);
      if (int4) {
        QuantRowsTiledN<true>(tt, v, xt, ldx, ot, ldo, n0, n1);
      } else {
        QuantRowsTiledN<false>(tt, v, xt, ldx, ot, ldo, n0, n1);
      }
    }
    return;
  }
  for (int64_t n = n0; n < n1; ++n) {
    const QuantView::RowScales row_scales = v.scales_of(n);
    for (int64_t t = 0; t < T; ++t) {
      auto acc = hn::Zero(df);
      float tail = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t width = std::min(bw, K - b * bw);
        const uint8_t* q = v.codes(n, b);
        // A row is one stream of codes, and the hardware prefetchers stop at every 4 KiB page:
        // read ahead in software, across pages (a hint: never faults).
        hwy::Prefetch(q + kQuantPrefetchBytes);
        if (!int4) hwy::Prefetch(q + kQuantPrefetchBytes + 64);  // an FP8 block is two lines
        const float* xt = x + t * ldx + b * bw;
        auto a0 = hn::Zero(df), a1 = hn::Zero(df);
        float st = 0.0f;
        if (int4) {
          for (int64_t k = 0; k < width; k += 32) {
            for (int64_t j = 0; j < 16; j += N) {
              hn::Vec<DF> lo, hi;
              Int4Nibbles(df, hn::PromoteTo(du32, hn::LoadU(du8, q + k / 2 + j)), &lo, &hi);
              a0 = hn::MulAdd(lo, hn::LoadU(df, xt + k + j), a0);
              a1 = hn::MulAdd(hi, hn::LoadU(df, xt + k + 16 + j), a1);
            }
          }
        } else {
          int64_t k = 0;
          for (; k + 2 * N <= width; k += 2 * N) {
            a0 = hn::MulAdd(Fp8ToF32Folded(df, q + k), hn::LoadU(df, xt + k), a0);
            a1 = hn::MulAdd(Fp8ToF32Folded(df, q + k + N), hn::LoadU(df, xt + k + N), a1);
          }
          for (; k + N <= width; k += N) a0 = hn::MulAdd(Fp8ToF32Folded(df, q + k), hn::LoadU(df, xt + k), a0);
          for (; k < width; ++k) st += table[q[k]] * (1.0f / kFp8Fold) * xt[k];
        }
        const float s = row_scales.at(b);
        acc = hn::MulAdd(hn::Add(a0, a1), hn::Set(df, s), acc);
        tail += st * s;
      }
      out[t * ldo + n] = hn::GetLane(hn::SumOfLanes(df, acc)) + tail;
    }
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Many activation rows on targets with 32 vector registers: blocked like MatMulRowsGemm. A panel
// of kGemmRows rows x a column block (whole scale blocks) is decoded once to raw float codes, and
// tiles of 4 rows x TT activation rows run over it block by block: per block, the two partial
// accumulators of the direct path (INT4: even / odd columns of each 32; FP8: alternate vectors),
// then acc = (p + q) * scale + acc and the scalar tail times the scale, exactly as
// QuantRowsDirect orders them, so the results are bit-identical to it.
template <int TT>
HWY_INLINE void QuantTile(DF df, const QuantView& v, const float* raw, int64_t ldr, const float* scales, int64_t nbk,
                          int64_t kc, const float* const* xs, float* acc, float* tails, int64_t ld_acc) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), bw = v.bw;
  using V = hn::Vec<DF>;
  V A[TT][4];
  float tl[TT][4];
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      A[t][r] = hn::LoadU(df, acc + (t * ld_acc + r) * N);
      tl[t][r] = tails[t * ld_acc + r];
    }
  }
  for (int64_t b = 0; b < nbk; ++b) {
    const int64_t c0 = b * bw, width = std::min(bw, kc - c0);
    V p[TT][4], q[TT][4];
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) p[t][r] = q[t][r] = hn::Zero(df);
    }
    // One vector of columns at c into p (first) or q (second), for every row and activation row.
    auto step = [&](int64_t c, bool second) HWY_ATTR {
      V xv[TT];
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) xv[t] = hn::LoadU(df, xs[t] + c0 + c);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const V wv = hn::LoadU(df, raw + r * ldr + c0 + c);
#pragma GCC unroll 4
        for (int t = 0; t < TT; ++t) {
          if (second) {
            q[t][r] = hn::MulAdd(wv, xv[t], q[t][r]);
          } else {
            p[t][r] = hn::MulAdd(wv, xv[t], p[t][r]);
          }
        }
      }
    };
    int64_t k = 0;
    if (v.int4) {
      for (; k < width; k += 32) {
        for (int64_t j = 0; j < 16; j += N) {
          step(k + j, false);
          step(k + 16 + j, true);
        }
      }
    } else {
      for (; k + 2 * N <= width; k += 2 * N) {
        step(k, false);
        step(k + N, true);
      }
      for (; k + N <= width; k += N) step(k, false);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const float s = scales[r * nbk + b];
      const V vs = hn::Set(df, s);
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) {
        A[t][r] = hn::MulAdd(hn::Add(p[t][r], q[t][r]), vs, A[t][r]);
        if (k < width) {
          float st = 0.0f;
          for (int64_t c = k; c < width; ++c) st += raw[r * ldr + c0 + c] * xs[t][c0 + c];
          tl[t][r] += st * s;
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      hn::StoreU(A[t][r], df, acc + (t * ld_acc + r) * N);
      tails[t * ld_acc + r] = tl[t][r];
    }
  }
}

constexpr int kQuantTileTokens = 2;  // 8 accumulators + 16 partials + weights and activations

// Rows [n0, n1) (a multiple of 4 of them) for T >= kGemmMinTokens activation rows.
void QuantRowsGemm(const QuantView& v, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo, int64_t n0,
                   int64_t n1) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), K = v.K, bw = v.bw;
  const int64_t blocks_per_col_block = std::max<int64_t>(1, kGemmCols / bw);
  const int64_t kc_max = blocks_per_col_block * bw;
  thread_local CacheLineVector<float> raw, scales, accs, tails;
  raw.resize(static_cast<size_t>(kGemmRows * kc_max));
  scales.resize(static_cast<size_t>(kGemmRows * blocks_per_col_block));
  accs.resize(static_cast<size_t>(kGemmTokens * kGemmRows * N));
  tails.resize(static_cast<size_t>(kGemmTokens * kGemmRows));
  for (int64_t t0 = 0; t0 < T; t0 += kGemmTokens) {
    const int64_t tb = std::min(kGemmTokens, T - t0);
    for (int64_t r0 = n0; r0 < n1; r0 += kGemmRows) {
      const int64_t rb = std::min(kGemmRows, n1 - r0);
      std::fill(accs.begin(), accs.begin() + tb * rb * N, 0.0f);
      std::fill(tails.begin(), tails.begin() + tb * rb, 0.0f);
      for (int64_t k0 = 0; k0 < K; k0 += kc_max) {
        const int64_t kc = std::min(kc_max, K - k0), b0 = k0 / bw, nbk = (kc + bw - 1) / bw;
        for (int64_t r = 0; r < rb; ++r) {
          for (int64_t b = 0; b < nbk; ++b) {
            const int64_t width = std::min(bw, kc - b * bw);
            float* dst = raw.data() + r * kc_max + b * bw;
            if (v.int4) {
              RawInt4(v.codes(r0 + r, b0 + b), width, dst);
            } else {
              RawFp8(v.codes(r0 + r, b0 + b), width, dst);
            }
            scales[r * nbk + b] = v.scale(r0 + r, b0 + b);
          }
        }
        for (int64_t t = 0; t < tb; t += kQuantTileTokens) {
          const int nt = static_cast<int>(std::min<int64_t>(kQuantTileTokens, tb - t));
          const float* xs[kQuantTileTokens];
          for (int i = 0; i < nt; ++i) xs[i] = x + (t0 + t + i) * ldx + k0;
          for (int64_t r = 0; r < rb; r += 4) {
            float* a = accs.data() + (t * rb + r) * N;
            float* tl = tails.data() + t * rb + r;
            if (nt == 2) {
              QuantTile<2>(df, v, raw.data() + r * kc_max, kc_max, scales.data() + r * nbk, nbk, kc, xs, a, tl, rb);
            } else {
              QuantTile<1>(df, v, raw.data() + r * kc_max, kc_max, scales.data() + r * nbk, nbk, kc, xs, a, tl, rb);
            }
          }
        }
      }
      for (int64_t t = 0; t < tb; ++t) {
        for (int64_t r = 0; r < rb; ++r) {
          out[(t0 + t) * ldo + r0 + r] =
              hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, accs.data() + (t * rb + r) * N))) + tails[t * rb + r];
        }
      }
    }
  }
}
#endif  // 32 vector registers

// Rows [n0, n1) of a quantized matrix times T activation rows. With one or a few activation rows
// the codes are decoded in registers (QuantRowsDirect); with many, on 32-register targets, panels
// of raw codes feed register tiles (QuantRowsGemm); otherwise blocks (FP8: block_cols columns;
// INT4: one group) of four rows are decoded to float32 once and used by every activation row.
// Each (row, activation) keeps a vector accumulator over blocks, folding each block in with its
// scale, in the same order on every path: results do not depend on how many rows a batch has.
void MatMulRowsQuant(const Weight& w, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo, int64_t n0,
                     int64_t n1) {
  const QuantView v(w);
  // INT4 chunks hold 16 codes of each parity: vectors of up to 16 float lanes (every x86 target).
  LLMRT_CHECK(!v.int4 || hn::Lanes(DF()) <= 16);
  if (T <= kDirectMaxRows) {  // decode: codes decoded in registers
    QuantRowsDirect(v, x, ldx, T, out, ldo, n0, n1);
    return;
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (T >= kGemmMinTokens) {
    const int64_t n4 = n0 + (n1 - n0) / 4 * 4;
    QuantRowsGemm(v, x, ldx, T, out, ldo, n0, n4);
    if (n4 < n1) QuantRowsDirect(v, x, ldx, T, out, ldo, n4, n1);
    return;
  }
#else
  // On 16-register targets, four activation rows per decoded code vector, in registers, beat
  // the blocks decoded to memory below at every batch size (AVX2, one thread, 4096 x 4096 INT4
  // g32: 8 rows 0.29 -> 0.87 GB/s of weight bytes, 16 rows 0.17 -> 0.38, 64 rows 0.03 -> 0.10).
  if (TiledApplies(v)) {
    QuantRowsDirect(v, x, ldx, T, out, ldo, n0, n1);
    return;
  }
#endif
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), K = v.K, bw = v.bw, nb = v.nb;
  const bool int4 = v.int4;
  auto scale_of = [&](int64_t row, int64_t b) { return v.scale(row, b); };
  auto codes_of = [&](int64_t row, int64_t b) { return v.codes(row, b); };
  // Per-thread buffers, reused across calls (this runs once per 16-row chunk of every matmul).
  thread_local CacheLineVector<float> raw, accs, tails;
  raw.resize(static_cast<size_t>(4 * bw));
  accs.resize(static_cast<size_t>(T * 4 * N));
  tails.resize(static_cast<size_t>(T * 4));
  for (int64_t n = n0; n < n1; n += 4) {
    const int64_t rows = std::min<int64_t>(4, n1 - n);
    std::fill(accs.begin(), accs.end(), 0.0f);
    std::fill(tails.begin(), tails.end(), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t width = std::min(bw, K - b * bw);
      float scales[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t r = 0; r < 4; ++r) {
        if (r >= rows) {
          std::fill(raw.begin() + r * bw, raw.begin() + (r + 1) * bw, 0.0f);
        } else if (int4) {
          RawInt4(codes_of(n + r, b), width, raw.data() + r * bw);
        } else {
          RawFp8(codes_of(n + r, b), width, raw.data() + r * bw);
        }
        if (r < rows) scales[r] = scale_of(n + r, b);
      }
      for (int64_t t = 0; t < T; t += 2) {
        const bool two = t + 1 < T;
        const float* x0 = x + t * ldx + b * bw;
        const float* x1 = two ? x0 + ldx : x0;
        for (int64_t r0 = 0; r0 < rows; r0 += 2) {
          hn::Vec<DF> sums[4];
          float st[4];
          BlockDot2x2(df, raw.data() + r0 * bw, bw, x0, x1, width, int4, sums, st);
          for (int64_t i = 0; i < (two ? 4 : 2); ++i) {
            const int64_t r = r0 + i % 2, tt = t + i / 2;
            if (r >= rows) continue;
            float* acc = accs.data() + (tt * 4 + r) * N;
            hn::StoreU(hn::MulAdd(sums[i], hn::Set(df, scales[r]), hn::LoadU(df, acc)), df, acc);
            tails[tt * 4 + r] += st[i] * scales[r];
          }
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        out[t * ldo + n + r] =
            hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, accs.data() + (t * 4 + r) * N))) + tails[t * 4 + r];
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(MatMulRowsF32);
HWY_EXPORT(MatMulRowsBf16);
HWY_EXPORT(DotF32);
HWY_EXPORT(DotBf16);
HWY_EXPORT(AxpyF32);
HWY_EXPORT(AxpyBf16);
HWY_EXPORT(MatMulRowsQuant);
HWY_EXPORT(DotFp8);
HWY_EXPORT(AxpyFp8);
HWY_EXPORT(Fp8BlockRowsToF32);
HWY_EXPORT(ToF32);
HWY_EXPORT(AccumulateRows);
HWY_EXPORT(SoftmaxScaled);

namespace {

void DenseRows(const Weight& w, const float* x, int64_t ldx, int64_t t, float* out, int64_t ldo, int64_t n0,
               int64_t n1) {
  MatMulRows(w.format == kWeightBf16 ? DType::kBF16 : DType::kF32, w.data.data(), w.cols, x, ldx, t, out, ldo, n0, n1);
}

void QuantRows(const Weight& w, const float* x, int64_t ldx, int64_t t, float* out, int64_t ldo, int64_t n0,
               int64_t n1) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsQuant)(w, x, ldx, t, out, ldo, n0, n1);
}

// INT4 pairs codes of one byte: its kernel reads x permuted within each 32-column chunk (16 even
// then 16 odd columns).
const float* PermuteForInt4(const Weight& w, const float* x, int64_t ldx, int64_t t, CacheLineVector<float>& scratch,
                            int64_t* ld) {
  const int64_t K = w.cols;
  scratch.resize(static_cast<size_t>(t * K));
  for (int64_t i = 0; i < t; ++i) {
    const float* xi = x + i * ldx;
    float* d = scratch.data() + i * K;
    for (int64_t k = 0; k < K; k += 32) {
      for (int64_t j = 0; j < 16; ++j) {
        d[k + j] = xi[k + 2 * j];
        d[k + 16 + j] = xi[k + 2 * j + 1];
      }
    }
  }
  *ld = K;
  return scratch.data();
}

// Any registered format without a SIMD kernel: each weight row dequantized by the format's
// scalar reference, then dotted with every activation row.
void GenericRows(const Weight& w, const float* x, int64_t ldx, int64_t t, float* out, int64_t ldo, int64_t n0,
                 int64_t n1) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(w.cols));
  const MatrixBytes m = BytesOf(w);
  const WeightFormatTraits& traits = WeightFormatOf(w.format);
  for (int64_t n = n0; n < n1; ++n) {
    traits.dequantize_row(m, n, row.data());
    for (int64_t i = 0; i < t; ++i) out[i * ldo + n] = Dot(x + i * ldx, DType::kF32, row.data(), w.cols);
  }
}

// Kernels by format id. Read on every matmul (from every thread), written only when a kernel is
// registered: atomic pointers to kernels that live for the process, so reads take no lock.
struct KernelTable {
  std::atomic<const MatMulKernel*> kernels[kMaxWeightFormats] = {};
};

KernelTable& Kernels() {
  static KernelTable* t = [] {
    auto* k = new KernelTable();
    static const MatMulKernel kDense = {DenseRows, nullptr}, kQuant = {QuantRows, nullptr},
                              kInt4 = {QuantRows, PermuteForInt4, Int4RowsInt8Best, Int4SupportsInt8};
    k->kernels[kWeightF32] = &kDense;
    k->kernels[kWeightBf16] = &kDense;
    k->kernels[kWeightFp8Block] = &kQuant;
    k->kernels[kWeightInt4Group] = &kInt4;
    return k;
  }();
  return *t;
}

}  // namespace

MatrixBytes BytesOf(const Weight& w) {
  MatrixBytes m;
  m.codes = w.data.data_as<uint8_t>();
  m.scales = w.scales.defined() ? w.scales.data_as<uint8_t>() : nullptr;
  m.rows = w.rows;
  m.cols = w.cols;
  m.params = w.params;
  return m;
}

void RegisterMatMulKernel(WeightFormatId format, const MatMulKernel& kernel) {
  LLMRT_CHECK(format < kMaxWeightFormats);
  Kernels().kernels[format].store(new MatMulKernel(kernel), std::memory_order_release);
}

const MatMulKernel* FindMatMulKernel(WeightFormatId format) {
  static const MatMulKernel kGeneric = {GenericRows, nullptr};
  if (format >= kMaxWeightFormats) return nullptr;
  if (const MatMulKernel* k = Kernels().kernels[format].load(std::memory_order_acquire)) return k;
  return FindWeightFormat(format) != nullptr ? &kGeneric : nullptr;
}

void MatMulWeightRows(const Weight& w, const float* x, int64_t ldx, int64_t t, float* out, int64_t ldo, int64_t n0,
                      int64_t n1) {
  const MatMulKernel* k = FindMatMulKernel(w.format);
  LLMRT_CHECK(k != nullptr);
  k->rows(w, x, ldx, t, out, ldo, n0, n1);
}

const float* PrepareActivations(const Weight& w, const float* x, int64_t ldx, int64_t t, CacheLineVector<float>& scratch,
                                int64_t* ld) {
  *ld = ldx;
  const MatMulKernel* k = FindMatMulKernel(w.format);
  LLMRT_CHECK(k != nullptr);
  return k->prepare == nullptr ? x : k->prepare(w, x, ldx, t, scratch, ld);
}

void DequantizeRow(const Weight& w, int64_t row, float* out) {
  WeightFormatOf(w.format).dequantize_row(BytesOf(w), row, out);
}

void MatMulRows(DType wdtype, const void* w, int64_t k, const float* x, int64_t ldx, int64_t t,
                float* out, int64_t ldo, int64_t n0, int64_t n1) {
  if (wdtype == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(MatMulRowsBf16)(w, k, x, ldx, t, out, ldo, n0, n1);
  } else {
    HWY_DYNAMIC_DISPATCH(MatMulRowsF32)(w, k, x, ldx, t, out, ldo, n0, n1);
  }
}

float Dot(const float* a, DType bdtype, const void* b, int64_t n) {
  if (bdtype == DType::kBF16) return HWY_DYNAMIC_DISPATCH(DotBf16)(a, b, n);
  if (bdtype == DType::kF8E4M3) return HWY_DYNAMIC_DISPATCH(DotFp8)(a, b, n);
  return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, n);
}

void Axpy(float alpha, DType xdtype, const void* x, float* y, int64_t n) {
  if (xdtype == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(AxpyBf16)(alpha, x, y, n);
  } else if (xdtype == DType::kF8E4M3) {
    HWY_DYNAMIC_DISPATCH(AxpyFp8)(alpha, x, y, n);
  } else {
    HWY_DYNAMIC_DISPATCH(AxpyF32)(alpha, x, y, n);
  }
}

void Fp8BlockRowsToF32(const uint8_t* codes, const float* scales, int64_t cols, int64_t block_rows,
                       int64_t block_cols, int64_t r0, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(Fp8BlockRowsToF32)(codes, scales, cols, block_rows, block_cols, r0, n, out);
}

void ToF32(float scale, DType dtype, const void* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ToF32)(scale, dtype, x, y, n);
}

void SoftmaxScaled(float* x, int64_t n, float scale) { HWY_DYNAMIC_DISPATCH(SoftmaxScaled)(x, n, scale); }

void AccumulateRows(const float* p, int64_t ldp, int64_t m, DType vdtype, const void* v, int64_t ldv, int64_t n,
                    int64_t cols, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(AccumulateRows)(p, ldp, m, vdtype, v, ldv, n, cols, out, ldo);
}

float DotScalar(const float* a, DType bdtype, const void* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    float bv = bdtype == DType::kBF16    ? Bf16ToF32(static_cast<const uint16_t*>(b)[i])
               : bdtype == DType::kF8E4M3 ? Fp8E4M3::ToFloat(static_cast<const uint8_t*>(b)[i])
                                          : static_cast<const float*>(b)[i];
    s += static_cast<double>(a[i]) * bv;
  }
  return static_cast<float>(s);
}

void MatMulRowsScalar(DType wdtype, const void* w, int64_t k, const float* x, int64_t ldx,
                      int64_t t, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const size_t es = DTypeSize(wdtype);
  for (int64_t n = n0; n < n1; ++n) {
    const void* row = static_cast<const uint8_t*>(w) + n * k * es;
    for (int64_t i = 0; i < t; ++i) out[i * ldo + n] = DotScalar(x + i * ldx, wdtype, row, k);
  }
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
