// One x86 path of the INT4 x int8 kernel (see int8_dot.h). int8_dot.cc includes this file once
// per path inside a `#pragma GCC target` region, with LLMRT_INT8_NS (the path's namespace) and
// LLMRT_INT8_PATH (0: AVX2 vpmaddubsw + vpmaddwd, 1: AVX-VNNI, 2: AVX-512 VNNI) defined. No
// include guard on purpose.
//
// The activation layout (per 128-column chunk: the blocks' even-column codes, then their
// odd-column codes) makes one 32-byte load of weight codes (blocks b, b + 1), split into low and
// high nibbles, meet two 32-byte loads of activation codes: the products of block b land in int32
// lanes 0-3, those of block b + 1 in lanes 4-7. Eight blocks' lane vectors are reduced with a
// horizontal-add tree into one vector of eight block sums, in block order.

namespace LLMRT_INT8_NS {

// Unsigned bytes u times signed bytes s, summed by four into int32 lanes, added to acc.
inline __m256i Dp(__m256i acc, __m256i u, __m256i s) {
#if LLMRT_INT8_PATH == 0
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#elif LLMRT_INT8_PATH == 1
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_dpbusd_epi32(acc, u, s);
#endif
}

inline __m128i Dp128(__m128i acc, __m128i u, __m128i s) {
#if LLMRT_INT8_PATH == 0
  return _mm_add_epi32(acc, _mm_madd_epi16(_mm_maddubs_epi16(u, s), _mm_set1_epi16(1)));
#elif LLMRT_INT8_PATH == 1
  return _mm_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm_dpbusd_epi32(acc, u, s);
#endif
}

// Blocks b, b + 1 with their codes split into nibbles (lo: even columns, hi: odd columns) and
// e / o = their 32 even / odd activation codes: block b's sums in int32 lanes 0-3, b + 1's in 4-7.
inline __m256i DotSplit(__m256i lo, __m256i hi, const int8_t* xe, const int8_t* xo) {
  const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe));
  const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo));
#if LLMRT_INT8_PATH == 0
  // Each vpmaddubsw lane is at most 2 * 15 * 127 = 3810 in magnitude: two of them add in int16.
  const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, e), _mm256_maddubs_epi16(hi, o));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
#else
  return Dp(Dp(_mm256_setzero_si256(), lo, e), hi, o);
#endif
}

inline __m256i LowNibbles(__m256i b) { return _mm256_and_si256(b, _mm256_set1_epi8(0x0F)); }
inline __m256i HighNibbles(__m256i b) { return _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0F)); }

// Blocks b, b + 1: w = their 32 code bytes, xe / xo = their 32 even / odd activation codes.
inline __m256i DotPair(const uint8_t* w, const int8_t* xe, const int8_t* xo) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return DotSplit(LowNibbles(b), HighNibbles(b), xe, xo);
}

// One block (the last of a chunk with an odd number of blocks): its sums in lanes 0-3.
inline __m256i DotOne(const uint8_t* w, const int8_t* xe, const int8_t* xo) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xe));
  const __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xo));
  return _mm256_zextsi128_si256(Dp128(Dp128(_mm_setzero_si128(), lo, e), hi, o));
}


