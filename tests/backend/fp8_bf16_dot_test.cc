// FP8 block-scaled weights under the BF16 activation policy (src/backend/cpu/fp8_bf16_dot.h): the
// code table against the format's values, the AVX-512 path against the scalar emulation bit for
// bit, subnormal / zero / +-448 / NaN codes, row lengths that are not whole 32- or 128-column
// blocks, batch and thread-split invariance on every path (AMX tiles where the CPU has them),
// the distance to a float64 product of the exact weights with the rounded activations, and the
// CPU backend's use of the policy (FP8 weights with 32-column steps, their MoE experts; the
// router and other block shapes stay exact).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/bf16_dot.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/fp8_bf16_dot.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"
#include "tests/backend/harness.h"

namespace llmrt::cpu {
namespace {

using conformance::MakeHostMatrix;

std::vector<Bf16Isa> AvailableIsas() {
  std::vector<Bf16Isa> v;
  for (Bf16Isa isa : {Bf16Isa::kScalar, Bf16Isa::kAvx512Bf16, Bf16Isa::kAmx, Bf16Isa::kAvx2Fma}) {
    if (Fp8Bf16IsaAvailable(isa)) v.push_back(isa);
  }
  return v;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Equal bit for bit, or both NaN.
// The tiles' activation layout wherever the kAmx path can run (the tests run every path).
const bool kTiles = Fp8Bf16IsaAvailable(Bf16Isa::kAmx);

bool SameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || Bits(a) == Bits(b); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An FP8 matrix in host memory and its view.
struct HostFp8 {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  Fp8BlockMatrix m;
};

// Codes drawn from every class: uniform over the 254 non-NaN codes (5% subnormal, 1% zero),
// with extra subnormals, zeros and +-448; `nan` adds NaN codes too. Scales 2^-k (1 + f).
HostFp8 RandomFp8(int64_t rows, int64_t cols, int64_t br, int64_t bc, std::mt19937& rng, bool nan = false) {
  HostFp8 h;
  h.codes.resize(static_cast<size_t>(rows * cols));
  for (auto& q : h.codes) {
    const uint8_t sign = (rng() & 1) ? 0x80 : 0;
    switch (rng() % 10) {
      case 0: q = sign | static_cast<uint8_t>(1 + rng() % 7); break;  // subnormal: m * 2^-9
      case 1: q = sign; break;                                           // +-0
      case 2: q = sign | 0x7E; break;                                    // +-448
      default: {
        uint8_t b = static_cast<uint8_t>(rng());
        if ((b & 0x7F) == Fp8E4M3::kNaN) b &= 0xFE;
        q = b;
      }
    }
    if (nan && rng() % 97 == 0) q = sign | Fp8E4M3::kNaN;
  }
  h.scales.resize(static_cast<size_t>(CeilDiv(rows, br) * CeilDiv(cols, bc)));
  for (auto& s : h.scales) {
    s = std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128.0f, -static_cast<int>(rng() % 9) - 4);
  }
  h.m.codes = h.codes.data();
  h.m.scales = h.scales.data();
  h.m.rows = rows;
  h.m.cols = cols;
  h.m.block_rows = br;
  h.m.block_cols = bc;
  return h;
}

std::vector<float> RandomRows(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

float WeightValue(const HostFp8& h, int64_t n, int64_t k) {
  const Fp8BlockMatrix& m = h.m;
  return Fp8E4M3::ToFloat(h.codes[n * m.cols + k]) *
         h.scales[(n / m.block_rows) * CeilDiv(m.cols, m.block_cols) + k / m.block_cols];
}

// Every code is its own value as a bf16, and never a bf16 denormal (which the dot-product
// instructions read as zero).
TEST(Fp8Bf16Dot, CodesBecomeTheirExactValuesAsNormalBf16) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const uint16_t b = Fp8ToBf16Bits(code);
    const float want = Fp8E4M3::ToFloat(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(b))) << "code " << c;
      continue;
    }
    EXPECT_EQ(Bits(Bf16ToF32(b)), Bits(want)) << "code " << c;
    EXPECT_TRUE((b & 0x7F80) != 0 || (b & 0x7F) == 0) << "code " << c << " is a bf16 denormal";
  }
  EXPECT_EQ(Fp8ToBf16Bits(0x01), 0x3B00);  // 2^-9, the smallest subnormal code
  EXPECT_EQ(Fp8ToBf16Bits(0x7E), 0x43E0);  // 448
  EXPECT_EQ(Fp8ToBf16Bits(0xFE), 0xC3E0);  // -448
  EXPECT_EQ(Fp8ToBf16Bits(0x80), 0x8000);  // -0
}

