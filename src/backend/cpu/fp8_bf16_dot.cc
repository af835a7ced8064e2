// FP8 block-scaled weights under the BF16 activation policy: the code table, the scalar
// emulation, the AVX-512 GEMV on `vdpbf16ps` and the AMX tiles. See fp8_bf16_dot.h for the
// arithmetic every path keeps.
#include "src/backend/cpu/fp8_bf16_dot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/backend/cpu/bf16_lanes.h"
#include "src/backend/registry.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"
#include "src/util/status.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LLMRT_FP8_BF16_X86 1
#include <immintrin.h>
#else
#define LLMRT_FP8_BF16_X86 0
#endif

namespace llmrt::cpu {
namespace {

constexpr int64_t kBlock = Bf16Activations::kBlock;       // 32 columns: one `vdpbf16ps`, one tile step
constexpr int64_t kChunk = Fp8Bf16Activations::kChunk;  // 64 columns: one conversion

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Fp8ToBf16Bits for every code: the bf16 rounding of the code's float32 value, which is exact
// (e4m3 values have 4 significant bits and exponents 2^-9 .. 2^8) or a NaN.
const std::array<uint16_t, 256>& CodeTable() {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = F32ToBf16(Fp8E4M3::ToFloat(static_cast<uint8_t>(c)));
    return t;
  }();
  return table;
}

// Row n's scales: one per column block.
const float* RowScales(const Fp8BlockMatrix& w, int64_t n) {
  return w.scales + (n / w.block_rows) * CeilDiv(w.cols, w.block_cols);
}

// Activation row t's scale for column block b (nbc blocks per row): 1 without activation scales
// (the BF16 policy), where s * ActScale(...) is therefore s bit for bit.
inline float ActScale(const Fp8Bf16Activations& x, int64_t t, int64_t b, int64_t nbc) {
  return x.scales.empty() ? 1.0f : x.scales[static_cast<size_t>(t * nbc + b)];
}

// Weight column of element i (0..31) of step h (0 or 1) of a chunk: the unpacks' order.
inline int64_t ChunkColumn(int64_t h, int64_t i) { return 16 * (i / 8) + 8 * h + i % 8; }

// The scalar path: one output at a time in the arithmetic of fp8_bf16_dot.h, the dot steps
// emulating `vdpbf16ps` (bf16_lanes.h).
void RowsScalar(const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                int64_t n1) {
  const std::array<uint16_t, 256>& table = CodeTable();
  const int64_t K = w.cols, bc = w.block_cols, nbc = CeilDiv(K, bc);
  auto weight = [&](const uint8_t* q, int64_t col) { return col < K ? table[q[col]] : uint16_t{0}; };
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* q = w.codes + n * K;
    const float* s = RowScales(w, n);
    for (int64_t t = 0; t < x.rows; ++t) {
      const uint16_t* xr = x.values.data() + t * x.padded;
      float acc[16] = {};
      for (int64_t b = 0; b < nbc; ++b) {
        const int64_t c0 = b * bc, c1 = std::min(K, c0 + bc);
        float part[16] = {};
        for (int64_t c = c0; c < c1; c += kChunk) {
          for (int64_t h = 0; h < 2; ++h) {
            const uint16_t* xs = xr + c + h * kBlock;
            for (int64_t i = 0; i < 16; ++i) {
              part[i] = bf16_lanes::DpStep(part[i], xs[2 * i + 1], weight(q, c + ChunkColumn(h, 2 * i + 1)));
              part[i] = bf16_lanes::DpStep(part[i], xs[2 * i], weight(q, c + ChunkColumn(h, 2 * i)));
            }
          }
        }
        const float scale = s[b] * ActScale(x, t, b, nbc);
        for (int i = 0; i < 16; ++i) acc[i] = std::fma(part[i], scale, acc[i]);
      }
      out[t * ldo + n] = bf16_lanes::ReduceLanes(acc);
    }
  }
}

#if LLMRT_FP8_BF16_X86
// The lookup's constants: the high and the low byte of Fp8ToBf16Bits for the 128 magnitudes
// (sign bit clear).
struct LutBytes {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
};

const LutBytes& TheLutBytes() {
  static const LutBytes lut = [] {
    LutBytes l{};
    const std::array<uint16_t, 256>& table = CodeTable();
    for (int m = 0; m < 128; ++m) {
      l.hi[m] = static_cast<uint8_t>(table[m] >> 8);
      l.lo[m] = static_cast<uint8_t>(table[m] & 0xFF);
    }
    return l;
  }();
  return lut;
}
#endif

}  // namespace