// The weight scales of blocks b0 .. b0 + 7 as float32 (bf16 widened: exact). g32: eight scales;
// g128 (and b0 a multiple of 8): two, each over four blocks; other groups gathered one by one.
inline __m256 WeightScales8(const uint16_t* ws, int64_t b0, int64_t gpb) {
  __m128i raw;
  if (gpb == 1) {
    raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ws + b0));
  } else if (gpb == 4) {
    raw = _mm_unpacklo_epi64(_mm_set1_epi16(static_cast<int16_t>(ws[b0 / 4])),
                             _mm_set1_epi16(static_cast<int16_t>(ws[b0 / 4 + 1])));
  } else {
    alignas(16) uint16_t g[8];
    for (int64_t i = 0; i < 8; ++i) g[i] = ws[(b0 + i) / gpb];
    raw = _mm_load_si128(reinterpret_cast<const __m128i*>(g));
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

// How far ahead of the chunk in work its row's codes are prefetched (measured on a 256 MB
// matrix, one thread: 4.8 GB/s without, 7.0 with 2-4 KiB, less below 1 KiB).
constexpr int64_t kPrefetchBytes = 2048;

// The eight block sums of one row from the pair vectors of blocks (b0, b0 + 1), (b0 + 2, b0 + 3),
// (b0 + 4, b0 + 5), (b0 + 6, b0 + 7): lane sums [b0, b2, b4, b6 | b1, b3, b5, b7] by a
// horizontal-add tree, then block order. The two halves of the tree are formed as the chunks
// finish (h01 = hadd(p0, p1), h23 = hadd(p2, p3)).
inline __m256i BlockOrder(__m256i h01, __m256i h23) {
  return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(h01, h23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Blocks b0 .. b0 + 7 (two whole chunks; wc = their 128 code bytes) of NT activation rows, in
// straight-line code: each chunk's codes are loaded and split once for all rows, and every
// intermediate stays in a register.
template <int NT>
inline void Full8(const uint8_t* wc, const int8_t* const* xc, int64_t b0, __m256i* s) {
  // A row is one stream of codes, and the hardware prefetchers stop at every 4 KiB page
  // (two rows of K = 4096): read ahead in software, across pages, one line per chunk.
  _mm_prefetch(reinterpret_cast<const char*>(wc) + kPrefetchBytes, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(wc) + 64 + kPrefetchBytes, _MM_HINT_T0);
  __m256i h[2][NT];
  #pragma GCC unroll 4
  for (int c = 0; c < 2; ++c) {
#if LLMRT_INT8_PATH == 2
    const __m512i b = _mm512_loadu_si512(wc + c * 64);
    const __m512i mask = _mm512_set1_epi8(0x0F);
    const __m512i lo = _mm512_and_si512(b, mask);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), mask);
    #pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      const int8_t* xe = xc[j] + (b0 + 4 * c) * 32;
      const __m512i a = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xe)),
                                            hi, _mm512_loadu_si512(xe + 64));
      // The zero-masked extracts: GCC 12's plain cast / extract read an "undefined" register
      // that -Wmaybe-uninitialized reports.
      h[c][j] = _mm256_hadd_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, a, 0), _mm512_maskz_extracti64x4_epi64(0xFF, a, 1));
    }
#else
    const __m256i b01 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wc + c * 64));
    const __m256i b23 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wc + c * 64 + 32));
    const __m256i lo01 = LowNibbles(b01), hi01 = HighNibbles(b01);
    const __m256i lo23 = LowNibbles(b23), hi23 = HighNibbles(b23);
    #pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      const int8_t* xe = xc[j] + (b0 + 4 * c) * 32;  // the chunk's even codes; its odd ones at + 64
      h[c][j] = _mm256_hadd_epi32(DotSplit(lo01, hi01, xe, xe + 64), DotSplit(lo23, hi23, xe + 32, xe + 96));
    }
#endif
  }
  #pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) s[j] = BlockOrder(h[0][j], h[1][j]);
}

// The last m < 8 blocks of a row (b0 .. nb - 1; chunks of 1-4 blocks): pairs, then a single
// block where a chunk has an odd count.
template <int NT>
inline void Partial(const uint8_t* wrow, const int8_t* const* xc, int64_t nb, int64_t b0, __m256i* s) {
  const int64_t m = nb - b0;  // 1 .. 7
  // p[j][i]: blocks b0 + 2i (lanes 0-3) and b0 + 2i + 1 (lanes 4-7) of activation row j; zero
  // past the end.
  __m256i p[NT][4];
  #pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) {
    #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) p[j][i] = _mm256_setzero_si256();
  }
  for (int64_t c = 0; c < m; c += 4) {
    const int64_t cb = b0 + c, cm = std::min<int64_t>(4, nb - cb);
    const uint8_t* wc = wrow + cb * 16;
    #pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      const int8_t* xe = xc[j] + cb * 32;
      const int8_t* xo = xe + cm * 16;
      int64_t i = 0;
      for (; i + 2 <= cm; i += 2) p[j][(c + i) / 2] = DotPair(wc + i * 16, xe + i * 16, xo + i * 16);
      if (i < cm) p[j][(c + i) / 2] = DotOne(wc + i * 16, xe + i * 16, xo + i * 16);
    }
  }
  #pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) {
    s[j] = BlockOrder(_mm256_hadd_epi32(p[j][0], p[j][1]), _mm256_hadd_epi32(p[j][2], p[j][3]));
  }
}

// Eight blocks' sums s (in block order) into the lanes of a: sum (u - 8) x = sum u x - 8 sum x,
// exact in int32 (sums: the activation codes' sums); then one FMA per block into lane b % 8 with
// its scale product d = x_scale * w_scale (one float product each, the same whether formed in
// lanes or one by one).
inline __m256 Fold(__m256 a, __m256i s, __m256i sums, __m256 d) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_slli_epi32(sums, 3))), d, a);
}