// The activations: each row rounded as torch's cast (F32ToBf16) and stored in the kernels' chunk
// order, zeros past the row's end up to a whole chunk; the tiles' layout (where AMX runs) holds
// the same values.
TEST(Fp8Bf16Dot, ActivationsAreRoundedInTheChunkOrder) {
  std::mt19937 rng(87);
  EXPECT_EQ(Fp8Bf16Position(0), 0);
  EXPECT_EQ(Fp8Bf16Position(8), 32);
  EXPECT_EQ(Fp8Bf16Position(16), 8);
  EXPECT_EQ(Fp8Bf16Position(63), 63);
  EXPECT_EQ(Fp8Bf16Position(64 + 9), 64 + 33);
  for (int64_t K : {1, 31, 64, 100, 200}) {
    const int64_t T = 17;
    std::vector<float> x(static_cast<size_t>(T * K));
    for (auto& v : x) {
      const uint32_t b = rng();
      std::memcpy(&v, &b, sizeof(v));
    }
    Fp8Bf16Activations xb;
    RoundActivationsFp8Bf16(x.data(), K, T, K, &xb, kTiles);
    ASSERT_EQ(xb.padded, CeilDiv(K, 64) * 64);
    std::vector<bool> seen(static_cast<size_t>(xb.padded), false);
    for (int64_t k = 0; k < xb.padded; ++k) seen[Fp8Bf16Position(k)] = true;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), xb.padded) << "not a permutation, K=" << K;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < xb.padded; ++k) {
        const uint16_t want = k < K ? F32ToBf16(x[t * K + k]) : uint16_t{0};
        const uint16_t got = xb.values[t * xb.padded + Fp8Bf16Position(k)];
        ASSERT_EQ(got, want) << "K=" << K << " t=" << t << " k=" << k;
        if (!xb.pairs.empty()) {
          const int64_t p = Fp8Bf16Position(k);
          ASSERT_EQ(xb.pairs[(t / 16) * (xb.padded / 2) * 32 + (p / 2) * 32 + (t % 16) * 2 + p % 2], want);
        }
      }
    }
  }
}

// The vector paths (AVX-512 BF16, AVX2 + FMA) give the scalar emulation's bits on every shape: row lengths below, at and
// above whole 32-, 64- and 128-column blocks, scale blocks of 64 to 192 columns and 1 to 128 rows,
// activation batches across the GEMV's token pairs and the GEMM (8 rows on), and activations with
// denormals, infinities and NaN.
// The AMX path (its own summation) is held to the bound and the invariances below.
TEST(Fp8Bf16Dot, VectorPathsAreBitIdenticalToTheScalarEmulation) {
  for (Bf16Isa isa : AvailableIsas()) std::printf("fp8 bf16 path available: %s\n", Bf16IsaName(isa));
  std::vector<Bf16Isa> paths;
  for (Bf16Isa isa : {Bf16Isa::kAvx512Bf16, Bf16Isa::kAvx2Fma}) {
    if (Fp8Bf16IsaAvailable(isa)) paths.push_back(isa);
  }
  if (paths.empty()) GTEST_SKIP() << "neither AVX512_BF16 + VBMI nor AVX2 + FMA on this CPU";
  std::mt19937 rng(81);
  const int64_t blocks[][2] = {{128, 128}, {1, 64}, {3, 64}, {16, 192}, {5, 128}};
  for (int64_t K : {1, 5, 31, 32, 33, 63, 64, 65, 96, 127, 128, 130, 200, 257, 513, 2200}) {
    for (const auto& blk : blocks) {
      const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
      const HostFp8 w = RandomFp8(rows, K, blk[0], blk[1], rng, /*nan=*/K == 200);
      for (int64_t T : {1, 2, 3, 5, 8, 17}) {
        std::vector<float> x = RandomRows(T * K, rng);
        if (T >= 3) {
          x[rng() % K] = 0x1p-130f;  // a float32 denormal
          x[2 * K + rng() % K] = std::numeric_limits<float>::infinity();
        }
        if (T >= 5) x[4 * K + rng() % K] = std::numeric_limits<float>::quiet_NaN();
        Fp8Bf16Activations xb;
        RoundActivationsFp8Bf16(x.data(), K, T, K, &xb, kTiles);
        std::vector<float> want(static_cast<size_t>(T * rows));
        Fp8MatMulRows(Bf16Isa::kScalar, w.m, xb, want.data(), rows, 0, rows);
        const int64_t split = rows / 2;
        for (Bf16Isa isa : paths) {
          std::vector<float> got(want.size(), -1.0f);
          Fp8MatMulRows(isa, w.m, xb, got.data(), rows, 0, split);
          Fp8MatMulRows(isa, w.m, xb, got.data(), rows, split, rows);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(SameFloat(got[i], want[i]))
                << Bf16IsaName(isa) << " K=" << K << " block " << blk[0] << "x" << blk[1] << " rows=" << rows
                << " T=" << T << " at " << i << ": " << got[i] << " vs " << want[i];
          }
        }
        if (T >= 5) {
          for (int64_t n = 0; n < rows; ++n) EXPECT_TRUE(std::isnan(want[4 * rows + n])) << "NaN row, K=" << K;
        }
      }
    }
  }
}

