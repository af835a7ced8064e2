// The exact policy on AMX tiles (src/backend/cpu/bf16_dot.h, SplitActivationsBf16x3): float32
// activations split into three bf16 parts whose sum is the value exactly, the tiles' pair layout,
// matmuls within the float32 dot-product bound of the unrounded activations, rows that do not
// depend on the batch or the thread split, infinities kept, and the CPU backend's choice of the
// path (every exact BF16-weight matmul where the tiles exist, the FMA kernels where turned off).
// The split and the packing are tested on every CPU; the matmuls where the CPU has AMX-BF16.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/bf16_dot.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"
#include "tests/backend/harness.h"

namespace llmrt::cpu {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

bool Tiles() { return Bf16IsaAvailable(Bf16Isa::kAmx); }

std::vector<float> Normal(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  return conformance::RandomNormal(static_cast<size_t>(n), rng, scale);
}

std::vector<uint16_t> NormalBf16(int64_t n, std::mt19937& rng) { return conformance::ToBf16Bits(Normal(n, rng)); }

// out[t * rows + n] = the tiles' exact-policy matmul of rows [n0, n1). One split buffer serves
// every call, as the backend's does, so batch sizes that shrink and grow reuse what is left.
void TilesMatMul(const std::vector<uint16_t>& w, int64_t K, const float* x, int64_t T, int64_t rows, float* out,
                 int64_t n0, int64_t n1) {
  static Bf16Activations xs;
  SplitActivationsBf16x3(x, K, T, K, &xs);
  Bf16MatMulRows(Bf16Isa::kAmx, Bf16Loop::kAuto, w.data(), K, xs, out, rows, n0, n1);
}

// Any float32 bit pattern, across every exponent (normal, denormal, zero, infinity, NaN).
TEST(ExactTiles, PartsSumToEachValueExactly) {
  std::mt19937 rng(71);
  int checked = 0;
  for (int64_t K = 1; K <= 70; ++K) {
    const int64_t T = 3;
    std::vector<float> x(static_cast<size_t>(T * K));
    for (auto& v : x) v = FromBits(static_cast<uint32_t>(rng()));
    x[0] = std::numeric_limits<float>::infinity();
    if (K > 1) x[1] = -std::numeric_limits<float>::infinity();
    if (K > 2) x[2] = FromBits(0x7F800001u);  // a NaN whose payload is below the top 16 bits
    if (K > 3) x[3] = -0.0f;
    if (K > 4) x[4] = std::numeric_limits<float>::max();
    Bf16Activations xs;
    SplitActivationsBf16x3(x.data(), K, T, K, &xs);
    ASSERT_EQ(xs.parts, 3);
    ASSERT_EQ(xs.rows, 3 * T);
    ASSERT_EQ(xs.padded, (K + 31) / 32 * 32);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < xs.padded; ++k) {
        const uint16_t hi = xs.values[(3 * t) * xs.padded + k], mid = xs.values[(3 * t + 1) * xs.padded + k],
                       lo = xs.values[(3 * t + 2) * xs.padded + k];
        if (k >= K) {
          ASSERT_TRUE(hi == 0 && mid == 0 && lo == 0) << "padding, K=" << K << " k=" << k;
          continue;
        }
        const float a = x[t * K + k];
        if (std::isnan(a)) {
          ASSERT_TRUE(std::isnan(Bf16ToF32(hi))) << std::hex << Bits(a);
          ASSERT_TRUE(mid == 0 && lo == 0);
        } else if (std::isinf(a)) {
          ASSERT_EQ(Bf16ToF32(hi), a);
          ASSERT_TRUE(mid == 0 && lo == 0);
        } else {
          // Exactly, in float64 (the parts' exponents differ by at least 8, so no rounding).
          const double sum = static_cast<double>(Bf16ToF32(hi)) + Bf16ToF32(mid) + Bf16ToF32(lo);
          if (std::fabs(a) >= 0x1p-100f) {
            ASSERT_EQ(sum, static_cast<double>(a)) << "K=" << K << " a=" << a << " (0x" << std::hex << Bits(a) << ")";
            ++checked;
          } else {
            // Float32 denormals and the values just above them: the parts below 2^-133 drop.
            ASSERT_LE(std::fabs(sum - a), 0x1p-133) << "a=" << a;
          }
        }
      }
    }
    // The tiles' layout of the same rows.
    if (Tiles()) {
      CacheLineVector<uint16_t> pairs;
      PackBf16Pairs(xs.values.data(), xs.rows, xs.padded, &pairs);
      ASSERT_EQ(pairs.size(), xs.pairs.size());
      ASSERT_EQ(std::memcmp(pairs.data(), xs.pairs.data(), pairs.size() * 2), 0);
    } else {
      EXPECT_TRUE(xs.pairs.empty());
    }
  }
  EXPECT_GT(checked, 1000);
}

// The tiles' layout: per group of 16 rows, per pair of columns (2j, 2j + 1), the 16 rows' pairs,
// rows past the last zero; row counts around the groups' edges (groups of at most four rows, as
// decode's one token in three parts, take their own packer), widths of one to three blocks.
TEST(ExactTiles, PairPackingIsTheTilesLayout) {
  std::mt19937 rng(72);
  for (int64_t rows : {1, 2, 3, 4, 5, 15, 16, 17, 19, 20, 21, 33, 48, 50}) {
    for (int64_t padded : {32, 64, 96}) {
      std::vector<uint16_t> v(static_cast<size_t>(rows * padded));
      for (auto& x : v) x = static_cast<uint16_t>(rng());
      CacheLineVector<uint16_t> pairs;
      // Stale contents (a reused buffer's, as the split's) must not survive, padding rows included.
      pairs.assign(static_cast<size_t>((rows + 15) / 16 * padded * 16 + 7), uint16_t{0xFFFF});
      PackBf16Pairs(v.data(), rows, padded, &pairs);
      const int64_t groups = (rows + 15) / 16, half = padded / 2;
      ASSERT_EQ(static_cast<int64_t>(pairs.size()), groups * half * 32);
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t j = 0; j < half; ++j) {
          for (int64_t r = 0; r < 16; ++r) {
            const int64_t t = 16 * g + r;
            for (int64_t e = 0; e < 2; ++e) {
              const uint16_t want = t < rows ? v[t * padded + 2 * j + e] : uint16_t{0};
              ASSERT_EQ(pairs[(g * half + j) * 32 + 2 * r + e], want)
                  << "rows " << rows << " padded " << padded << " g " << g << " j " << j << " r " << r;
            }
          }
        }
      }
    }
  }
}

// The split over a pool: chunks of 16 tokens in any order and on any threads give the serial
// split's parts and pairs bit for bit (token counts around the chunk and group edges, a buffer
// reused from a larger call).
TEST(ExactTiles, ParallelSplitIsTheSerialSplit) {
  std::mt19937 rng(73);
  const int64_t K = 200;  // not a whole number of blocks: padded columns too
  Bf16Activations serial, par;
  SplitActivationsBf16x3(Normal(120 * K, rng).data(), K, 120, K, &par);  // leftovers from a larger call
  // Chunks one at a time, last first, each on a thread of its own.
  const ParallelRunner runner = [](size_t n, const std::function<void(size_t, size_t)>& body) {
    for (size_t c = n; c-- > 0;) std::thread([&] { body(c, c + 1); }).join();
  };
  for (int64_t T : {17, 32, 33, 48, 100}) {
    const std::vector<float> x = Normal(T * K, rng);
    SplitActivationsBf16x3(x.data(), K, T, K, &serial);
    SplitActivationsBf16x3(x.data(), K, T, K, &par, &runner);
    const size_t nv = static_cast<size_t>(3 * T * serial.padded);
    ASSERT_EQ(par.rows, serial.rows);
    ASSERT_EQ(std::memcmp(par.values.data(), serial.values.data(), nv * 2), 0) << "T=" << T;
    if (Tiles()) {
      const size_t np = static_cast<size_t>((3 * T + 15) / 16 * serial.padded * 16);
      ASSERT_EQ(std::memcmp(par.pairs.data(), serial.pairs.data(), np * 2), 0) << "T=" << T;
    }
  }
}