// Activation rows t0 .. t0 + NT - 1 of weight row n (NT a compile-time count, so that the
// per-row sums stay in registers).
template <int NT>
inline void Int4RowTile(const uint8_t* wrow, const uint16_t* ws, int64_t nb, int64_t gpb, const Int8Activations& x,
                        int64_t t0, float* out, int64_t ldo, int64_t n) {
  const int64_t K = x.cols;
  const int8_t* xc[NT];
  const float* xs[NT];
  const int32_t* xsum[NT];
  __m256 acc[NT];
  #pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) {
    xc[j] = x.codes.data() + (t0 + j) * K;
    xs[j] = x.scales.data() + (t0 + j) * nb;
    xsum[j] = x.sums.data() + (t0 + j) * nb;
    acc[j] = _mm256_setzero_ps();
  }
  int64_t b0 = 0;
  for (; b0 + 8 <= nb; b0 += 8) {
    __m256i s[NT];  // the int32 sums of blocks b0 .. b0 + 7 of activation row j, in block order
    Full8<NT>(wrow + b0 * 16, xc, b0, s);
    const __m256 wsc = WeightScales8(ws, b0, gpb);
    #pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xsum[j] + b0));
      acc[j] = Fold(acc[j], s[j], sums, _mm256_mul_ps(_mm256_loadu_ps(xs[j] + b0), wsc));
    }
  }
  if (b0 < nb) {  // the last 1-7 blocks; lanes past the end add 0 x 0
    __m256i s[NT];
    Partial<NT>(wrow, xc, nb, b0, s);
    #pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      alignas(32) int32_t si[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      alignas(32) float di[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = 0; b0 + i < nb; ++i) {
        si[i] = xsum[j][b0 + i];
        di[i] = xs[j][b0 + i] * Bf16ToF32(ws[(b0 + i) / gpb]);
      }
      acc[j] = Fold(acc[j], s[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(si)), _mm256_load_ps(di));
    }
  }
  #pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[j]);
    out[(t0 + j) * ldo + n] = CombineLanes(lanes);
  }
}

// Up to four activation rows per pass over a weight row: each chunk's codes are loaded and split
// into nibbles once for all of them (decode with a few rows; every batch on the 256-bit paths).
// Every (row, activation row) still forms its block sums and folds them into its own accumulator
// in block order, exactly as with one activation row, so results do not depend on the batch.
// The activation rows go kRowsTokenBlock at a time (their codes, 4 KiB a row at K = 4096, stay
// in L2 while every weight row passes over them).
constexpr int64_t kRowsTokenBlock = 64;

void Int4RowsByRow(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const int64_t K = w.cols, nb = K / 32, ng = K / w.params.group, gpb = w.params.group / 32;
  const uint8_t* codes = w.data.data_as<uint8_t>();
  const uint16_t* wscales = w.scales.data_as<uint16_t>();
  for (int64_t tb0 = 0; tb0 < x.rows; tb0 += kRowsTokenBlock) {
    const int64_t tb1 = std::min(x.rows, tb0 + kRowsTokenBlock);
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* wrow = codes + n * (K / 2);
      const uint16_t* ws = wscales + n * ng;
      int64_t t0 = tb0;
      for (; t0 + 4 <= tb1; t0 += 4) Int4RowTile<4>(wrow, ws, nb, gpb, x, t0, out, ldo, n);
      switch (tb1 - t0) {
        case 3: Int4RowTile<3>(wrow, ws, nb, gpb, x, t0, out, ldo, n); break;
        case 2: Int4RowTile<2>(wrow, ws, nb, gpb, x, t0, out, ldo, n); break;
        case 1: Int4RowTile<1>(wrow, ws, nb, gpb, x, t0, out, ldo, n); break;
        default: break;
      }
    }
  }
}

