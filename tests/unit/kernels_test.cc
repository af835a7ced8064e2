// Every SIMD kernel against its scalar reference, over sizes 0..2N+ and misaligned starts.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"

namespace llmrt::cpu {
namespace {

std::vector<float> RandomVec(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Tolerance: float32 sums of K products of unit normals in a different order differ by about
// K * 2^-24 * sum|a_i b_i|; we allow 1e-5 relative to that magnitude.
float Tol(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(a[i] * b[i]);
  return static_cast<float>(1e-5 * (s + 1.0));
}

TEST(Kernels, MatMulRowsMatchesScalarForAllShapes) {
  std::mt19937 rng(7);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t K : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100}) {
      for (int64_t N : {1, 3, 4, 5, 9}) {
        for (int64_t T : {1, 2, 3, 5}) {
          for (int64_t misalign : {0, 1}) {
            std::vector<float> wf = RandomVec(static_cast<size_t>(N * K + misalign), rng);
            std::vector<uint16_t> wb(wf.size());
            for (size_t i = 0; i < wf.size(); ++i) {
              wb[i] = F32ToBf16(wf[i]);
              wf[i] = Bf16ToF32(wb[i]);
            }
            const void* w = dt == DType::kBF16 ? static_cast<const void*>(wb.data() + misalign)
                                               : static_cast<const void*>(wf.data() + misalign);
            const int64_t ldx = K + 3;
            std::vector<float> x = RandomVec(static_cast<size_t>(T * ldx + 1), rng);
            std::vector<float> got(static_cast<size_t>(T * N), -1.0f), want(got.size(), -2.0f);
            MatMulRows(dt, w, K, x.data() + misalign, ldx, T, got.data(), N, 0, N);
            MatMulRowsScalar(dt, w, K, x.data() + misalign, ldx, T, want.data(), N, 0, N);
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t n = 0; n < N; ++n) {
                const float tol = Tol(wf.data() + misalign + n * K, x.data() + misalign + t * ldx, K);
                ASSERT_NEAR(got[t * N + n], want[t * N + n], tol)
                    << DTypeName(dt) << " K=" << K << " N=" << N << " T=" << T << " mis=" << misalign;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, MatMulRowsWritesOnlyItsRange) {
  std::mt19937 rng(3);
  const int64_t K = 40, N = 12;
  std::vector<float> w = RandomVec(N * K, rng), x = RandomVec(K, rng), out(N, 123.0f);
  MatMulRows(DType::kF32, w.data(), K, x.data(), K, 1, out.data(), N, 5, 9);
  for (int64_t n = 0; n < N; ++n) {
    if (n < 5 || n >= 9) EXPECT_EQ(out[n], 123.0f);
    else EXPECT_NE(out[n], 123.0f);
  }
}

TEST(Kernels, DotAndAxpyMatchScalar) {
  std::mt19937 rng(11);
  for (int64_t n = 0; n <= 70; ++n) {
    for (int64_t mis = 0; mis < 3; ++mis) {
      std::vector<float> a = RandomVec(n + mis, rng), bf = RandomVec(n + mis, rng);
      std::vector<uint16_t> bb(bf.size());
      for (size_t i = 0; i < bf.size(); ++i) {
        bb[i] = F32ToBf16(bf[i]);
        bf[i] = Bf16ToF32(bb[i]);
      }
      const float tol = Tol(a.data() + mis, bf.data() + mis, n);
      EXPECT_NEAR(Dot(a.data() + mis, DType::kF32, bf.data() + mis, n),
                  DotScalar(a.data() + mis, DType::kF32, bf.data() + mis, n), tol);
      EXPECT_NEAR(Dot(a.data() + mis, DType::kBF16, bb.data() + mis, n),
                  DotScalar(a.data() + mis, DType::kF32, bf.data() + mis, n), tol);
      std::vector<float> y = RandomVec(n + mis, rng), y2 = y;
      Axpy(0.75f, DType::kBF16, bb.data() + mis, y.data() + mis, n);
      for (int64_t i = 0; i < n; ++i) {
        y2[mis + i] += 0.75f * bf[mis + i];
        ASSERT_NEAR(y[mis + i], y2[mis + i], 1e-6f * (1 + std::fabs(y2[mis + i])));
      }
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu
