// Every SIMD kernel against its scalar reference, over sizes 0..2N+ and misaligned starts.
#include <array>
#include <cmath>
#include <string>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/kernels.h"
#include "src/quant/fp8.h"
#include "src/quant/weight_quant.h"
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
      // FP8 e4m3 codes (every code but NaN), as FP8 KV rows are read.
      std::vector<uint8_t> b8(bf.size());
      std::vector<float> f8(bf.size());
      for (size_t i = 0; i < b8.size(); ++i) {
        b8[i] = static_cast<uint8_t>(rng() & 0xFF);
        if ((b8[i] & 0x7F) == 0x7F) b8[i] = 0x00;
        f8[i] = Fp8E4M3::ToFloat(b8[i]);
      }
      EXPECT_NEAR(Dot(a.data() + mis, DType::kF8E4M3, b8.data() + mis, n),
                  DotScalar(a.data() + mis, DType::kF32, f8.data() + mis, n), Tol(a.data() + mis, f8.data() + mis, n));
      std::vector<float> z = RandomVec(n + mis, rng), z2 = z;
      Axpy(-1.25f, DType::kF8E4M3, b8.data() + mis, z.data() + mis, n);
      for (int64_t i = 0; i < n; ++i) {
        z2[mis + i] += -1.25f * f8[mis + i];
        ASSERT_NEAR(z[mis + i], z2[mis + i], 1e-6f * (1 + std::fabs(z2[mis + i])));
      }
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu

namespace llmrt::cpu {
namespace {

Tensor HostTensor(void* data, DType dt, std::initializer_list<int64_t> shape) {
  return Tensor(nullptr, data, dt, shape);
}

// out = W x with W dequantized by the scalar reference (DequantizeRow), in double.
std::vector<float> ReferenceMatMul(const Weight& w, const std::vector<float>& x, int64_t T, std::vector<float>* mag) {
  std::vector<float> row(static_cast<size_t>(w.cols)), out(static_cast<size_t>(T * w.rows));
  mag->assign(out.size(), 0.0f);
  for (int64_t n = 0; n < w.rows; ++n) {
    DequantizeRow(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        s += static_cast<double>(row[k]) * x[t * w.cols + k];
        m += std::fabs(static_cast<double>(row[k]) * x[t * w.cols + k]);
      }
      out[t * w.rows + n] = static_cast<float>(s);
      (*mag)[t * w.rows + n] = static_cast<float>(m);
    }
  }
  return out;
}

void CheckQuantMatMul(const Weight& w, std::mt19937& rng, const std::string& what) {
  for (int64_t T : {1, 2, 3, 7}) {
    std::vector<float> x = RandomVec(static_cast<size_t>(T * w.cols), rng);
    std::vector<float> mag;
    const std::vector<float> want = ReferenceMatMul(w, x, T, &mag);
    CacheLineVector<float> scratch;
    std::vector<float> got(want.size(), -1.0f);
    int64_t ld = 0;
    const float* xp = PrepareActivations(w, x.data(), w.cols, T, scratch, &ld);
    // Two row ranges, as the thread pool splits them.
    MatMulWeightRows(w, xp, ld, T, got.data(), w.rows, 0, w.rows / 2);
    MatMulWeightRows(w, xp, ld, T, got.data(), w.rows, w.rows / 2, w.rows);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * (mag[i] + 1.0f)) << what << " T=" << T << " i=" << i;
    }
  }
}

// FP8 block-scaled: blocks of 128x128 (the checkpoints') and 32x32 / 16x48 (several blocks,
// partial last blocks, block edges inside a SIMD vector), every code including subnormals.
TEST(Kernels, Fp8BlockMatMulMatchesDequantizedReference) {
  std::mt19937 rng(11);
  for (auto [rows, cols, br, bc] : std::vector<std::array<int64_t, 4>>{
           {5, 300, 128, 128}, {70, 96, 32, 32}, {33, 100, 16, 48}, {9, 7, 128, 128}}) {
    std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
    for (auto& b : q) {
      b = static_cast<uint8_t>(rng() & 0xFF);
      if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN codes
    }
    const int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
    std::vector<float> s(static_cast<size_t>(nbr * nbc));
    for (auto& v : s) v = std::ldexp(1.0f + (rng() % 100) / 100.0f, -static_cast<int>(rng() % 12));
    Weight w;
    w.format = kWeightFp8Block;
    w.quantized = true;
    w.rows = rows;
    w.cols = cols;
    w.params.block_rows = br;
    w.params.block_cols = bc;
    w.data = HostTensor(q.data(), DType::kF8E4M3, {rows, cols});
    w.scales = HostTensor(s.data(), DType::kF32, {nbr, nbc});
    CheckQuantMatMul(w, rng, "fp8 " + std::to_string(rows) + "x" + std::to_string(cols));
    // The reference itself: code 0x01 is the smallest subnormal 2^-9, 0x38 is 1.0, 0xC0 is -2.
    std::vector<float> row(static_cast<size_t>(cols));
    q[0] = 0x01;
    q[1] = 0x38;
    q[2] = 0xC0;
    DequantizeRow(w, 0, row.data());
    EXPECT_EQ(row[0], std::ldexp(1.0f, -9) * s[0]);
    EXPECT_EQ(row[1], s[0]);
    EXPECT_EQ(row[2], -2.0f * s[0]);
  }
}

// INT4 groups of 32 and 128: the SIMD kernel against the scalar reference, and the packing
// against compressed-tensors' layout (column 8j+i in bits 4i..4i+3 of little-endian int32 j).
TEST(Kernels, Int4GroupMatMulMatchesDequantizedReference) {
  std::mt19937 rng(13);
  for (auto [rows, cols, group] : std::vector<std::array<int64_t, 3>>{{7, 256, 32}, {20, 384, 128}, {3, 32, 32}}) {
    std::vector<float> wf = RandomVec(static_cast<size_t>(rows * cols), rng);
    std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2), 0);
    std::vector<uint16_t> scales(static_cast<size_t>(rows * cols / group));
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeInt4Row(wf.data() + r * cols, cols, group, packed.data() + r * cols / 2, scales.data() + r * cols / group);
    }
    Weight w;
    w.format = kWeightInt4Group;
    w.quantized = true;
    w.rows = rows;
    w.cols = cols;
    w.params.group = group;
    w.data = HostTensor(packed.data(), DType::kU8, {rows, cols / 2});
    w.scales = HostTensor(scales.data(), DType::kBF16, {rows, cols / group});
    CheckQuantMatMul(w, rng, "int4 g" + std::to_string(group));
    // Round to nearest: every dequantized value is within half a step of the original, and the
    // group's largest magnitude maps to +-7 steps.
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(w, r, row.data());
      for (int64_t k = 0; k < cols; ++k) {
        const float step = Bf16ToF32(scales[r * cols / group + k / group]);
        ASSERT_LE(std::fabs(row[k] - wf[r * cols + k]), 0.5f * step * 1.0001f + 1e-6f) << r << "," << k;
      }
    }
    // Column 8j+i lives in bits 4i.. of int32 word j (little-endian bytes).
    const uint32_t* words = reinterpret_cast<const uint32_t*>(packed.data());
    DequantizeRow(w, 0, row.data());
    for (int64_t k = 0; k < cols; ++k) {
      const int code = static_cast<int>((words[k / 8] >> (4 * (k % 8))) & 0xF) - 8;
      EXPECT_EQ(static_cast<float>(code) * Bf16ToF32(scales[k / group]), row[k]) << k;
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu
