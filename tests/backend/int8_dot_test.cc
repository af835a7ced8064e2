// The INT8 activation policy's integer-dot kernels (src/backend/cpu/int8_dot.h): every x86 path
// this CPU runs against the scalar reference (bit-identical outputs: the int32 block sums are
// exact and every path forms the float sums in the same order), the scalar reference against
// the math it claims, activation rounding at its edges, and the CPU backend's use of the policy.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/int8_dot.h"
#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"
#include "tests/backend/harness.h"

namespace llmrt::cpu {
namespace {

using conformance::MakeHostMatrix;

std::vector<float> RandomActivations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Int4Case {
  std::unique_ptr<CpuBackend> backend;
  conformance::HostMatrix host;
  Weight w;
};

Int4Case MakeInt4(int64_t rows, int64_t cols, int64_t group, std::mt19937& rng, QuantizedActivations policy) {
  Int4Case c;
  BackendOptions o;
  o.num_threads = 2;
  o.activations = policy;
  c.backend = std::make_unique<CpuBackend>(o);
  WeightParams p;
  p.group = group;
  c.host = MakeHostMatrix(kWeightInt4Group, rows, cols, p, rng);
  c.w = *c.backend->PrepareWeight(c.host.stored);
  return c;
}

std::vector<Int8Isa> AvailableIsas() {
  std::vector<Int8Isa> v;
  for (Int8Isa isa : {Int8Isa::kScalar, Int8Isa::kAvx2, Int8Isa::kAvxVnni, Int8Isa::kAvx512Vnni}) {
    if (Int8IsaAvailable(isa)) v.push_back(isa);
  }
  return v;
}

// Columns 32 .. 544 cover chunks of 1-4 blocks at the end (the pair / single-block / 512-bit
// chunk code) and 1-8 blocks in the last group of eight, 1056 two panel spans of AVX-512's
// batched kernel (32 blocks and 1); rows split in two ranges as the pool splits them (40: a
// panel of 16 rows and 4 more in each); T = 1, 2, 3, 9 and 70 (two token blocks, an odd row).
TEST(Int8Dot, EveryPathIsBitIdenticalToTheScalarReference) {
  std::mt19937 rng(41);
  const std::vector<Int8Isa> isas = AvailableIsas();
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  // The machines this runs on (CI included) have AVX2; the VNNI paths are tested where present.
  EXPECT_GE(isas.size(), 2u) << "no x86 path is available";
#endif
  for (Int8Isa isa : isas) std::printf("int8 path available: %s\n", Int8IsaName(isa));
  for (int64_t group : {32, 128}) {
    for (int64_t cols : {32, 64, 96, 128, 160, 224, 256, 288, 384, 416, 512, 544, 1056}) {
      if (cols % group != 0) continue;
      for (int64_t rows : {1, 5, 17, 40}) {
        Int4Case c = MakeInt4(rows, cols, group, rng, QuantizedActivations::kExact);
        for (int64_t T : {1, 2, 3, 9, 70}) {
          std::vector<float> x = RandomActivations(T * cols, rng);
          Int8Activations xq;
          QuantizeActivationsInt8(x.data(), cols, T, cols, &xq);
          std::vector<float> want(static_cast<size_t>(T * rows));
          Int4RowsInt8(Int8Isa::kScalar, c.w, xq, want.data(), rows, 0, rows);
          for (Int8Isa isa : isas) {
            std::vector<float> got(want.size(), -1.0f);
            Int4RowsInt8(isa, c.w, xq, got.data(), rows, 0, rows / 2);
            Int4RowsInt8(isa, c.w, xq, got.data(), rows, rows / 2, rows);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                << Int8IsaName(isa) << " g" << group << " " << rows << "x" << cols << " T=" << T;
          }
        }
      }
    }
  }
}

// The scalar reference is the exact integer dot scaled per block: compare with double sums of
// (dequantized int8 activation) x (dequantized INT4 weight), and bound the distance to the exact
// float32 product by the activation rounding: |x_k - code_k * scale_b| <= scale_b / 2.
TEST(Int8Dot, ScalarReferenceComputesTheRoundedProduct) {
  std::mt19937 rng(42);
  for (auto [rows, cols, group] : std::vector<std::array<int64_t, 3>>{{7, 256, 32}, {9, 384, 128}, {3, 96, 32}}) {
    Int4Case c = MakeInt4(rows, cols, group, rng, QuantizedActivations::kExact);
    const int64_t T = 3, nb = cols / 32;
    std::vector<float> x = RandomActivations(T * cols, rng);
    x[5] = 0.0f;  // zeros, and a whole zero block in row 1
    for (int64_t k = 32; k < 64; ++k) x[cols + k] = 0.0f;
    Int8Activations xq;
    QuantizeActivationsInt8(x.data(), cols, T, cols, &xq);
    std::vector<float> got(static_cast<size_t>(T * rows));
    Int4RowsInt8(Int8Isa::kScalar, c.w, xq, got.data(), rows, 0, rows);
    // Recover each activation's code from its value: codes are round(x * 127 / max|x|).
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < rows; ++n) {
        double want = 0, bound = 0, mag = 0;
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t b = k / 32;
          double amax = 0;
          for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[t * cols + b * 32 + i])));
          const double code = amax == 0 ? 0 : std::nearbyint(x[t * cols + k] * 127.0 / amax);
          const double scale = xq.scales[t * nb + b];
          const double wk = c.host.dense[n * cols + k];
          want += code * scale * wk;
          mag += std::fabs(code * scale * wk);
          bound += std::fabs(wk) * scale / 2;
        }
        const float g = got[t * rows + n];
        EXPECT_NEAR(g, want, (cols + 8) * 6e-8 * mag + 1e-6) << "t=" << t << " n=" << n;
        double exact = 0;
        for (int64_t k = 0; k < cols; ++k) exact += static_cast<double>(c.host.dense[n * cols + k]) * x[t * cols + k];
        EXPECT_LE(std::fabs(g - exact), bound * 1.001 + 1e-5) << "t=" << t << " n=" << n;
      }
    }
  }
}