// Subnormal codes count: a row of them, whose sum is exact in float32, gives that sum on every
// path (the dot-product instructions would read them as zero if they were bf16 denormals).
TEST(Fp8Bf16Dot, SubnormalCodesAreNotFlushed) {
  const int64_t K = 160, rows = 3, T = 2;
  std::vector<uint8_t> codes(static_cast<size_t>(rows * K));
  double want[rows] = {};
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t m = static_cast<uint8_t>(1 + (n + k) % 7);
      const uint8_t code = n == 1 ? static_cast<uint8_t>(0x80 | m) : m;  // row 1 negative
      codes[n * K + k] = code;
      want[n] += Fp8E4M3::ToFloat(code);  // +-m * 2^-9: every partial sum exact
    }
  }
  const std::vector<float> scales = {1.0f, 1.0f};  // one block-row, blocks of 128 columns
  Fp8BlockMatrix m{codes.data(), scales.data(), rows, K, 128, 128};
  const std::vector<float> x(static_cast<size_t>(T * K), 1.0f);
  Fp8Bf16Activations xb;
  RoundActivationsFp8Bf16(x.data(), K, T, K, &xb, kTiles);
  for (Bf16Isa isa : AvailableIsas()) {
    std::vector<float> got(static_cast<size_t>(T * rows));
    Fp8MatMulRows(isa, m, xb, got.data(), rows, 0, rows);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < rows; ++n) {
        EXPECT_EQ(got[t * rows + n], static_cast<float>(want[n])) << Bf16IsaName(isa) << " row " << n;
      }
    }
  }
}

// A NaN code poisons exactly the outputs of its row, on every path.
TEST(Fp8Bf16Dot, NanCodeReachesItsRowOnly) {
  std::mt19937 rng(82);
  const int64_t K = 256, rows = 20, T = 3;
  HostFp8 w = RandomFp8(rows, K, 128, 128, rng);
  w.codes[7 * K + 200] = 0xFF;  // row 7
  const std::vector<float> x = RandomRows(T * K, rng);
  Fp8Bf16Activations xb;
  RoundActivationsFp8Bf16(x.data(), K, T, K, &xb, kTiles);
  for (Bf16Isa isa : AvailableIsas()) {
    std::vector<float> got(static_cast<size_t>(T * rows));
    Fp8MatMulRows(isa, w.m, xb, got.data(), rows, 0, rows);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < rows; ++n) {
        EXPECT_EQ(std::isnan(got[t * rows + n]), n == 7) << Bf16IsaName(isa) << " row " << n << " t " << t;
      }
    }
  }
}