#if LLMRT_INT8_PATH == 2
// ---- batches on AVX-512 VNNI: sixteen weight rows per vector ----
//
// The row kernel above spends most of its instructions turning each `vpdpbusd`'s sixteen int32
// lanes into block sums (extracts, horizontal adds, a permute) before the block's fold. Here a
// panel holds kPanelRows weight rows interleaved so that int32 lane r of a vector is row r:
// vector (b, i) of the panel holds, for each row, the four code bytes [4i, 4i + 4) of its block
// b (the low nibbles: even columns 8i, 8i + 2, 8i + 4, 8i + 6; the high ones the odd columns
// after them). One `vpdpbusd` with a token's four matching activation codes broadcast then adds
// four products into every row's lane, and eight of them (four steps, low and high nibbles) give
// each row's exact block sum in its own lane: the fold (one FMA per block into the row's lane
// b % 8) and the lane combination follow, vector-wide, the row kernel's operations in its order,
// so the bits are the row kernel's. The panel spans kPanelBlocks blocks (8 KiB of codes, in L1)
// and is packed once for kPanelTokens activation rows; a tile of two activation rows keeps its
// 2 x 8 lane vectors in registers over the span.
constexpr int64_t kPanelRows = 16;
constexpr int64_t kPanelBlocks = 32;
constexpr int64_t kPanelTokens = 64;
constexpr int64_t kPanelMinTokens = 8;

// Blocks [b0, b0 + nbs) of rows n .. n + 15 into the panel (int32 [nbs][4][16]) and their
// weight scales (float [nbs][16]).
inline void PackPanel(const uint8_t* codes, const uint16_t* wscales, int64_t K, int64_t ng, int64_t gpb, int64_t n,
                      int64_t b0, int64_t nbs, int32_t* panel, float* wsp) {
  const int64_t row_bytes = K / 2;
  // B_q, 128-bit lane i: the int32 words i of rows 4q .. 4q + 3.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  constexpr __mmask16 kAll = 0xFFFF;  // (the zero-masked forms: GCC 12 warns on the plain ones)
  for (int64_t b = 0; b < nbs; ++b) {
    const uint8_t* src = codes + n * row_bytes + (b0 + b) * 16;
    __m512i B[4];
    for (int q = 0; q < 4; ++q) {
      const uint8_t* r = src + 4 * q * row_bytes;
      __m512i a = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r)));
      a = _mm512_inserti32x4(a, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + row_bytes)), 1);
      a = _mm512_inserti32x4(a, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * row_bytes)), 2);
      a = _mm512_inserti32x4(a, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * row_bytes)), 3);
      B[q] = _mm512_maskz_permutexvar_epi32(kAll, idx, a);
    }
    const __m512i c01 = _mm512_maskz_shuffle_i32x4(kAll, B[0], B[1], 0x44), c23 = _mm512_maskz_shuffle_i32x4(kAll, B[2], B[3], 0x44);
    const __m512i d01 = _mm512_maskz_shuffle_i32x4(kAll, B[0], B[1], 0xEE), d23 = _mm512_maskz_shuffle_i32x4(kAll, B[2], B[3], 0xEE);
    int32_t* dst = panel + b * 64;
    _mm512_storeu_si512(dst, _mm512_maskz_shuffle_i32x4(kAll, c01, c23, 0x88));
    _mm512_storeu_si512(dst + 16, _mm512_maskz_shuffle_i32x4(kAll, c01, c23, 0xDD));
    _mm512_storeu_si512(dst + 32, _mm512_maskz_shuffle_i32x4(kAll, d01, d23, 0x88));
    _mm512_storeu_si512(dst + 48, _mm512_maskz_shuffle_i32x4(kAll, d01, d23, 0xDD));
    for (int64_t r = 0; r < kPanelRows; ++r) wsp[b * 16 + r] = Bf16ToF32(wscales[(n + r) * ng + (b0 + b) / gpb]);
  }
}

// Activation rows t .. t + TT - 1 over the panel's nbs blocks (global blocks b0 ..; b0 % 8 == 0),
// their lane vectors A[j][lane] in acc ([TT][8][16] floats) on entry and exit.
template <int TT>
inline void PanelTile(const int32_t* panel, const float* wsp, const Int8Activations& x, int64_t t, int64_t nb,
                      int64_t b0, int64_t nbs, float* acc) {
  const int64_t K = x.cols;
  __m512 A[TT][8];
#pragma GCC unroll 8
  for (int j = 0; j < TT; ++j) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) A[j][l] = _mm512_loadu_ps(acc + (j * 8 + l) * 16);
  }
  const __m512i mask = _mm512_set1_epi8(0x0F);
  for (int64_t b8 = 0; b8 < nbs; b8 += 8) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const int64_t b = b8 + l;
      if (b >= nbs) break;
      const int64_t bg = b0 + b;
      const int8_t* xe[TT];
      const int8_t* xo[TT];