#if LLMRT_FP8_BF16_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi")
namespace fp8_avx512 {

// The lookup in registers (5 of the 32).
struct Lut {
  __m512i hi0, hi1, lo0, lo1, sign;
};

inline Lut LoadLut() {
  const LutBytes& b = TheLutBytes();
  Lut l;
  l.hi0 = _mm512_load_si512(b.hi);
  l.hi1 = _mm512_load_si512(b.hi + 64);
  l.lo0 = _mm512_load_si512(b.lo);
  l.lo1 = _mm512_load_si512(b.lo + 64);
  l.sign = _mm512_set1_epi8(static_cast<char>(0x80));
  return l;
}

// 64 e4m3 codes -> 64 bf16 values in the chunk order of fp8_bf16_dot.h: *w0 the first step's 32,
// *w1 the second's. `vpermi2b` reads the low 7 bits of each code (the magnitude) as an index into
// the two 64-byte halves of a table; the sign bit is ORed into the high byte (a ternary-logic
// A | (B & C)); the unpacks pair each low byte with its high byte.
inline void Convert64(const Lut& l, __m512i q, __m512i* w0, __m512i* w1) {
  const __m512i hi = _mm512_permutex2var_epi8(l.hi0, q, l.hi1);
  const __m512i lo = _mm512_permutex2var_epi8(l.lo0, q, l.lo1);
  const __m512i hs = _mm512_ternarylogic_epi32(hi, q, l.sign, 0xF8);
  *w0 = _mm512_unpacklo_epi8(lo, hs);
  *w1 = _mm512_unpackhi_epi8(lo, hs);
}

// The codes [c, c + 64) of a row that has `left` codes from c on (fewer than 64: the rest read
// as code 0, +0).
inline __m512i LoadCodes(const uint8_t* q, int64_t left) {
  if (left >= kChunk) return _mm512_loadu_si512(q);
  return _mm512_maskz_loadu_epi8((uint64_t{1} << left) - 1, q);
}

// Reading ahead (a hint: never faults). Measured end to end on a generated Kimi-K2-structure FP8
// model (2 threads, batch 1): each row's columns of the next group of rows into L2, one hint per
// 64 codes, took decode from about the exact path's weight-read rate to 1.2-1.3x it; hints into
// L1, 2 or 4 KiB ahead in the row, gained little: each holds one of the core's few L1 miss
// buffers for a whole memory latency, which caps one core's stream, where L2 keeps more misses
// in flight.

// One chunk of 64 columns [c, c + 64) into the partial lanes of R weight rows x TT activation
// rows: the activation rows' two steps loaded once, each weight row's two bf16 vectors from
// weights(r, &w0, &w1) (converted codes or a panel), then two `vdpbf16ps` per pair in order.
template <int R, int TT, typename Weights>
__attribute__((always_inline)) inline void ChunkSteps(__m512 (&part)[TT][R], const uint16_t* const* xr, int64_t c,
                                                      Weights&& weights) {
  __m512i xv0[TT], xv1[TT];
#pragma GCC unroll 4
  for (int i = 0; i < TT; ++i) {
    xv0[i] = _mm512_load_si512(xr[i] + c);
    xv1[i] = _mm512_load_si512(xr[i] + c + kBlock);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m512i w0, w1;
    weights(r, &w0, &w1);
#pragma GCC unroll 4
    for (int i = 0; i < TT; ++i) {
      part[i][r] = _mm512_dpbf16_ps(part[i][r], (__m512bh)xv0[i], (__m512bh)w0);
      part[i][r] = _mm512_dpbf16_ps(part[i][r], (__m512bh)xv1[i], (__m512bh)w1);
    }
  }
}

// R weight rows x TT activation rows from row n and activation row t: the accumulators of
// fp8_bf16_dot.h in registers over the whole row.
template <int R, int TT>
void GemvTile(const Lut& l, const Fp8BlockMatrix& w, int64_t n, const Fp8Bf16Activations& x, int64_t t, float* out,
              int64_t ldo) {
  const int64_t K = w.cols, bc = w.block_cols, nbc = CeilDiv(K, bc);
  const uint8_t* q[R];
  const float* s[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    q[r] = w.codes + (n + r) * K;
    s[r] = RowScales(w, n + r);
  }
  const uint16_t* xr[TT];
#pragma GCC unroll 4
  for (int i = 0; i < TT; ++i) xr[i] = x.values.data() + (t + i) * x.padded;
  __m512 acc[TT][R];
#pragma GCC unroll 4
  for (int i = 0; i < TT; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nbc; ++b) {
    const int64_t c0 = b * bc, c1 = std::min(K, c0 + bc);
    __m512 part[TT][R];
#pragma GCC unroll 4
    for (int i = 0; i < TT; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) part[i][r] = _mm512_setzero_ps();
    }
    // One chunk of 64 columns, `left` of whose codes exist (the row's end: the rest read as +0).
    auto chunk = [&](int64_t c, int64_t left) __attribute__((always_inline)) {
      ChunkSteps<R, TT>(part, xr, c, [&](int r, __m512i* w0, __m512i* w1) __attribute__((always_inline)) {
        // The same columns of the next group of rows into L2 (see "Reading ahead" above).
        _mm_prefetch(reinterpret_cast<const char*>(q[r] + R * K + c), _MM_HINT_T1);
        Convert64(l, LoadCodes(q[r] + c, left), w0, w1);
      });
    };
    int64_t c = c0;
    for (; c + kChunk <= c1; c += kChunk) chunk(c, kChunk);
    if (c < c1) chunk(c, c1 - c);
    float sa[TT];
#pragma GCC unroll 4
    for (int i = 0; i < TT; ++i) sa[i] = ActScale(x, t + i, b, nbc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < TT; ++i) acc[i][r] = _mm512_fmadd_ps(part[i][r], _mm512_set1_ps(s[r][b] * sa[i]), acc[i][r]);
    }
  }
  alignas(64) float lanes[16];
#pragma GCC unroll 4
  for (int i = 0; i < TT; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm512_store_ps(lanes, acc[i][r]);
      out[(t + i) * ldo + n + r] = bf16_lanes::ReduceLanes(lanes);
    }
  }
}

using GemvTileFn = void (*)(const Lut&, const Fp8BlockMatrix&, int64_t, const Fp8Bf16Activations&, int64_t, float*,
                            int64_t);