// Against float64 sums of the unrounded activations: the products of the parts are exact and the
// tiles sum them in float32, so |result - exact| <= (K + 8) * 2^-24 * sum |x_k w_k| (a float32
// sum's first-order bound, with room for the parts' three sums and the two adds joining them).
// That bound is a worst case; the typical error of a float32 dot product is ~sqrt(K) units of
// 2^-24, while rounding the activations to bf16 (the BF16 policy) errs by ~2^-9 relative per
// value: the mean relative error must sit far below that (2^-16), which it could not if a part
// were lost.
TEST(ExactTiles, MatMulIsTheFloat32DotOfTheUnroundedActivations) {
  if (!Tiles()) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU (or not granted by the OS)";
  std::mt19937 rng(73);
  for (int64_t K : {33, 256, 1000, 7168}) {
    const int64_t rows = 37, T = 10;
    const std::vector<uint16_t> w = NormalBf16(rows * K, rng);
    const std::vector<float> x = Normal(T * K, rng, 3.0f);
    std::vector<float> got(static_cast<size_t>(T * rows));
    TilesMatMul(w, K, x.data(), T, rows, got.data(), 0, rows);
    double rel_sum = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < rows; ++n) {
        double exact = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(x[t * K + k]) * Bf16ToF32(w[n * K + k]);
          exact += p;
          mag += std::fabs(p);
        }
        const double err = std::fabs(got[t * rows + n] - exact);
        EXPECT_LE(err, (K + 8) * 0x1p-24 * mag) << "K=" << K << " t=" << t << " n=" << n;
        rel_sum += err / mag;
      }
    }
    EXPECT_LT(rel_sum / (T * rows), 0x1p-16) << "K=" << K;
  }
}

