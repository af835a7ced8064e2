// INT4 x int8 matmuls with integer dot products: activation rounding, the scalar reference, the
// x86 paths (int8_dot_x86-inl.h, compiled per target) and the choice among them.
#include "src/backend/cpu/int8_dot.h"

#include "src/backend/cpu/cache_line_vector.h"
#include "src/backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "src/util/bf16.h"
#include "src/util/status.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LLMRT_INT8_X86 1
#include <immintrin.h>
#else
#define LLMRT_INT8_X86 0
#endif

namespace llmrt::cpu {
namespace {

// The eight float32 lanes of a row's accumulator, added in the order every path uses (the
// order of a 256-bit reduction: halves, then pairs).
inline float CombineLanes(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

// Where the codes of column `col` (inside block b) of a row sit in Int8Activations::codes.
inline int64_t CodeIndex(int64_t nb, int64_t b, int64_t j, bool odd) {
  const int64_t chunk = b / 4, in_chunk = b % 4, chunk_blocks = std::min<int64_t>(4, nb - chunk * 4);
  return chunk * 128 + (odd ? chunk_blocks * 16 : 0) + in_chunk * 16 + j;
}

void Int4RowsScalar(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  const int64_t K = w.cols, nb = K / 32, ng = K / w.params.group, gpb = w.params.group / 32;
  const uint8_t* codes = w.data.data_as<uint8_t>();
  const uint16_t* wscales = w.scales.data_as<uint16_t>();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wrow = codes + n * (K / 2);
    for (int64_t t = 0; t < x.rows; ++t) {
      const int8_t* xc = x.codes.data() + t * K;
      float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int64_t j = 0; j < 16; ++j) {
          const uint8_t byte = wrow[b * 16 + j];
          isum += ((byte & 0xF) - 8) * xc[CodeIndex(nb, b, j, false)];
          isum += ((byte >> 4) - 8) * xc[CodeIndex(nb, b, j, true)];
        }
        const float d = x.scales[t * nb + b] * Bf16ToF32(wscales[n * ng + b / gpb]);
        lanes[b % 8] = std::fma(static_cast<float>(isum), d, lanes[b % 8]);
      }
      out[t * ldo + n] = CombineLanes(lanes);
    }
  }
}

}  // namespace

#if LLMRT_INT8_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define LLMRT_INT8_NS int8_avx2
#define LLMRT_INT8_PATH 0
#include "src/backend/cpu/int8_dot_x86-inl.h"
#undef LLMRT_INT8_NS
#undef LLMRT_INT8_PATH
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avxvnni")
#define LLMRT_INT8_NS int8_avxvnni
#define LLMRT_INT8_PATH 1
#include "src/backend/cpu/int8_dot_x86-inl.h"
#undef LLMRT_INT8_NS
#undef LLMRT_INT8_PATH
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
#define LLMRT_INT8_NS int8_avx512vnni
#define LLMRT_INT8_PATH 2
#include "src/backend/cpu/int8_dot_x86-inl.h"
#undef LLMRT_INT8_NS
#undef LLMRT_INT8_PATH
#pragma GCC pop_options
#endif  // LLMRT_INT8_X86

namespace {

// Rounds row xr (k columns) into codes cr, scales sr and sums ur; the reference for every path.
void QuantizeRowScalar(const float* xr, int64_t k, int8_t* cr, float* sr, int32_t* ur) {
  const int64_t nb = k / Int8Activations::kBlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = xr + b * 32;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(xb[i]);
      amax = std::max(amax, std::fabs(xb[i]));
    }
    float& scale = sr[b];
    int32_t& sum = ur[b];
    sum = 0;
    if (!finite || amax == 0.0f) {
      for (int64_t j = 0; j < 16; ++j) cr[CodeIndex(nb, b, j, false)] = cr[CodeIndex(nb, b, j, true)] = 0;
      scale = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    scale = amax / 127.0f;
    // x * 127 / amax in double: no overflow for a subnormal amax, |q| <= 127 by construction;
    // nearbyint rounds to nearest even (the default rounding mode).
    const double inv = 127.0 / static_cast<double>(amax);
    for (int64_t j = 0; j < 32; ++j) {
      const double q = std::nearbyint(static_cast<double>(xb[j]) * inv);
      const int8_t c = static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
      cr[CodeIndex(nb, b, j / 2, j % 2 == 1)] = c;
      sum += c;
    }
  }
}