TEST(Int8Dot, ActivationRoundingEdges) {
  const int64_t K = 128;  // blocks: zeros; +-max; halves; tiny
  std::vector<float> x(K, 0.0f);
  for (int64_t i = 0; i < 32; ++i) x[32 + i] = (i % 2 ? -1.0f : 1.0f) * 3e38f;  // the largest magnitudes
  x[64] = 127.0f;  // scale 1: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2 (nearest even), 0.49 -> 0
  x[65] = 2.5f;
  x[66] = 3.5f;
  x[67] = -2.5f;
  x[68] = 0.49f;
  x[69] = -127.0f;
  x[96] = 0x1p-140f;  // subnormal: codes still use the full range
  x[97] = -0x1p-141f;
  Int8Activations q;
  QuantizeActivationsInt8(x.data(), K, 1, K, &q);
  auto code = [&](int64_t col) {
    const int64_t b = col / 32, j = (col % 32) / 2, odd = col % 2;
    return q.codes[(b / 4) * 128 + (odd ? 4 * 16 : 0) + (b % 4) * 16 + j];
  };
  EXPECT_EQ(q.scales[0], 0.0f);
  EXPECT_EQ(q.sums[0], 0);
  for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(code(k), 0);
  EXPECT_EQ(q.scales[1], 3e38f / 127.0f);
  for (int64_t k = 32; k < 64; ++k) EXPECT_EQ(code(k), k % 2 ? -127 : 127) << k;
  EXPECT_EQ(q.sums[1], 0);
  EXPECT_EQ(q.scales[2], 1.0f);
  EXPECT_EQ(code(64), 127);
  EXPECT_EQ(code(65), 2);
  EXPECT_EQ(code(66), 4);
  EXPECT_EQ(code(67), -2);
  EXPECT_EQ(code(68), 0);
  EXPECT_EQ(code(69), -127);
  EXPECT_EQ(q.sums[2], 127 + 2 + 4 - 2 - 127);
  EXPECT_GT(q.scales[3], 0.0f);
  EXPECT_EQ(code(96), 127);
  EXPECT_EQ(code(97), -64);  // -63.5 -> -64 (nearest even)

  // A non-finite activation makes its block's scale NaN (zero codes): it reaches the output.
  x[100] = std::numeric_limits<float>::infinity();
  QuantizeActivationsInt8(x.data(), K, 1, K, &q);
  EXPECT_TRUE(std::isnan(q.scales[3]));
  for (int64_t k = 96; k < 128; ++k) EXPECT_EQ(code(k), 0);
  std::mt19937 rng(43);
  Int4Case c = MakeInt4(2, K, 32, rng, QuantizedActivations::kExact);
  for (Int8Isa isa : AvailableIsas()) {
    float out[2] = {0, 0};
    Int4RowsInt8(isa, c.w, q, out, 2, 0, 2);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1])) << Int8IsaName(isa);
  }
}