// A row's result is the same bits alone, in a batch, in three, and whatever the split of the
// weight rows (the thread pool's chunks); rows and K past whole tiles and blocks.
TEST(ExactTiles, RowsAloneEqualRowsInABatch) {
  if (!Tiles()) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU (or not granted by the OS)";
  std::mt19937 rng(74);
  const int64_t K = 7 * 64 + 5, rows = 37, T = 65;
  const std::vector<uint16_t> w = NormalBf16(rows * K, rng);
  const std::vector<float> x = Normal(T * K, rng);
  std::vector<float> batch(static_cast<size_t>(T * rows)), split(batch.size());
  TilesMatMul(w, K, x.data(), T, rows, batch.data(), 0, rows);
  TilesMatMul(w, K, x.data(), T, rows, split.data(), 0, 13);
  TilesMatMul(w, K, x.data(), T, rows, split.data(), 13, 30);
  TilesMatMul(w, K, x.data(), T, rows, split.data(), 30, rows);
  ASSERT_EQ(std::memcmp(split.data(), batch.data(), batch.size() * sizeof(float)), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> one(static_cast<size_t>(rows));
    TilesMatMul(w, K, x.data() + t * K, 1, rows, one.data(), 0, rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "row " << t;
    if (t + 3 <= T) {
      std::vector<float> three(static_cast<size_t>(3 * rows));
      TilesMatMul(w, K, x.data() + t * K, 3, rows, three.data(), 0, rows);
      ASSERT_EQ(std::memcmp(three.data(), batch.data() + t * rows, 3 * rows * sizeof(float)), 0) << "rows " << t;
    }
  }
}

// An infinite activation gives an infinite result (hi carries it, the other parts are zero, so
// no infinity - infinity); a NaN gives NaN.
TEST(ExactTiles, InfinitiesAndNaNPropagate) {
  if (!Tiles()) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU (or not granted by the OS)";
  const int64_t K = 64, rows = 3, T = 3;
  std::vector<uint16_t> w(static_cast<size_t>(rows * K), F32ToBf16(0.5f));
  std::vector<float> x(static_cast<size_t>(T * K), 1.25f);
  x[5] = std::numeric_limits<float>::infinity();
  x[K + 7] = -std::numeric_limits<float>::infinity();
  x[2 * K + 9] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(static_cast<size_t>(T * rows));
  TilesMatMul(w, K, x.data(), T, rows, out.data(), 0, rows);
  for (int64_t n = 0; n < rows; ++n) {
    EXPECT_EQ(out[n], std::numeric_limits<float>::infinity());
    EXPECT_EQ(out[rows + n], -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(out[2 * rows + n]));
  }
}

// Through the backend under the exact policy: a BF16 weight's matmuls (parallel, serial, and the
// router's MatMulRawExact) are the tiles' results where the CPU has them, the FMA kernels'
// (MatMulRows) elsewhere or with exact_on_tiles off; F32 weights always the FMA kernels'.
TEST(ExactTiles, BackendTakesTheTilesForBf16WeightsUnderExact) {
  std::mt19937 rng(75);
  const int64_t rows = 300, cols = 520, T = 9;
  BackendOptions on, off;
  on.num_threads = off.num_threads = 2;
  off.exact_on_tiles = false;
  CpuBackend tiles(on), fma(off);
  const conformance::HostMatrix host = conformance::MakeHostMatrix(kWeightBf16, rows, cols, WeightParams{}, rng);
  const Weight wt = *tiles.PrepareWeight(host.stored), wf = *fma.PrepareWeight(host.stored);
  const std::vector<uint16_t> codes(reinterpret_cast<const uint16_t*>(host.stored.codes.data),
                                    reinterpret_cast<const uint16_t*>(host.stored.codes.data) + rows * cols);
  const std::vector<float> x = Normal(T * cols, rng);
  std::vector<float> kernel(static_cast<size_t>(T * rows)), fma_ref(kernel.size());
  MatMulRows(DType::kBF16, codes.data(), cols, x.data(), cols, T, fma_ref.data(), rows, 0, rows);
  if (Tiles()) {
    TilesMatMul(codes, cols, x.data(), T, rows, kernel.data(), 0, rows);
    EXPECT_NE(std::memcmp(kernel.data(), fma_ref.data(), kernel.size() * sizeof(float)), 0)
        << "the tiles and the FMA kernels should sum in different orders";
  } else {
    kernel = fma_ref;
  }
  std::vector<float> got(kernel.size());
  tiles.MatMulRaw(x.data(), cols, T, wt, got.data(), rows);
  EXPECT_EQ(std::memcmp(got.data(), kernel.data(), got.size() * sizeof(float)), 0);
  tiles.MatMulRowsSerial(x.data(), cols, T, wt, got.data(), rows);
  EXPECT_EQ(std::memcmp(got.data(), kernel.data(), got.size() * sizeof(float)), 0);
  tiles.MatMulRawExact(x.data(), cols, T, wt, got.data(), rows);
  EXPECT_EQ(std::memcmp(got.data(), kernel.data(), got.size() * sizeof(float)), 0);
  fma.MatMulRaw(x.data(), cols, T, wf, got.data(), rows);
  EXPECT_EQ(std::memcmp(got.data(), fma_ref.data(), got.size() * sizeof(float)), 0);
  // F32 weights: the FMA kernels either way.
  const conformance::HostMatrix f32 = conformance::MakeHostMatrix(kWeightF32, 40, cols, WeightParams{}, rng);
  const Weight ft = *tiles.PrepareWeight(f32.stored), ff = *fma.PrepareWeight(f32.stored);
  std::vector<float> a(static_cast<size_t>(T * 40)), b(a.size());
  tiles.MatMulRaw(x.data(), cols, T, ft, a.data(), 40);
  fma.MatMulRaw(x.data(), cols, T, ff, b.data(), 40);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace llmrt::cpu
