// Matrix products over weight formats, SIMD with Highway runtime dispatch.
//
// Decode multiplies a few activation rows by large weight matrices: it is bound by the bytes
// of weights read. The kernel streams each weight row once per group of two activation rows,
// four weight rows at a time (eight independent accumulators), widening bfloat16 to float32 in
// registers (a 16-bit shift), so that bf16 weights cost half the bytes of f32 ones.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backend/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"

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
HWY_INLINE float ScalarW(const float* p) { return *p; }
HWY_INLINE float ScalarW(const uint16_t* p) { return Bf16ToF32(*p); }

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
    for (int64_t t = 0; t < T; t += 2) {
      const bool two = t + 1 < T;
      const float* xa = x + t * ldx;
      const float* xb = two ? xa + ldx : xa;
      auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
      auto b0 = hn::Zero(df), b1 = hn::Zero(df), b2 = hn::Zero(df), b3 = hn::Zero(df);
      for (int64_t k = 0; k < kv; k += N) {
        const auto va = hn::LoadU(df, xa + k);
        const auto vb = hn::LoadU(df, xb + k);
        const auto v0 = LoadW(df, w0 + k);
        const auto v1 = LoadW(df, w1 + k);
        const auto v2 = LoadW(df, w2 + k);
        const auto v3 = LoadW(df, w3 + k);
        a0 = hn::MulAdd(v0, va, a0);
        a1 = hn::MulAdd(v1, va, a1);
        a2 = hn::MulAdd(v2, va, a2);
        a3 = hn::MulAdd(v3, va, a3);
        b0 = hn::MulAdd(v0, vb, b0);
        b1 = hn::MulAdd(v1, vb, b1);
        b2 = hn::MulAdd(v2, vb, b2);
        b3 = hn::MulAdd(v3, vb, b3);
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

void MatMulRowsF32(const void* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out,
                   int64_t ldo, int64_t n0, int64_t n1) {
  MatMulRowsT(static_cast<const float*>(w), K, x, ldx, T, out, ldo, n0, n1);
}
void MatMulRowsBf16(const void* w, int64_t K, const float* x, int64_t ldx, int64_t T, float* out,
                    int64_t ldo, int64_t n0, int64_t n1) {
  MatMulRowsT(static_cast<const uint16_t*>(w), K, x, ldx, T, out, ldo, n0, n1);
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
  return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, n);
}

void Axpy(float alpha, DType xdtype, const void* x, float* y, int64_t n) {
  if (xdtype == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(AxpyBf16)(alpha, x, y, n);
  } else {
    HWY_DYNAMIC_DISPATCH(AxpyF32)(alpha, x, y, n);
  }
}

float DotScalar(const float* a, DType bdtype, const void* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    float bv = bdtype == DType::kBF16 ? Bf16ToF32(static_cast<const uint16_t*>(b)[i])
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