// The vector rounding (AVX2, shared by every x86 path) gives the scalar loop's codes, scales and
// sums bit for bit: random blocks at magnitudes from subnormal to near the float maximum, ties
// (x * 127 / max|x| exactly halfway), zeros, negative zeros and non-finite values.
TEST(Int8Dot, ActivationRoundingIsBitIdenticalOnEveryPath) {
  std::mt19937 rng(45);
  const int64_t K = 4096, nb = K / 32, T = 6;
  std::vector<float> x(static_cast<size_t>(T * K));
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t b = 0; b < T * nb; ++b) {
    float* xb = x.data() + b * 32;
    const int exp = static_cast<int>(rng() % 270) - 145;  // block magnitudes 2^-145 .. 2^124
    for (int64_t i = 0; i < 32; ++i) xb[i] = std::ldexp(d(rng), exp);
    switch (b % 16) {
      case 1:  // ties: max 127, halves in between
        for (int64_t i = 0; i < 32; ++i) xb[i] = static_cast<float>(static_cast<int>(rng() % 255) - 127) + 0.5f;
        xb[3] = 127.0f;
        break;
      case 2: std::fill(xb, xb + 32, 0.0f); break;
      case 3: std::fill(xb, xb + 32, -0.0f); break;
      case 4: xb[rng() % 32] = std::numeric_limits<float>::infinity(); break;
      case 5: xb[rng() % 32] = -std::numeric_limits<float>::infinity(); break;
      case 6: xb[rng() % 32] = std::numeric_limits<float>::quiet_NaN(); break;
      case 7: xb[rng() % 32] = std::numeric_limits<float>::max(); break;
      case 8: xb[rng() % 32] = std::numeric_limits<float>::denorm_min(); break;
      default: break;
    }
  }
  Int8Activations want;
  QuantizeActivationsInt8(Int8Isa::kScalar, x.data(), K, T, K, &want);
  for (Int8Isa isa : AvailableIsas()) {
    Int8Activations got;
    QuantizeActivationsInt8(isa, x.data(), K, T, K, &got);
    EXPECT_EQ(got.codes, want.codes) << Int8IsaName(isa);
    EXPECT_EQ(got.sums, want.sums) << Int8IsaName(isa);
    ASSERT_EQ(got.scales.size(), want.scales.size());
    EXPECT_EQ(std::memcmp(got.scales.data(), want.scales.data(), want.scales.size() * sizeof(float)), 0)
        << Int8IsaName(isa);
  }
  // The default entry is the best path's.
  Int8Activations best;
  QuantizeActivationsInt8(x.data(), K, T, K, &best);
  EXPECT_EQ(best.codes, want.codes);
}

// Which weights take the integer path: INT4 with groups that are multiples of 32; not FP8,
// dense, or INT4 with a group that splits a 32-column block (those keep the float32 path).
TEST(Int8Dot, OnlyInt4WithWholeBlocksTakesTheIntegerPath) {
  std::mt19937 rng(44);
  for (auto [format, group, expect] : std::vector<std::tuple<WeightFormatId, int64_t, bool>>{
           {kWeightInt4Group, 32, true}, {kWeightInt4Group, 64, true}, {kWeightInt4Group, 128, true},
           {kWeightInt4Group, 16, false}, {kWeightFp8Block, 0, false}, {kWeightBf16, 0, false}, {kWeightF32, 0, false}}) {
    Weight w;
    w.format = format;
    w.rows = 4;
    w.cols = 128;
    w.params.group = group;
    w.params.block_rows = w.params.block_cols = 128;
    EXPECT_EQ(FindInt8MatMulKernel(w) != nullptr, expect) << int{format} << " g" << group;
  }
}

// Through the backend: INT8 MatMul is the kernel's result over the rounded activations, for any
// batch (a token's row does not depend on the others in its batch); EXACT does not round; an FP8
// weight is untouched by the policy.
TEST(Int8Dot, BackendAppliesThePolicyPerToken) {
  std::mt19937 rng(45);
  const int64_t rows = 300, cols = 512, T = 7;
  Int4Case a8 = MakeInt4(rows, cols, 128, rng, QuantizedActivations::kInt8);
  BackendOptions eo;
  eo.num_threads = 2;
  CpuBackend exact(eo);
  const Weight we = *exact.PrepareWeight(a8.host.stored);
  std::vector<float> x = RandomActivations(T * cols, rng);
  std::vector<float> batch(static_cast<size_t>(T * rows)), ref(batch.size()), ex(batch.size());
  a8.backend->MatMulRaw(x.data(), cols, T, a8.w, batch.data(), rows);
  Int8Activations xq;
  QuantizeActivationsInt8(x.data(), cols, T, cols, &xq);
  Int4RowsInt8(Int8Isa::kScalar, a8.w, xq, ref.data(), rows, 0, rows);
  EXPECT_EQ(std::memcmp(batch.data(), ref.data(), ref.size() * sizeof(float)), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> one(static_cast<size_t>(rows));
    a8.backend->MatMulRaw(x.data() + t * cols, cols, 1, a8.w, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "token " << t;
    a8.backend->MatMulRowsSerial(x.data() + t * cols, cols, 1, a8.w, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "serial, token " << t;
  }
  exact.MatMulRaw(x.data(), cols, T, we, ex.data(), rows);
  EXPECT_NE(std::memcmp(ex.data(), batch.data(), ex.size() * sizeof(float)), 0) << "INT8 did not round";

  WeightParams p;
  p.block_rows = p.block_cols = 128;
  const conformance::HostMatrix fp8 = MakeHostMatrix(kWeightFp8Block, 40, 256, p, rng);
  const Weight f8 = *a8.backend->PrepareWeight(fp8.stored), fe = *exact.PrepareWeight(fp8.stored);
  std::vector<float> y8(static_cast<size_t>(3 * 40)), ye(y8.size());
  a8.backend->MatMulRaw(x.data(), 256, 3, f8, y8.data(), 40);
  exact.MatMulRaw(x.data(), 256, 3, fe, ye.data(), 40);
  EXPECT_EQ(std::memcmp(y8.data(), ye.data(), ye.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace llmrt::cpu