constexpr int kMaxRows = 4;    // weight rows per pass
constexpr int kMaxTokens = 2;  // 2 x 4 x 2 accumulators + 5 table registers + codes and activations
constexpr GemvTileFn kGemvTiles[kMaxRows][kMaxTokens] = {
    {GemvTile<1, 1>, GemvTile<1, 2>},
    {GemvTile<2, 1>, GemvTile<2, 2>},
    {GemvTile<3, 1>, GemvTile<3, 2>},
    {GemvTile<4, 1>, GemvTile<4, 2>},
};

// Batches: a panel of kGemmRows weight rows x a span of whole column blocks is converted to bf16
// once (the conversion, 2.5 instructions per 32 codes, against 1 `vdpbf16ps` per 32 codes and
// activation row, would otherwise dominate), then register tiles of up to 4 weight rows x 2
// activation rows run over it, each over the span's blocks in order. Per block a tile starts its
// lanes P at +0, takes the block's chunks in order as the GEMV does, and folds P into its lanes
// A (A = fma(P, scale, A)), which stay in registers over the span and in memory between spans:
// every output sees the GEMV's operations in the GEMV's order, so the bits are the GEMV's. While
// a span's tiles run, the next span's codes are requested (each row's run is too short for the
// hardware prefetchers to pick up in time). Zen 4, one thread, 4096 columns, 64 activation rows,
// GB/s of codes in L2 / from DRAM: 4 x 4 tiles folding into memory per block over 512-column
// spans 0.85 / 0.79; 4 x 2 tiles keeping A in registers, 2048-column spans 1.09 / 1.05 (4 x 3
// spills; 4096-column spans 0.95: the panel leaves L2's fast half).
constexpr int64_t kGemmMinTokens = 8;
constexpr int64_t kGemmRows = 16;
constexpr int64_t kGemmTokens = 64;
constexpr int64_t kGemmSpanCols = 2048;
constexpr int kGemmTileTokens = 2;  // 8 lanes P + 8 lanes A + 4 activation and 2 weight vectors

// R weight rows x TT activation rows over the `nb` blocks of a span, `bc` columns each (the last
// `last_cols`); srow[r][b]: row r's scale of the span's block b; sact[i][b] the activation row's
// (nullptr: the BF16 policy, every one 1, so that the product is the weight's scale bit for bit).
template <int R, int TT>
void GemmTile(const uint16_t* panel, int64_t ldp, const uint16_t* const* xr, int64_t nb, int64_t bc,
              int64_t last_cols, const float* const* srow, const float* const* sact, float* acc, int64_t ld_acc) {
  __m512 A[TT][R];
#pragma GCC unroll 4
  for (int i = 0; i < TT; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) A[i][r] = _mm512_loadu_ps(acc + (i * ld_acc + r) * 16);
  }
  for (int64_t blk = 0; blk < nb; ++blk) {
    const int64_t c0 = blk * bc, cols = blk + 1 == nb ? last_cols : bc;
    __m512 part[TT][R];
#pragma GCC unroll 4
    for (int i = 0; i < TT; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) part[i][r] = _mm512_setzero_ps();
    }
    for (int64_t c = c0; c < c0 + cols; c += kChunk) {
      ChunkSteps<R, TT>(part, xr, c, [&](int r, __m512i* w0, __m512i* w1) __attribute__((always_inline)) {
        *w0 = _mm512_load_si512(panel + r * ldp + c);
        *w1 = _mm512_load_si512(panel + r * ldp + c + kBlock);
      });
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float sr = srow[r][blk];
#pragma GCC unroll 4
      for (int i = 0; i < TT; ++i) {
        A[i][r] = _mm512_fmadd_ps(part[i][r], _mm512_set1_ps(sact == nullptr ? sr : sr * sact[i][blk]), A[i][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < TT; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(acc + (i * ld_acc + r) * 16, A[i][r]);
  }
}

using GemmTileFn = void (*)(const uint16_t*, int64_t, const uint16_t* const*, int64_t, int64_t, int64_t,
                            const float* const*, const float* const*, float*, int64_t);
constexpr GemmTileFn kGemmTiles[4][kGemmTileTokens] = {
    {GemmTile<1, 1>, GemmTile<1, 2>},
    {GemmTile<2, 1>, GemmTile<2, 2>},
    {GemmTile<3, 1>, GemmTile<3, 2>},
    {GemmTile<4, 1>, GemmTile<4, 2>},
};

void Gemm(const Lut& l, const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
          int64_t n1) {
  const int64_t K = w.cols, bc = w.block_cols, nbc = CeilDiv(K, bc), kp = x.padded;
  const int64_t span_blocks = std::max<int64_t>(1, kGemmSpanCols / bc), span = span_blocks * bc;
  const bool act_scales = !x.scales.empty();
  thread_local CacheLineVector<uint16_t> panel;
  thread_local CacheLineVector<float> accs;
  panel.resize(static_cast<size_t>(kGemmRows * span));
  accs.resize(static_cast<size_t>(kGemmTokens * kGemmRows * 16));
  float* acc = accs.data();
  for (int64_t t0 = 0; t0 < x.rows; t0 += kGemmTokens) {
    const int64_t tb = std::min(kGemmTokens, x.rows - t0);
    for (int64_t r0 = n0; r0 < n1; r0 += kGemmRows) {
      const int64_t rb = std::min(kGemmRows, n1 - r0);
      const float* s[kGemmRows];
      for (int64_t r = 0; r < rb; ++r) s[r] = RowScales(w, r0 + r);
      std::fill(acc, acc + tb * rb * 16, 0.0f);
      for (int64_t b0 = 0; b0 < nbc; b0 += span_blocks) {
        const int64_t c0 = b0 * bc, width = std::min(span, kp - c0), valid = std::min(span, K - c0);
        for (int64_t r = 0; r < rb; ++r) {
          const uint8_t* q = w.codes + (r0 + r) * K + c0;
          uint16_t* d = panel.data() + r * span;
          for (int64_t c = 0; c < width; c += kChunk) {
            __m512i w0, w1;
            Convert64(l, LoadCodes(q + c, valid - c), &w0, &w1);
            _mm512_store_si512(d + c, w0);
            _mm512_store_si512(d + c + kBlock, w1);
          }
        }
        // The next span of these rows, or the first of the next rows (then from the next
        // token block's first rows: none).
        const int64_t nc = c0 + span < K ? c0 + span : 0, nr = nc != 0 ? r0 : r0 + kGemmRows;
        if (nr < n1) {
          const int64_t bytes = std::min(span, K - nc);
          for (int64_t r = 0; r < std::min(kGemmRows, n1 - nr); ++r) {
            const uint8_t* q = w.codes + (nr + r) * K + nc;
            for (int64_t c = 0; c < bytes; c += 64) _mm_prefetch(reinterpret_cast<const char*>(q + c), _MM_HINT_T0);
          }
        }
        const int64_t nb = std::min(nbc, b0 + span_blocks) - b0, last_cols = std::min(bc, kp - (b0 + nb - 1) * bc);
        for (int64_t t = 0; t < tb; t += kGemmTileTokens) {
          const int nt = static_cast<int>(std::min<int64_t>(kGemmTileTokens, tb - t));
          const uint16_t* xr[kGemmTileTokens];
          const float* sa[kGemmTileTokens];
          for (int i = 0; i < nt; ++i) {
            xr[i] = x.values.data() + (t0 + t + i) * kp + c0;
            sa[i] = act_scales ? x.scales.data() + (t0 + t + i) * nbc + b0 : nullptr;
          }
          for (int64_t r = 0; r < rb; r += 4) {
            const int nr4 = static_cast<int>(std::min<int64_t>(4, rb - r));
            const float* sr[4];
            for (int j = 0; j < nr4; ++j) sr[j] = s[r + j] + b0;
            kGemmTiles[nr4 - 1][nt - 1](panel.data() + r * span, span, xr, nb, bc, last_cols, sr,
                                        act_scales ? sa : nullptr, acc + (t * rb + r) * 16, rb);
          }
        }
      }
      bf16_lanes::ReduceLanesBlock(acc, tb * rb, rb, out + t0 * ldo + r0, ldo);
    }
  }
}

// Decode (fewer than kGemmMinTokens activation rows): four weight rows stream once per pair of
// activation rows, the codes converted in registers. Batches: the panel GEMM above.
void Rows(const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const Lut l = LoadLut();
  if (x.rows >= kGemmMinTokens) return Gemm(l, w, x, out, ldo, n0, n1);
  for (int64_t n = n0; n < n1; n += kMaxRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kMaxRows, n1 - n));
    for (int64_t t = 0; t < x.rows; t += kMaxTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTokens, x.rows - t));
      kGemvTiles[nr - 1][nt - 1](l, w, n, x, t, out, ldo);
    }
  }
}

}  // namespace fp8_avx512
#pragma GCC pop_options