// A row's result does not depend on the rows beside it: on every path, every row of a 65-row
// call equals the same row alone and in a batch of 3, bit for bit, and row ranges split where a
// thread pool might split them give the same bits (AMX: partial groups of 16 weight and
// activation rows; scale blocks of 128 rows x 128 columns with a partial last block).
TEST(Fp8Bf16Dot, RowsAloneEqualRowsInABatch) {
  std::mt19937 rng(83);
  const int64_t K = 7 * 64 + 5, rows = 37, T = 65;
  const HostFp8 w = RandomFp8(rows, K, 128, 128, rng);
  const std::vector<float> x = RandomRows(T * K, rng);
  Fp8Bf16Activations all;
  RoundActivationsFp8Bf16(x.data(), K, T, K, &all, kTiles);
  for (Bf16Isa isa : AvailableIsas()) {
    std::vector<float> batch(static_cast<size_t>(T * rows));
    Fp8MatMulRows(isa, w.m, all, batch.data(), rows, 0, rows);
    std::vector<float> split(batch.size());
    for (int64_t n0 : {0, 5, 21, 32}) {
      const int64_t n1 = n0 == 0 ? 5 : n0 == 5 ? 21 : n0 == 21 ? 32 : rows;
      Fp8MatMulRows(isa, w.m, all, split.data(), rows, n0, n1);
    }
    ASSERT_EQ(std::memcmp(split.data(), batch.data(), batch.size() * sizeof(float)), 0) << Bf16IsaName(isa);
    for (int64_t t = 0; t < T; ++t) {
      Fp8Bf16Activations one;
      RoundActivationsFp8Bf16(x.data() + t * K, K, 1, K, &one, kTiles);
      std::vector<float> got(static_cast<size_t>(rows));
      Fp8MatMulRows(isa, w.m, one, got.data(), rows, 0, rows);
      ASSERT_EQ(std::memcmp(got.data(), batch.data() + t * rows, rows * sizeof(float)), 0)
          << Bf16IsaName(isa) << " row " << t;
      if (t + 3 <= T) {
        Fp8Bf16Activations three;
        RoundActivationsFp8Bf16(x.data() + t * K, K, 3, K, &three, kTiles);
        std::vector<float> g3(static_cast<size_t>(3 * rows));
        Fp8MatMulRows(isa, w.m, three, g3.data(), rows, 0, rows);
        ASSERT_EQ(std::memcmp(g3.data(), batch.data() + t * rows, 3 * rows * sizeof(float)), 0)
            << Bf16IsaName(isa) << " rows " << t << "..";
      }
    }
  }
}

// FP8 weights take the vdpbf16ps arithmetic wherever the CPU has AVX512_BF16 and VBMI, AMX CPUs
// included (the tiles cost more per byte for one activation row; see BestFp8Bf16Isa), and its
// FMA form on other AVX2 CPUs.
TEST(Fp8Bf16Dot, BestPathIsTheVdpbf16psArithmetic) {
  std::printf("fp8 bf16 paths here: best %s (bf16 weights: %s)\n", Bf16IsaName(BestFp8Bf16Isa()),
              Bf16IsaName(BestBf16Isa()));
  EXPECT_EQ(BestFp8Bf16Isa(), Fp8Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) ? Bf16Isa::kAvx512Bf16
                              : Fp8Bf16IsaAvailable(Bf16Isa::kAvx2Fma)  ? Bf16Isa::kAvx2Fma
                                                                        : Bf16Isa::kScalar);
}

// Against float64 sums of the exact weights (code value x scale) times the bf16-rounded
// activations: every product meets at most block_cols / 16 fused steps inside its block, one
// scale step, nb - 1 later block steps and the 4 levels of the lane tree (AMX: its own order in
// a block of 32, then the same), so |result - exact| <= (block_cols / 16 + nb + 5) * 2^-24 *
// sum |x_k w_k| to first order. Codes of every class (subnormal, zero, +-448); activation
// magnitudes from 2^-10 to 2^10 (no underflow or overflow of the partial sums); row lengths
// that are not whole blocks.
TEST(Fp8Bf16Dot, ResultIsTheExactWeightsTimesTheRoundedActivationsWithinFloat32Summation) {
  std::mt19937 rng(84);
  for (Bf16Isa isa : AvailableIsas()) {
    for (int64_t K : {33, 128, 1000, 7168}) {
      for (float xscale : {0x1p-10f, 1.0f, 0x1p10f}) {
        const int64_t rows = 9, T = 10, bc = 128, nb = CeilDiv(K, bc);
        const HostFp8 w = RandomFp8(rows, K, 128, bc, rng);
        const std::vector<float> x = RandomRows(T * K, rng, xscale);
        Fp8Bf16Activations xb;
        RoundActivationsFp8Bf16(x.data(), K, T, K, &xb, kTiles);
        std::vector<float> got(static_cast<size_t>(T * rows));
        Fp8MatMulRows(isa, w.m, xb, got.data(), rows, 0, rows);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t n = 0; n < rows; ++n) {
            double exact = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = static_cast<double>(Bf16ToF32(F32ToBf16(x[t * K + k]))) * WeightValue(w, n, k);
              exact += p;
              mag += std::fabs(p);
            }
            const double bound = (bc / 16.0 + static_cast<double>(nb) + 5) * 0x1p-24 * mag * 1.01;
            ASSERT_LE(std::fabs(got[t * rows + n] - exact), bound)
                << Bf16IsaName(isa) << " K=" << K << " x scale " << xscale << " t=" << t << " n=" << n;
          }
        }
      }
    }
  }
}