#if LLMRT_INT8_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
// The same arithmetic as QuantizeRowScalar, four doubles at a time: the product x * (127 /
// amax) in double, rounded to nearest even (vroundpd with the default mode, what nearbyint
// does), clamped, converted exactly to int32, packed to int8 (saturation cannot occur), and
// the 16 even / 16 odd columns gathered with one byte shuffle. Bit-identical codes, scales and
// sums.
void QuantizeRowAvx2(const float* xr, int64_t k, int8_t* cr, float* sr, int32_t* ur) {
  const int64_t nb = k / Int8Activations::kBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256d lo = _mm256_set1_pd(-127.0), hi = _mm256_set1_pd(127.0);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = xr + b * 32;
    __m256 v[4], amax = _mm256_setzero_ps();
    __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      const __m256 a = _mm256_and_ps(v[i], abs_mask);
      finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, big, _CMP_LE_OQ));  // false for NaN and +-inf
      amax = _mm256_max_ps(amax, a);
    }
    const int64_t e0 = CodeIndex(nb, b, 0, false), o0 = CodeIndex(nb, b, 0, true);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float am = _mm_cvtss_f32(m4);
    if (_mm256_movemask_ps(finite) != 0xFF || am == 0.0f) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(cr + e0), _mm_setzero_si128());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(cr + o0), _mm_setzero_si128());
      sr[b] = _mm256_movemask_ps(finite) == 0xFF ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      ur[b] = 0;
      continue;
    }
    sr[b] = am / 127.0f;
    const __m256d inv = _mm256_set1_pd(127.0 / static_cast<double>(am));
    __m128i q[8];
    __m128i sum = _mm_setzero_si128();
    for (int i = 0; i < 8; ++i) {
      const __m128 f = i % 2 == 0 ? _mm256_castps256_ps128(v[i / 2]) : _mm256_extractf128_ps(v[i / 2], 1);
      __m256d d = _mm256_round_pd(_mm256_mul_pd(_mm256_cvtps_pd(f), inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      d = _mm256_min_pd(_mm256_max_pd(d, lo), hi);
      q[i] = _mm256_cvtpd_epi32(d);
      sum = _mm_add_epi32(sum, q[i]);
    }
    // Columns 0-15 and 16-31 as bytes, each shuffled to [8 even | 8 odd].
    const __m128i a = _mm_shuffle_epi8(_mm_packs_epi16(_mm_packs_epi32(q[0], q[1]), _mm_packs_epi32(q[2], q[3])), even_odd);
    const __m128i c = _mm_shuffle_epi8(_mm_packs_epi16(_mm_packs_epi32(q[4], q[5]), _mm_packs_epi32(q[6], q[7])), even_odd);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(cr + e0), _mm_unpacklo_epi64(a, c));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(cr + o0), _mm_unpackhi_epi64(a, c));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
    ur[b] = _mm_cvtsi128_si32(sum);
  }
}
#pragma GCC pop_options
#endif  // LLMRT_INT8_X86

}  // namespace

void QuantizeActivationsInt8(Int8Isa isa, const float* x, int64_t ldx, int64_t t, int64_t k, Int8Activations* out) {
  LLMRT_CHECK(k % Int8Activations::kBlock == 0 && t >= 0 && Int8IsaAvailable(isa));
  const int64_t nb = k / Int8Activations::kBlock;
  out->rows = t;
  out->cols = k;
  out->codes.resize(static_cast<size_t>(t * k));
  out->scales.resize(static_cast<size_t>(t * nb));
  out->sums.resize(static_cast<size_t>(t * nb));
  for (int64_t r = 0; r < t; ++r) {
    int8_t* cr = out->codes.data() + r * k;
    float* sr = out->scales.data() + r * nb;
    int32_t* ur = out->sums.data() + r * nb;
#if LLMRT_INT8_X86
    // Every x86 path of the dot has AVX2.
    if (isa != Int8Isa::kScalar) {
      QuantizeRowAvx2(x + r * ldx, k, cr, sr, ur);
      continue;
    }
#endif
    QuantizeRowScalar(x + r * ldx, k, cr, sr, ur);
  }
}

void QuantizeActivationsInt8(const float* x, int64_t ldx, int64_t t, int64_t k, Int8Activations* out) {
  QuantizeActivationsInt8(BestInt8Isa(), x, ldx, t, k, out);
}

const char* Int8IsaName(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kScalar: return "scalar";
    case Int8Isa::kAvx2: return "avx2";
    case Int8Isa::kAvxVnni: return "avx-vnni";
    case Int8Isa::kAvx512Vnni: return "avx512-vnni";
  }
  return "unknown";
}

bool Int8IsaAvailable(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kScalar: return true;
#if LLMRT_INT8_X86
    case Int8Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Int8Isa::kAvxVnni:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avxvnni");
    case Int8Isa::kAvx512Vnni:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
#else
    default: return false;
#endif
  }
  return false;
}

Int8Isa BestInt8Isa() {
  static const Int8Isa best = [] {
    for (Int8Isa isa : {Int8Isa::kAvx512Vnni, Int8Isa::kAvxVnni, Int8Isa::kAvx2}) {
      if (Int8IsaAvailable(isa)) return isa;
    }
    return Int8Isa::kScalar;
  }();
  return best;
}

bool Int4SupportsInt8(const Weight& w) {
  return w.format == kWeightInt4Group && w.params.group > 0 && w.params.group % 32 == 0 && w.cols % w.params.group == 0;
}

void Int4RowsInt8(Int8Isa isa, const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0,
                  int64_t n1) {
  LLMRT_CHECK(Int4SupportsInt8(w) && x.cols == w.cols && Int8IsaAvailable(isa));
  switch (isa) {
#if LLMRT_INT8_X86
    case Int8Isa::kAvx2: return int8_avx2::Int4Rows(w, x, out, ldo, n0, n1);
    case Int8Isa::kAvxVnni: return int8_avxvnni::Int4Rows(w, x, out, ldo, n0, n1);
    case Int8Isa::kAvx512Vnni: return int8_avx512vnni::Int4Rows(w, x, out, ldo, n0, n1);
#endif
    default: return Int4RowsScalar(w, x, out, ldo, n0, n1);
  }
}

void Int4RowsInt8Best(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1) {
  Int4RowsInt8(BestInt8Isa(), w, x, out, ldo, n0, n1);
}

const MatMulKernel* FindInt8MatMulKernel(const Weight& w) {
  const MatMulKernel* k = FindMatMulKernel(w.format);
  return k != nullptr && k->rows_int8 != nullptr && k->accepts_int8 != nullptr && k->accepts_int8(w) ? k : nullptr;
}

}  // namespace llmrt::cpu