// ---- AMX tiles ----
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi")
namespace fp8_amx {

using fp8_avx512::Convert64;
using fp8_avx512::LoadCodes;
using fp8_avx512::Lut;

// The 64-byte tile configuration (palette 1): tiles 0-3 hold block sums of 16 weight rows x 16
// activation rows (float32), 4-5 16 weight rows x 32 bf16 columns, 6-7 16 column pairs x 16
// activation rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int64_t kGroup = 16;  // rows of a tile

// The activation scales of group g's 16 rows for column block b (1 past the last row, and
// everywhere without activation scales: then s * 1 is s bit for bit).
inline __m512 GroupActScales(const Fp8Bf16Activations& x, int64_t g, int64_t b, int64_t nbc) {
  alignas(64) float sa[kGroup];
  for (int64_t j = 0; j < kGroup; ++j) {
    const int64_t t = g * kGroup + j;
    sa[j] = t < x.rows ? ActScale(x, t, b, nbc) : 1.0f;
  }
  return _mm512_load_ps(sa);
}

template <typename T>
T* AlignTo64(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// Rows [n, n + nr) (nr <= 32: two groups of 16) of weights x every activation row. Per column
// block: the block's codes of those rows become bf16 once (`wb`, [32][block_cols]), then for
// every pair of activation groups the tiles sum the block from zero and the sums are folded into
// `acc` ([2][groups][16 weight rows][16 activation rows]) with the block's scale, blocks in
// order: every output sees the same operations whatever the other rows.
void RowGroupPair(const Lut& l, const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, int64_t n, int64_t nr, float* acc,
                  uint16_t* wb, float* out, int64_t ldo) {
  const int64_t K = w.cols, bc = w.block_cols, nbc = CeilDiv(K, bc), kp = x.padded;
  const int64_t groups = CeilDiv(x.rows, kGroup);
  const bool two = nr > kGroup;
  const int64_t halves = two ? 2 : 1;
  const float* s[2 * kGroup];
  for (int64_t r = 0; r < nr; ++r) s[r] = RowScales(w, n + r);
  std::fill(acc, acc + halves * groups * kGroup * kGroup, 0.0f);
  // Rows of a short group read as zeros (their sums are never written out).
  std::fill(wb + nr * bc, wb + halves * kGroup * bc, uint16_t{0});
  alignas(64) float sums[4][kGroup * kGroup];
  for (int64_t b = 0; b < nbc; ++b) {
    const int64_t c0 = b * bc, width = std::min(bc, kp - c0), valid = std::min(bc, K - c0);
    for (int64_t r = 0; r < nr; ++r) {
      const uint8_t* q = w.codes + (n + r) * K + c0;
      uint16_t* d = wb + r * bc;
      for (int64_t c = 0; c < width; c += kChunk) {
        __m512i w0, w1;
        Convert64(l, LoadCodes(q + c, valid - c), &w0, &w1);
        _mm512_store_si512(d + c, w0);
        _mm512_store_si512(d + c + kBlock, w1);
      }
    }
    const int64_t steps = width / kBlock;
    for (int64_t g = 0; g < groups; g += 2) {
      const bool g2 = g + 1 < groups;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const uint16_t* p0 = x.pairs.data() + (g * (kp / 2) + c0 / 2) * 2 * kGroup;
      const uint16_t* p1 = p0 + (kp / 2) * 2 * kGroup;
      for (int64_t k = 0; k < steps; ++k) {
        _tile_loadd(4, wb + k * kBlock, bc * 2);
        if (two) _tile_loadd(5, wb + kGroup * bc + k * kBlock, bc * 2);
        _tile_loadd(6, p0 + k * kBlock * kGroup, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two) _tile_dpbf16ps(1, 5, 6);
        if (g2) {
          _tile_loadd(7, p1 + k * kBlock * kGroup, 64);
          _tile_dpbf16ps(2, 4, 7);
          if (two) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, sums[0], 64);
      if (two) _tile_stored(1, sums[1], 64);
      if (g2) {
        _tile_stored(2, sums[2], 64);
        if (two) _tile_stored(3, sums[3], 64);
      }
      // acc = fma(block sum, scale, acc) for each (weight row, activation row) of the tiles.
      for (int64_t gg = 0; gg < (g2 ? 2 : 1); ++gg) {
        const __m512 sa = GroupActScales(x, g + gg, b, nbc);
        for (int64_t h = 0; h < halves; ++h) {
          const float* sm = sums[gg * 2 + h];
          float* a = acc + ((h * groups + g + gg) * kGroup) * kGroup;
          const int64_t rows = std::min(kGroup, nr - h * kGroup);
          for (int64_t r = 0; r < rows; ++r) {
            const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(s[h * kGroup + r][b]), sa);
            const __m512 v = _mm512_fmadd_ps(_mm512_load_ps(sm + r * kGroup), sc, _mm512_loadu_ps(a + r * kGroup));
            _mm512_storeu_ps(a + r * kGroup, v);
          }
        }
      }
    }
  }
  // acc[h][g][r][t]: weight row n + 16h + r, activation row 16g + t.
  for (int64_t h = 0; h < halves; ++h) {
    const int64_t rows = std::min(kGroup, nr - h * kGroup);
    for (int64_t t = 0; t < x.rows; ++t) {
      const float* c = acc + ((h * groups + t / kGroup) * kGroup) * kGroup + t % kGroup;
      for (int64_t r = 0; r < rows; ++r) out[t * ldo + n + h * kGroup + r] = c[r * kGroup];
    }
  }
}

// Decode-sized calls (at most 16 activation rows: one group): 16 weight rows at a time, each
// row's codes converted a span of whole column blocks at a time (8 consecutive cache lines of a
// row for blocks of 128, which the hardware prefetchers follow, where a block at a time of 32
// rows is 32 interleaved streams of 2 lines), then the tiles sum each block of the span from
// zero and fold it in with its scale: the same operations per output as RowGroupPair's.
constexpr int64_t kSpanCols = 512;

void RowGroupDecode(const Lut& l, const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, int64_t n, int64_t nr,
                    uint16_t* wb, float* out, int64_t ldo) {
  const int64_t K = w.cols, bc = w.block_cols, nbc = CeilDiv(K, bc), kp = x.padded;
  const int64_t span_blocks = std::max<int64_t>(1, kSpanCols / bc), span = span_blocks * bc;
  const float* s[kGroup];
  for (int64_t r = 0; r < nr; ++r) s[r] = RowScales(w, n + r);
  alignas(64) float acc[kGroup * kGroup] = {};  // [weight row][activation row]
  alignas(64) float sums[kGroup * kGroup];
  std::fill(wb + nr * span, wb + kGroup * span, uint16_t{0});  // a short group's missing rows
  for (int64_t b0 = 0; b0 < nbc; b0 += span_blocks) {
    const int64_t c0 = b0 * bc, width = std::min(span, kp - c0), valid = std::min(span, K - c0);
    for (int64_t r = 0; r < nr; ++r) {
      const uint8_t* q = w.codes + (n + r) * K + c0;
      uint16_t* d = wb + r * span;
      for (int64_t c = 0; c < width; c += kChunk) {
        _mm_prefetch(reinterpret_cast<const char*>(q + kGroup * K + c), _MM_HINT_T1);  // the next group's
        __m512i w0, w1;
        Convert64(l, LoadCodes(q + c, valid - c), &w0, &w1);
        _mm512_store_si512(d + c, w0);
        _mm512_store_si512(d + c + kBlock, w1);
      }
    }
    for (int64_t b = b0; b < std::min(nbc, b0 + span_blocks); ++b) {
      const int64_t cb = (b - b0) * bc, steps = std::min(bc, kp - b * bc) / kBlock;
      const uint16_t* p = x.pairs.data() + (b * bc / 2) * 2 * kGroup;
      _tile_zero(0);
      for (int64_t k = 0; k < steps; ++k) {
        _tile_loadd(4, wb + cb + k * kBlock, span * 2);
        _tile_loadd(6, p + k * kBlock * kGroup, 64);
        _tile_dpbf16ps(0, 4, 6);
      }
      _tile_stored(0, sums, 64);
      const __m512 sa = GroupActScales(x, 0, b, nbc);
      for (int64_t r = 0; r < nr; ++r) {
        const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(s[r][b]), sa);
        const __m512 v = _mm512_fmadd_ps(_mm512_load_ps(sums + r * kGroup), sc, _mm512_load_ps(acc + r * kGroup));
        _mm512_store_ps(acc + r * kGroup, v);
      }
    }
  }
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t r = 0; r < nr; ++r) out[t * ldo + n + r] = acc[r * kGroup + t];
  }
}