// Through the backend: under BF16, an FP8 weight with 64-column chunks takes the kernel on the
// rounded activations (batch, single rows, parallel or serial); MatMulRawExact (the router's
// call) and FP8 weights whose blocks are not whole chunks stay on the exact path.
TEST(Fp8Bf16Dot, BackendAppliesThePolicyToFp8Weights) {
  std::mt19937 rng(85);
  const int64_t rows = 300, cols = 520, T = 9;
  BackendOptions bo, eo;
  bo.num_threads = eo.num_threads = 2;
  bo.activations = QuantizedActivations::kBf16;
  CpuBackend bf(bo), exact(eo);
  WeightParams p;
  p.block_rows = p.block_cols = 128;
  const conformance::HostMatrix host = MakeHostMatrix(kWeightFp8Block, rows, cols, p, rng);
  const Weight wb = *bf.PrepareWeight(host.stored), we = *exact.PrepareWeight(host.stored);
  ASSERT_TRUE(Fp8SupportsBf16(wb));
  const std::vector<float> x = RandomRows(T * cols, rng);
  std::vector<float> batch(static_cast<size_t>(T * rows)), ref(batch.size()), ex(batch.size());
  bf.MatMulRaw(x.data(), cols, T, wb, batch.data(), rows);
  Fp8Bf16Activations xb;
  RoundActivationsFp8Bf16(x.data(), cols, T, cols, &xb, kTiles);
  Fp8MatMulRowsBest(Fp8BlockOf(wb), xb, ref.data(), rows, 0, rows);
  EXPECT_EQ(std::memcmp(batch.data(), ref.data(), ref.size() * sizeof(float)), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> one(static_cast<size_t>(rows));
    bf.MatMulRaw(x.data() + t * cols, cols, 1, wb, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "token " << t;
    bf.MatMulRowsSerial(x.data() + t * cols, cols, 1, wb, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "serial, token " << t;
  }
  exact.MatMulRaw(x.data(), cols, T, we, ex.data(), rows);
  EXPECT_NE(std::memcmp(ex.data(), batch.data(), ex.size() * sizeof(float)), 0) << "BF16 did not round";
  std::vector<float> router(batch.size());
  bf.MatMulRawExact(x.data(), cols, T, wb, router.data(), rows);
  EXPECT_EQ(std::memcmp(router.data(), ex.data(), ex.size() * sizeof(float)), 0);
  // Blocks of 16 or 32 columns: not whole 64-column chunks, so the exact path under the policy too.
  WeightParams b32;
  b32.block_rows = b32.block_cols = 32;
  EXPECT_FALSE(Fp8SupportsBf16(*bf.PrepareWeight(MakeHostMatrix(kWeightFp8Block, 32, 64, b32, rng).stored)));
  WeightParams odd;
  odd.block_rows = 5;
  odd.block_cols = 16;
  const conformance::HostMatrix h16 = MakeHostMatrix(kWeightFp8Block, 40, 256, odd, rng);
  const Weight ob = *bf.PrepareWeight(h16.stored), oe = *exact.PrepareWeight(h16.stored);
  EXPECT_FALSE(Fp8SupportsBf16(ob));
  std::vector<float> a(static_cast<size_t>(T * 40)), b(a.size());
  const std::vector<float> x256 = RandomRows(T * 256, rng);
  bf.MatMulRaw(x256.data(), 256, T, ob, a.data(), 40);
  exact.MatMulRaw(x256.data(), 256, T, oe, b.data(), 40);
  EXPECT_EQ(a, b);
}

// FP8 routed experts under BF16 and FP8 activations: each token's output is the same alone and in
// a batch (serial per-expert matmuls for decode-sized batches, parallel ones for larger), within
// the policy's rounding of the exact path's, and not equal to it.
class Fp8Experts : public ::testing::TestWithParam<QuantizedActivations> {};

TEST_P(Fp8Experts, FollowThePolicyAndStayBatchInvariant) {
  std::mt19937 rng(86);
  const int64_t H = 256, I = 128, E = 4, K = 2, T = 9;
  BackendOptions bo, eo;
  bo.num_threads = eo.num_threads = 2;
  bo.activations = GetParam();
  CpuBackend bf(bo), exact(eo);
  WeightParams p;
  p.block_rows = p.block_cols = 128;
  std::vector<ExpertWeights> eb, ee;
  for (int64_t e = 0; e < E; ++e) {
    const conformance::HostMatrix g = MakeHostMatrix(kWeightFp8Block, I, H, p, rng);
    const conformance::HostMatrix u = MakeHostMatrix(kWeightFp8Block, I, H, p, rng);
    const conformance::HostMatrix d = MakeHostMatrix(kWeightFp8Block, H, I, p, rng);
    eb.push_back({*bf.PrepareWeight(g.stored), *bf.PrepareWeight(u.stored), *bf.PrepareWeight(d.stored)});
    ee.push_back({*exact.PrepareWeight(g.stored), *exact.PrepareWeight(u.stored), *exact.PrepareWeight(d.stored)});
  }
  const auto bank_bf = *bf.PrepareExperts(eb);
  const auto bank_ex = *exact.PrepareExperts(ee);
  const std::vector<float> x = RandomRows(T * H, rng, 0.05f);
  std::vector<int32_t> idx(static_cast<size_t>(T * K));
  std::vector<float> wts(idx.size());
  for (int64_t t = 0; t < T; ++t) {
    idx[t * K] = static_cast<int32_t>(t % E);
    idx[t * K + 1] = static_cast<int32_t>((t + 1 + t / E) % E);
    wts[t * K] = 0.6f;
    wts[t * K + 1] = 0.4f;
  }
  auto run = [&](CpuBackend& be, const ExpertBank& bank, int64_t t0, int64_t n) {
    const Tensor xt = conformance::UploadF32(be, std::vector<float>(x.begin() + t0 * H, x.begin() + (t0 + n) * H),
                                             {n, H});
    const Tensor it =
        conformance::UploadI32(be, std::vector<int32_t>(idx.begin() + t0 * K, idx.begin() + (t0 + n) * K));
    const Tensor wt = conformance::UploadF32(be, std::vector<float>(wts.begin() + t0 * K, wts.begin() + (t0 + n) * K),
                                             {n, K});
    const Tensor it2 = it.Reshape({n, K});
    const Tensor out = *be.Allocate(DType::kF32, {n, H});
    be.MoeExperts(xt, it2, wt, bank, out);
    EXPECT_TRUE(be.Synchronize().ok());
    std::vector<float> o(static_cast<size_t>(n * H));
    EXPECT_TRUE(be.Download(out, o.data(), o.size() * sizeof(float)).ok());
    return o;
  };
  const std::vector<float> batch = run(bf, *bank_bf, 0, T), ex = run(exact, *bank_ex, 0, T);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(batch[i] - ex[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(ex[i])));
  }
  EXPECT_GT(worst, 0.0) << "the policy did not round";
  // Activations rounded to 8 significant bits (BF16) move each output by about 2^-9 of its
  // magnitude; to 4 (e4m3 per block) by about 2^-5, through two projections.
  const double bound = GetParam() == QuantizedActivations::kBf16 ? 0x1p-6 : 0x1p-3;
  EXPECT_LE(worst, bound * scale) << "worst " << worst << " of outputs up to " << scale;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> one = run(bf, *bank_bf, t, 1);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * H, H * sizeof(float)), 0) << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(, Fp8Experts, ::testing::Values(QuantizedActivations::kBf16, QuantizedActivations::kFp8),
                         [](const ::testing::TestParamInfo<QuantizedActivations>& info) {
                           return std::string(info.param == QuantizedActivations::kBf16 ? "bf16" : "fp8");
                         });

}  // namespace
}  // namespace llmrt::cpu