#pragma GCC unroll 2
      for (int j = 0; j < TT; ++j) {
        const int8_t* xc = x.codes.data() + (t + j) * K;
        const int64_t chunk = bg / 4, in_chunk = bg % 4, chunk_blocks = std::min<int64_t>(4, nb - chunk * 4);
        xe[j] = xc + chunk * 128 + in_chunk * 16;
        xo[j] = xe[j] + chunk_blocks * 16;
      }
      __m512i lo_sum[TT], hi_sum[TT];
#pragma GCC unroll 2
      for (int j = 0; j < TT; ++j) lo_sum[j] = hi_sum[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_loadu_si512(panel + (b * 4 + i) * 16);
        const __m512i lo = _mm512_and_si512(v, mask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
#pragma GCC unroll 2
        for (int j = 0; j < TT; ++j) {
          int32_t e, o;
          std::memcpy(&e, xe[j] + 4 * i, 4);
          std::memcpy(&o, xo[j] + 4 * i, 4);
          lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, _mm512_set1_epi32(e));
          hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, _mm512_set1_epi32(o));
        }
      }
      const __m512 ws = _mm512_loadu_ps(wsp + b * 16);
#pragma GCC unroll 2
      for (int j = 0; j < TT; ++j) {
        // sum (u - 8) x = sum u x - 8 sum x, exact in int32; d = x_scale * w_scale per row.
        const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(lo_sum[j], hi_sum[j]),
                                              _mm512_set1_epi32(x.sums[(t + j) * nb + bg] * 8));
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(x.scales[(t + j) * nb + bg]), ws);
        A[j][l] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, isum), d, A[j][l]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < TT; ++j) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) _mm512_storeu_ps(acc + (j * 8 + l) * 16, A[j][l]);
  }
}

// Rows n0 .. n0 + 16 * groups - 1 for every activation row (x.rows >= kPanelMinTokens).
void Int4RowsPanels(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0, int64_t groups) {
  const int64_t K = w.cols, nb = K / 32, ng = K / w.params.group, gpb = w.params.group / 32;
  const uint8_t* codes = w.data.data_as<uint8_t>();
  const uint16_t* wscales = w.scales.data_as<uint16_t>();
  thread_local CacheLineVector<int32_t> panel;
  thread_local CacheLineVector<float> wsp, accs;
  panel.resize(static_cast<size_t>(kPanelBlocks * 4 * kPanelRows));
  wsp.resize(static_cast<size_t>(kPanelBlocks * kPanelRows));
  accs.resize(static_cast<size_t>(kPanelTokens * 8 * kPanelRows));
  for (int64_t t0 = 0; t0 < x.rows; t0 += kPanelTokens) {
    const int64_t tb = std::min(kPanelTokens, x.rows - t0);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t n = n0 + g * kPanelRows;
      std::fill(accs.begin(), accs.begin() + tb * 8 * kPanelRows, 0.0f);
      for (int64_t b0 = 0; b0 < nb; b0 += kPanelBlocks) {
        const int64_t nbs = std::min(kPanelBlocks, nb - b0);
        PackPanel(codes, wscales, K, ng, gpb, n, b0, nbs, panel.data(), wsp.data());
        int64_t t = 0;
        for (; t + 2 <= tb; t += 2) {
          PanelTile<2>(panel.data(), wsp.data(), x, t0 + t, nb, b0, nbs, accs.data() + t * 8 * kPanelRows);
        }
        if (t < tb) PanelTile<1>(panel.data(), wsp.data(), x, t0 + t, nb, b0, nbs, accs.data() + t * 8 * kPanelRows);
      }
      // CombineLanes, vector-wide: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
      for (int64_t t = 0; t < tb; ++t) {
        const float* a = accs.data() + t * 8 * kPanelRows;
        auto lane = [&](int l) { return _mm512_loadu_ps(a + l * 16); };
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(lane(0), lane(4)), _mm512_add_ps(lane(2), lane(6))),
                                       _mm512_add_ps(_mm512_add_ps(lane(1), lane(5)), _mm512_add_ps(lane(3), lane(7))));
        _mm512_storeu_ps(out + (t0 + t) * ldo + n, s);
      }
    }
  }
}
#endif

void Int4Rows(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
#if LLMRT_INT8_PATH == 2
  if (x.rows >= kPanelMinTokens) {
    const int64_t groups = (n1 - n0) / kPanelRows;
    Int4RowsPanels(w, x, out, ldo, n0, groups);
    n0 += groups * kPanelRows;
  }
#endif
  if (n0 < n1) Int4RowsByRow(w, x, out, ldo, n0, n1);
}

}  // namespace LLMRT_INT8_NS