void Rows(const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const Lut l = fp8_avx512::LoadLut();
  const int64_t groups = CeilDiv(x.rows, kGroup);
  // 64-byte aligned: a vector store or a tile row that straddles two cache lines costs two.
  thread_local CacheLineVector<float> acc;
  thread_local std::vector<uint16_t> wb;
  acc.resize(static_cast<size_t>(2 * groups * kGroup * kGroup + 16));
  wb.resize(static_cast<size_t>(kGroup * std::max(2 * w.block_cols, std::max(kSpanCols, w.block_cols)) + 32));
  float* acc64 = AlignTo64(acc.data());
  uint16_t* wb64 = AlignTo64(wb.data());
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = kGroup;
    cfg.colsb[i] = 64;
  }
  _tile_loadconfig(&cfg);
  if (groups == 1) {
    for (int64_t n = n0; n < n1; n += kGroup) {
      RowGroupDecode(l, w, x, n, std::min<int64_t>(kGroup, n1 - n), wb64, out, ldo);
    }
  } else {
    for (int64_t n = n0; n < n1; n += 2 * kGroup) {
      RowGroupPair(l, w, x, n, std::min<int64_t>(2 * kGroup, n1 - n), acc64, wb64, out, ldo);
    }
  }
  _tile_release();
}

}  // namespace fp8_amx
#pragma GCC pop_options

// ---- AVX2 + FMA (CPUs without AVX512_BF16 / VBMI) ----
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace fp8_avx2 {

// The same arithmetic as the scalar path (the vdpbf16ps steps as float32 FMAs under MXCSR's
// DAZ and FTZ, bit-identical to it as in bf16_dot.cc's AVX2 path). Each weight row is converted
// once per call into float32 in the steps' lane order, then every activation row, four at a
// time, runs its steps over it; a block's partial lanes are kept, and the scale FMAs that fold
// them (ordinary IEEE arithmetic) run after MXCSR is restored.
//
// A converted step (32 columns of a 64-column chunk): the 16 lanes' odd elements (lanes 0-7,
// then 8-15), then their even ones. Lanes 0-3 of step h hold the pairs of columns 8h .. 8h + 7,
// lanes 4-7 of 16 + 8h .., lanes 8-11 of 32 + 8h .., lanes 12-15 of 48 + 8h .. (ChunkColumn).

// 16 e4m3 codes (bytes) to their float32 values, exactly: the first 8 into *first, the rest into
// *second. Each byte, sign-extended to 16 bits, shifted left by 7 and with bit 14 cleared, is the
// float16 whose sign, exponent and top mantissa bits are the code's: the code's value over 2^8,
// normal and subnormal codes alike (the exponent biases are 7 and 15). `vcvtph2ps` widens it
// exactly and the product by 2^8 is exact. The NaN codes (magnitude 0x7F) become the float16
// all ones, a NaN. (Called outside the DAZ region: float16 subnormals are converted as they are.)
inline void CodesToFloats(__m128i codes, __m256* first, __m256* second) {
  __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7), _mm256_set1_epi16(-16385));
  const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)), _mm256_set1_epi16(0x3F80));
  h = _mm256_or_si256(h, nan);
  const __m256 scale = _mm256_set1_ps(256.0f);
  *first = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), scale);
  *second = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), scale);
}

// 64 codes (a chunk) into its two converted steps at d[0 .. 64).
inline void ConvertChunk(const uint8_t* q, float* d) {
  const __m128i odd_even = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14);
  const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
  const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32));
  const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 48));
  for (int h = 0; h < 2; ++h) {
    // Lanes 0-7: columns 8h .. 8h + 7 and 16 + 8h ..; lanes 8-15: 32 + 8h .. and 48 + 8h ...
    // Each shuffled to its 8 odd columns' codes, then its 8 even ones.
    const __m128i lo = _mm_shuffle_epi8(h == 0 ? _mm_unpacklo_epi64(v0, v1) : _mm_unpackhi_epi64(v0, v1), odd_even);
    const __m128i hi = _mm_shuffle_epi8(h == 0 ? _mm_unpacklo_epi64(v2, v3) : _mm_unpackhi_epi64(v2, v3), odd_even);
    __m256 odd_lo, even_lo, odd_hi, even_hi;
    CodesToFloats(lo, &odd_lo, &even_lo);
    CodesToFloats(hi, &odd_hi, &even_hi);
    float* s = d + h * kBlock;
    _mm256_storeu_ps(s, odd_lo);
    _mm256_storeu_ps(s + 8, odd_hi);
    _mm256_storeu_ps(s + 16, even_lo);
    _mm256_storeu_ps(s + 24, even_hi);
  }
}

// A row's codes, converted; columns past K as +0 (code 0).
void ConvertRow(const uint8_t* q, int64_t K, float* d) {
  const int64_t full = K / kChunk;
  for (int64_t c = 0; c < full; ++c) {
    _mm_prefetch(reinterpret_cast<const char*>(q + c * kChunk) + 2048, _MM_HINT_T0);
    ConvertChunk(q + c * kChunk, d + c * kChunk);
  }
  if (K % kChunk != 0) {
    alignas(64) uint8_t tail[kChunk] = {};
    std::memcpy(tail, q + full * kChunk, static_cast<size_t>(K % kChunk));
    ConvertChunk(tail, d + full * kChunk);
  }
}

// TT activation rows (bf16 values in the chunk order, row stride ldx) over one converted row:
// each block's partial lanes into parts[(t * nbc + b) * 16]. The caller sets DAZ / FTZ.
template <int TT>
inline void Steps(const float* wr, const uint16_t* x, int64_t ldx, int64_t nbc, int64_t chunks_per_block,
                  int64_t chunks, float* parts) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t b = 0; b < nbc; ++b) {
    __m256 lo[TT], hi[TT];
    for (int t = 0; t < TT; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
    const int64_t c1 = std::min(chunks, (b + 1) * chunks_per_block);
    for (int64_t s = b * chunks_per_block * 2; s < c1 * 2; ++s) {
      const float* w = wr + s * kBlock;
      const __m256 wo_lo = _mm256_loadu_ps(w), wo_hi = _mm256_loadu_ps(w + 8);
      const __m256 we_lo = _mm256_loadu_ps(w + 16), we_hi = _mm256_loadu_ps(w + 24);
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) {
        const uint16_t* xs = x + t * ldx + s * kBlock;
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 16));
        lo[t] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, high)), wo_lo, lo[t]);
        hi[t] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v1, high)), wo_hi, hi[t]);
        lo[t] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), we_lo, lo[t]);
        hi[t] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), we_hi, hi[t]);
      }
    }
    for (int t = 0; t < TT; ++t) {
      _mm256_storeu_ps(parts + (t * nbc + b) * 16, lo[t]);
      _mm256_storeu_ps(parts + (t * nbc + b) * 16 + 8, hi[t]);
    }
  }
}

using StepsFn = void (*)(const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t, float*);
constexpr int kTokens = 4;
constexpr StepsFn kSteps[kTokens] = {Steps<1>, Steps<2>, Steps<3>, Steps<4>};

void Rows(const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const int64_t K = w.cols, bc = w.block_cols, nbc = CeilDiv(K, bc), chunks = CeilDiv(K, kChunk);
  thread_local CacheLineVector<float> converted, parts;
  converted.resize(static_cast<size_t>(chunks * kChunk));
  parts.resize(static_cast<size_t>(kTokens * nbc * 16));
  for (int64_t n = n0; n < n1; ++n) {
    ConvertRow(w.codes + n * K, K, converted.data());
    const float* s = RowScales(w, n);
    for (int64_t t0 = 0; t0 < x.rows; t0 += kTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kTokens, x.rows - t0));
      // DAZ (bit 6) and FTZ (bit 15) for the dot steps only.
      const unsigned csr = _mm_getcsr();
      _mm_setcsr(csr | 0x8040u);
      kSteps[nt - 1](converted.data(), x.values.data() + t0 * x.padded, x.padded, nbc, bc / kChunk, chunks,
                     parts.data());
      _mm_setcsr(csr);
      for (int t = 0; t < nt; ++t) {
        __m256 a_lo = _mm256_setzero_ps(), a_hi = _mm256_setzero_ps();
        for (int64_t b = 0; b < nbc; ++b) {
          const __m256 scale = _mm256_set1_ps(s[b] * ActScale(x, t0 + t, b, nbc));
          a_lo = _mm256_fmadd_ps(_mm256_loadu_ps(parts.data() + (t * nbc + b) * 16), scale, a_lo);
          a_hi = _mm256_fmadd_ps(_mm256_loadu_ps(parts.data() + (t * nbc + b) * 16 + 8), scale, a_hi);
        }
        alignas(32) float lanes[16];
        _mm256_store_ps(lanes, a_lo);
        _mm256_store_ps(lanes + 8, a_hi);
        out[(t0 + t) * ldo + n] = bf16_lanes::ReduceLanes(lanes);
      }
    }
  }
}

}  // namespace fp8_avx2
#pragma GCC pop_options
#endif  // LLMRT_FP8_BF16_X86

Fp8BlockMatrix Fp8BlockOf(const Weight& w) {
  LLMRT_CHECK(w.format == kWeightFp8Block);
  Fp8BlockMatrix m;
  m.codes = w.data.data_as<uint8_t>();
  m.scales = w.scales.data_as<float>();
  m.rows = w.rows;
  m.cols = w.cols;
  m.block_rows = w.params.block_rows;
  m.block_cols = w.params.block_cols;
  return m;
}

uint16_t Fp8ToBf16Bits(uint8_t code) { return CodeTable()[code]; }

bool Fp8SupportsBf16(const Fp8BlockMatrix& w) {
  static_assert(kChunk == 64, "Fp8BlocksTakeActivationPolicy assumes 64-column chunks");
  return Fp8BlocksTakeActivationPolicy(w.block_rows, w.block_cols);
}

int64_t Fp8Bf16Position(int64_t col) {
  const int64_t c = col % kChunk, group = c / 8;  // 8-column groups: 0 2 4 6 1 3 5 7
  return col - c + (group % 2) * kBlock + (group / 2) * 8 + c % 8;
}

void RoundActivationsFp8Bf16(const float* x, int64_t ldx, int64_t t, int64_t k, Fp8Bf16Activations* out,
                             bool tile_layout) {
  LLMRT_CHECK(t >= 0 && k >= 0);
  out->rows = t;
  out->cols = k;
  out->padded = CeilDiv(k, kChunk) * kChunk;
  out->scale_cols = 0;
  out->scales.clear();
  out->values.resize(static_cast<size_t>(t * out->padded));
  RoundRowsBf16(x, ldx, t, k, out->padded, out->values.data());
  // Each chunk's 8-column groups from 0 1 2 3 4 5 6 7 to 0 2 4 6 1 3 5 7 (16 bytes each).
  for (int64_t r = 0; r < t; ++r) {
    uint16_t* v = out->values.data() + r * out->padded;
    for (int64_t c = 0; c < out->padded; c += kChunk) {
      uint16_t tmp[kChunk];
      std::memcpy(tmp, v + c, sizeof(tmp));
      for (int64_t g = 0; g < 8; ++g) std::memcpy(v + c + (g % 2) * kBlock + (g / 2) * 8, tmp + 8 * g, 16);
    }
  }
  if (tile_layout) {
    PackBf16Pairs(out->values.data(), t, out->padded, &out->pairs);
  } else {
    out->pairs.clear();
  }
}

void QuantizeActivationsFp8(const float* x, int64_t ldx, int64_t t, int64_t k, int64_t block_cols,
                            Fp8Bf16Activations* out, bool tile_layout) {
  LLMRT_CHECK(t >= 0 && k >= 0 && block_cols > 0 && block_cols % kChunk == 0);
  const std::array<uint16_t, 256>& table = CodeTable();
  const int64_t nb = CeilDiv(k, block_cols);
  out->rows = t;
  out->cols = k;
  out->padded = CeilDiv(k, kChunk) * kChunk;
  out->values.assign(static_cast<size_t>(t * out->padded), uint16_t{0});  // +0 past k
  out->scale_cols = block_cols;
  out->scales.resize(static_cast<size_t>(t * nb));
  for (int64_t r = 0; r < t; ++r) {
    const float* xr = x + r * ldx;
    uint16_t* v = out->values.data() + r * out->padded;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * block_cols, c1 = std::min(k, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) {
        const float a = std::fabs(xr[c]);
        if (std::isnan(a) || a > amax) amax = a;  // a NaN wins (and then the scale is 1 below)
      }
      float scale = amax / Fp8E4M3::kMax;
      if (!(scale >= std::numeric_limits<float>::min())) scale = 1.0f;  // zero, float32 denormal or NaN
      const float inv = 1.0f / scale;
      out->scales[static_cast<size_t>(r * nb + b)] = scale;
      for (int64_t c = c0; c < c1; ++c) v[Fp8Bf16Position(c)] = table[Fp8E4M3::FromFloat(xr[c] * inv)];
    }
  }
  if (tile_layout) {
    PackBf16Pairs(out->values.data(), t, out->padded, &out->pairs);
  } else {
    out->pairs.clear();
  }
}

bool Fp8SupportsBf16(const Weight& w) { return w.format == kWeightFp8Block && Fp8SupportsBf16(Fp8BlockOf(w)); }

bool Fp8Bf16IsaAvailable(Bf16Isa isa) {
  if (isa == Bf16Isa::kScalar) return true;
#if LLMRT_FP8_BF16_X86
  if (isa == Bf16Isa::kAvx2Fma) return Bf16IsaAvailable(isa) && __builtin_cpu_supports("f16c");
  return Bf16IsaAvailable(isa) && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

Bf16Isa BestFp8Bf16Isa() {
  static const Bf16Isa best = Fp8Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) ? Bf16Isa::kAvx512Bf16
                              : Fp8Bf16IsaAvailable(Bf16Isa::kAvx2Fma)  ? Bf16Isa::kAvx2Fma
                                                                        : Bf16Isa::kScalar;
  return best;
}

void Fp8MatMulRows(Bf16Isa isa, const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo,
                   int64_t n0, int64_t n1) {
  LLMRT_CHECK(Fp8SupportsBf16(w) && x.cols == w.cols && Fp8Bf16IsaAvailable(isa) && n0 <= n1);
  LLMRT_CHECK(x.scales.empty() ||
              (x.scale_cols == w.block_cols && x.scales.size() == static_cast<size_t>(x.rows * CeilDiv(x.cols, x.scale_cols))));
  if (x.rows == 0 || n0 == n1) return;
  switch (isa) {
#if LLMRT_FP8_BF16_X86
    case Bf16Isa::kAmx:
      LLMRT_CHECK(x.pairs.size() == static_cast<size_t>(CeilDiv(x.rows, 16) * x.padded * 16));
      return fp8_amx::Rows(w, x, out, ldo, n0, n1);
    case Bf16Isa::kAvx512Bf16: return fp8_avx512::Rows(w, x, out, ldo, n0, n1);
    case Bf16Isa::kAvx2Fma: return fp8_avx2::Rows(w, x, out, ldo, n0, n1);
#endif
    default: return RowsScalar(w, x, out, ldo, n0, n1);
  }
}

void Fp8MatMulRowsBest(const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                       int64_t n1) {
  Fp8MatMulRows(BestFp8Bf16Isa(), w, x, out, ldo, n0, n1);
}

}  // namespace llmrt::cpu
