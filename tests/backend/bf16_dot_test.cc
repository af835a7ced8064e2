// The BF16 activation policy's dot-product kernels (src/backend/cpu/bf16_dot.h): the scalar
// emulation against the `vdpbf16ps` instruction bit for bit (lanes with denormals, infinities
// and NaN; whole matmuls on random shapes through both loop shapes), batch invariance, the
// distance to a float64 product of the rounded inputs, and the CPU backend's use of the policy
// (BF16 weights only; the MoE router stays float32).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/bf16_dot.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/util/bf16.h"
#include "tests/backend/harness.h"

namespace llmrt::cpu {
namespace {

using conformance::MakeHostMatrix;

std::vector<Bf16Isa> AvailableIsas() {
  std::vector<Bf16Isa> v;
  for (Bf16Isa isa : {Bf16Isa::kScalar, Bf16Isa::kAvx512Bf16, Bf16Isa::kAvx2Fma}) {
    if (Bf16IsaAvailable(isa)) v.push_back(isa);
  }
  return v;
}

bool HaveInstruction() { return Bf16IsaAvailable(Bf16Isa::kAvx512Bf16); }

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Equal bit for bit, or both NaN (the instruction's NaN payloads are not part of the contract).
bool SameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || Bits(a) == Bits(b); }

// A bf16 bit pattern from a mix that reaches every edge: normal values of ordinary and of tiny
// magnitude (products and sums that underflow into float32 denormals), bf16 denormals, signed
// zeros, infinities, NaN, and any pattern at all.
uint16_t EdgyBf16(std::mt19937& rng) {
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  switch (rng() % 16) {
    case 0: return sign | static_cast<uint16_t>(1 + rng() % 0x7F);                    // denormal
    case 1: return sign;                                                               // zero
    case 2: return sign | static_cast<uint16_t>(((1 + rng() % 12) << 7) | (rng() & 0x7F));  // 2^-126 .. 2^-115
    case 3: return sign | static_cast<uint16_t>(((54 + rng() % 20) << 7) | (rng() & 0x7F));  // ~2^-73 .. 2^-54
    case 4: return sign | 0x7F80;                                                      // infinity
    case 5: return static_cast<uint16_t>(rng());                                       // anything (NaN too)
    case 6: return sign | static_cast<uint16_t>(((250 + rng() % 4) << 7) | (rng() & 0x7F));  // near the top
    default: return F32ToBf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
  }
}

float EdgyAcc(std::mt19937& rng) {
  switch (rng() % 6) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return std::ldexp(static_cast<float>(rng() % 1000) / 1000.0f, -126) * ((rng() & 1) ? -1.f : 1.f);  // denormal
    case 3: return std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -125 + static_cast<int>(rng() % 4)) *
                   ((rng() & 1) ? -1.f : 1.f);  // just above the denormals
    default: return std::normal_distribution<float>(0.0f, 1.0f)(rng);
  }
}

// The emulation follows the instruction lane by lane, at the edges: DAZ on the bf16 inputs and
// the accumulator, FTZ on each fused step's result, the odd pair before the even one, NaN and
// infinities propagated.
// 200,000 random 16-lane steps at the edges on `isa` against the scalar emulation, bit for bit
// (NaN as NaN); the edges must be reached: NaN lanes, tiny results and denormal accumulators.
void ExpectLanesMatchTheEmulation(Bf16Isa isa, uint32_t seed) {
  std::mt19937 rng(seed);
  int nan_lanes = 0, tiny_lanes = 0, flushed = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    uint16_t a[32], b[32];
    float acc_s[16], acc_v[16], before[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = EdgyBf16(rng);
      b[i] = EdgyBf16(rng);
    }
    for (int i = 0; i < 16; ++i) acc_s[i] = acc_v[i] = before[i] = EdgyAcc(rng);
    Bf16DotLanes(Bf16Isa::kScalar, acc_s, a, b);
    Bf16DotLanes(isa, acc_v, a, b);
    for (int i = 0; i < 16; ++i) {
      ASSERT_TRUE(SameFloat(acc_s[i], acc_v[i]))
          << Bf16IsaName(isa) << " lane " << i << ": emulation " << acc_s[i] << " (0x" << std::hex << Bits(acc_s[i])
          << "), path " << acc_v[i] << " (0x" << Bits(acc_v[i]) << "); acc 0x" << Bits(before[i]) << " a "
          << a[2 * i] << "," << a[2 * i + 1] << " b " << b[2 * i] << "," << b[2 * i + 1];
      nan_lanes += std::isnan(acc_v[i]);
      tiny_lanes += acc_v[i] != 0 && std::fabs(acc_v[i]) < 0x1p-100f;
      flushed += std::fpclassify(before[i]) == FP_SUBNORMAL;
    }
  }
  EXPECT_GT(nan_lanes, 1000);
  EXPECT_GT(tiny_lanes, 1000);
  EXPECT_GT(flushed, 1000);
}

TEST(Bf16Dot, ScalarEmulationMatchesTheInstructionLaneByLane) {
  for (Bf16Isa isa : AvailableIsas()) std::printf("bf16 path available: %s\n", Bf16IsaName(isa));
  if (!HaveInstruction()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  ExpectLanesMatchTheEmulation(Bf16Isa::kAvx512Bf16, 51);
}

// The AVX2 path forms the same steps with float32 FMAs under MXCSR's DAZ and FTZ: lane by lane
// it gives the emulation's bits at the same edges (so, where the CPU has the instruction too,
// the instruction's).
TEST(Bf16Dot, Avx2FmaMatchesTheScalarEmulationLaneByLane) {
  if (!Bf16IsaAvailable(Bf16Isa::kAvx2Fma)) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  ExpectLanesMatchTheEmulation(Bf16Isa::kAvx2Fma, 57);
  // MXCSR is restored: a denormal product survives outside the kernels.
  volatile float tiny = 0x1p-140f;
  EXPECT_NE(tiny * 1.0f, 0.0f);
}

// The odd pair goes first: with acc = 1, odd = +2^24 and even = -2^24, odd first gives
// fma(2^24, 1, 1) = 2^24 (a tie, to even), then 0; even first would give 1 - 2^24, then 1.
TEST(Bf16Dot, OddPairBeforeEvenPair) {
  uint16_t a[32] = {}, b[32] = {};
  a[1] = F32ToBf16(0x1p24f);
  a[0] = F32ToBf16(-0x1p24f);
  b[0] = b[1] = F32ToBf16(1.0f);
  for (Bf16Isa isa : AvailableIsas()) {
    float acc[16] = {};
    acc[0] = 1.0f;
    Bf16DotLanes(isa, acc, a, b);
    EXPECT_EQ(acc[0], 0.0f) << Bf16IsaName(isa);
  }
}

std::vector<float> RandomRows(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> RandomBf16(int64_t n, std::mt19937& rng) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& x : v) x = F32ToBf16(d(rng));
  return v;
}

// Every path and loop shape gives the scalar emulation's results bit for bit, on row ranges
// split as the thread pool splits them; K odd and even, below, at and above whole blocks; T
// across the GEMV / GEMM switch and the token tiles; activations with denormals, infinities and
// NaN in some rows.
TEST(Bf16Dot, EveryPathAndLoopIsBitIdenticalToTheScalarEmulation) {
  std::mt19937 rng(52);
  if (!HaveInstruction()) std::printf("no AVX512_BF16 on this CPU: only the scalar path runs\n");
  for (int64_t K : {1, 2, 7, 31, 32, 33, 64, 95, 130, 513, 1030, 4100}) {
    for (int64_t rows : {1, 6, 21}) {
      const std::vector<uint16_t> w = RandomBf16(rows * K, rng);
      for (int64_t T : {1, 2, 3, 4, 5, 8, 13, 16, 17, 64, 65}) {
        std::vector<float> x = RandomRows(T * K, rng);
        if (T >= 3) {
          x[rng() % K] = 0x1p-130f;                                        // a float32 denormal
          x[K + rng() % K] = -std::numeric_limits<float>::denorm_min();
          x[2 * K + rng() % K] = std::numeric_limits<float>::infinity();   // row 2: Inf ...
          if (T >= 5) x[4 * K + rng() % K] = std::numeric_limits<float>::quiet_NaN();  // row 4: NaN
        }
        Bf16Activations xb;
        RoundActivationsBf16(x.data(), K, T, K, &xb);
        std::vector<float> want(static_cast<size_t>(T * rows));
        Bf16MatMulRows(Bf16Isa::kScalar, Bf16Loop::kAuto, w.data(), K, xb, want.data(), rows, 0, rows);
        if (T >= 5) {
          for (int64_t n = 0; n < rows; ++n) EXPECT_TRUE(std::isnan(want[4 * rows + n])) << "NaN row, K=" << K;
        }
        for (Bf16Isa isa : AvailableIsas()) {
          for (Bf16Loop loop : {Bf16Loop::kAuto, Bf16Loop::kGemv, Bf16Loop::kGemm, Bf16Loop::kGemmDp}) {
            if ((loop == Bf16Loop::kGemm || loop == Bf16Loop::kGemmDp) && T < kBf16GemmMinTokens) continue;
            std::vector<float> got(want.size(), -1.0f);
            const int64_t split = rows / 2;
            Bf16MatMulRows(isa, loop, w.data(), K, xb, got.data(), rows, 0, split);
            Bf16MatMulRows(isa, loop, w.data(), K, xb, got.data(), rows, split, rows);
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_TRUE(SameFloat(got[i], want[i]))
                  << Bf16IsaName(isa) << " loop " << static_cast<int>(loop) << " K=" << K << " rows=" << rows
                  << " T=" << T << " at " << i << ": " << got[i] << " vs " << want[i];
            }
          }
        }
      }
    }
  }
}

// The loops at the edges: weights and activations drawn from the mix of the lane test
// (denormals, tiny values whose products and sums underflow, infinities, NaN), so that DAZ and
// FTZ decide many results; every path and loop still gives the emulation's bits.
TEST(Bf16Dot, LoopsFlushDenormalsAsTheInstructionDoes) {
  std::mt19937 rng(56);
  for (int64_t K : {32, 95, 256}) {
    const int64_t rows = 10, T = 19;
    std::vector<uint16_t> w(static_cast<size_t>(rows * K));
    for (auto& v : w) v = EdgyBf16(rng);
    std::vector<float> x(static_cast<size_t>(T * K));
    for (auto& v : x) v = Bf16ToF32(EdgyBf16(rng));
    Bf16Activations xb;
    RoundActivationsBf16(x.data(), K, T, K, &xb);
    std::vector<float> want(static_cast<size_t>(T * rows));
    Bf16MatMulRows(Bf16Isa::kScalar, Bf16Loop::kAuto, w.data(), K, xb, want.data(), rows, 0, rows);
    for (Bf16Isa isa : AvailableIsas()) {
      for (Bf16Loop loop : {Bf16Loop::kGemv, Bf16Loop::kGemm, Bf16Loop::kGemmDp}) {
        std::vector<float> got(want.size(), -1.0f);
        Bf16MatMulRows(isa, loop, w.data(), K, xb, got.data(), rows, 0, rows);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(SameFloat(got[i], want[i])) << Bf16IsaName(isa) << " loop " << static_cast<int>(loop)
                                                  << " K=" << K << " at " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

// A row's result does not depend on the rows beside it: every row of a 65-row call (GEMM) equals
// the same row computed alone (GEMV) and in a batch of 3, bit for bit, on the best path (AMX
// tiles where the CPU has them: 16-row groups of weights and activations, partial groups, a row
// length that is not whole blocks).
TEST(Bf16Dot, RowsAloneEqualRowsInABatch) {
  std::mt19937 rng(53);
  const int64_t K = 7 * 64 + 5, rows = 37, T = 65;
  const std::vector<uint16_t> w = RandomBf16(rows * K, rng);
  const std::vector<float> x = RandomRows(T * K, rng);
  Bf16Activations all;
  RoundActivationsBf16(x.data(), K, T, K, &all);
  std::vector<float> batch(static_cast<size_t>(T * rows));
  Bf16MatMulRowsBest(w.data(), K, all, batch.data(), rows, 0, rows);
  for (int64_t t = 0; t < T; ++t) {
    Bf16Activations one;
    RoundActivationsBf16(x.data() + t * K, K, 1, K, &one);
    std::vector<float> got(static_cast<size_t>(rows));
    Bf16MatMulRowsBest(w.data(), K, one, got.data(), rows, 0, rows);
    ASSERT_EQ(std::memcmp(got.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "row " << t;
    if (t + 3 <= T) {
      Bf16Activations three;
      RoundActivationsBf16(x.data() + t * K, K, 3, K, &three);
      std::vector<float> g3(static_cast<size_t>(3 * rows));
      Bf16MatMulRowsBest(w.data(), K, three, g3.data(), rows, 0, rows);
      ASSERT_EQ(std::memcmp(g3.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "rows " << t << "..";
    }
  }
}

// Against float64 sums of the bf16-rounded inputs: each lane adds 2 K / 32 products with float32
// roundings and the tree adds 4 more levels, so |result - exact| <= (K / 16 + 4) * 2^-24 *
// sum |x_k w_k| to first order (products of bf16 values are exact in float32; inputs are normal
// here, so no flushing).
// Where the CPU has AMX-BF16 and the OS grants tile state, the tiles are the best path, so the
// tests above that run the best path exercise them (else they run the AVX-512 or scalar path).
TEST(Bf16Dot, AmxTilesAreTheBestPathWhereAvailable) {
  std::printf("bf16 paths here: best %s; amx %s\n", Bf16IsaName(BestBf16Isa()),
              Bf16IsaAvailable(Bf16Isa::kAmx) ? "available" : "not available");
  if (Bf16IsaAvailable(Bf16Isa::kAmx)) {
    EXPECT_EQ(BestBf16Isa(), Bf16Isa::kAmx);
  }
}

TEST(Bf16Dot, ResultIsTheProductOfTheRoundedInputsWithinFloat32Summation) {
  std::mt19937 rng(54);
  for (int64_t K : {33, 256, 1000, 7168}) {
    const int64_t rows = 9, T = 10;
    const std::vector<uint16_t> w = RandomBf16(rows * K, rng);
    const std::vector<float> x = RandomRows(T * K, rng, 3.0f);
    Bf16Activations xb;
    RoundActivationsBf16(x.data(), K, T, K, &xb);
    std::vector<float> got(static_cast<size_t>(T * rows));
    Bf16MatMulRowsBest(w.data(), K, xb, got.data(), rows, 0, rows);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < rows; ++n) {
        double exact = 0, mag = 0, unrounded = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(Bf16ToF32(xb.values[t * xb.padded + k])) * Bf16ToF32(w[n * K + k]);
          exact += p;
          mag += std::fabs(p);
          unrounded += static_cast<double>(x[t * K + k]) * Bf16ToF32(w[n * K + k]);
        }
        const double bound = (K / 16.0 + 4) * 0x1p-24 * mag * 1.01;
        EXPECT_LE(std::fabs(got[t * rows + n] - exact), bound) << "K=" << K << " t=" << t << " n=" << n;
        // The activation rounding itself: at most 2^-9 relative per value.
        EXPECT_LE(std::fabs(exact - unrounded), 0x1p-9 * mag * 1.01 + bound) << "K=" << K;
      }
    }
  }
}

TEST(Bf16Dot, ActivationRoundingIsTorchsCastWithZeroPadding) {
  const float vals[] = {1.0f,
                        1.00390625f,           // 1 + 2^-8: a tie -> 1 (even)
                        1.01171875f,           // 1 + 3 * 2^-8: a tie -> 1 + 2^-6 (even)
                        -3.14159265f,
                        0x1p-130f,             // a denormal: stays a bf16 denormal
                        std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(),
                        3.4e38f};              // rounds to infinity
  const int64_t K = 8;
  Bf16Activations xb;
  RoundActivationsBf16(vals, K, 1, K, &xb);
  EXPECT_EQ(xb.padded, 32);
  ASSERT_EQ(xb.values.size(), 32u);
  for (int64_t k = 0; k < K; ++k) EXPECT_EQ(xb.values[k], F32ToBf16(vals[k])) << k;
  EXPECT_EQ(xb.values[1], 0x3F80);
  EXPECT_EQ(xb.values[2], 0x3F82);
  EXPECT_EQ(xb.values[4], 0x0008);  // 2^-130 = 2^19 * 2^-149
  EXPECT_EQ(xb.values[5], 0x7F80);
  EXPECT_TRUE(std::isnan(Bf16ToF32(xb.values[6])));
  EXPECT_EQ(xb.values[7], 0x7F80);
  for (int64_t k = K; k < 32; ++k) EXPECT_EQ(xb.values[k], 0) << k;
}

// Every float32 bit pattern class rounds as F32ToBf16 (torch's cast) on the path this CPU takes,
// with the GEMM's split layout holding exactly those values; rows of every length up to three
// blocks (the masked tails).
TEST(Bf16Dot, ActivationRoundingMatchesTheScalarCastOnRandomBits) {
  std::mt19937 rng(57);
  for (int64_t K = 1; K <= 96; ++K) {
    const int64_t T = K % 2 == 0 ? 9 : 2;  // with and without the GEMM's layout
    std::vector<float> x(static_cast<size_t>(T * K));
    for (auto& v : x) {
      const uint32_t b = rng();
      std::memcpy(&v, &b, sizeof(v));
    }
    x[0] = std::numeric_limits<float>::quiet_NaN();
    Bf16Activations xb;
    RoundActivationsBf16(x.data(), K, T, K, &xb);
    // The GEMM's layout from kBf16GemmMinTokens rows on where the FMA GEMM is the one batches
    // take (not where `vdpbf16ps` runs at the FMA rate without AMX: that GEMM reads the values),
    // and always where the AVX2 path (which reads only that layout) is the best.
    const bool dp_gemm =
        !Bf16IsaAvailable(Bf16Isa::kAmx) && Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) && Bf16DpFullRate();
    ASSERT_EQ(xb.split.empty(),
              (T < kBf16GemmMinTokens || dp_gemm) && BestBf16Isa() != Bf16Isa::kAvx2Fma);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < xb.padded; ++k) {
        const uint16_t want = k < K ? F32ToBf16(x[t * K + k]) : uint16_t{0};
        ASSERT_EQ(xb.values[t * xb.padded + k], want) << "K=" << K << " t=" << t << " k=" << k;
        if (!xb.split.empty()) {
          const int64_t c = k / 32 * 32, i = (k % 32) / 2;
          const float s = xb.split[t * xb.padded + c + (k % 2 == 1 ? i : 16 + i)];
          ASSERT_EQ(Bits(s), Bits(Bf16ToF32(want))) << "split, K=" << K << " k=" << k;
        }
      }
    }
  }
}

// Through the backend: under BF16, a BF16 weight's MatMul is the kernel's result on the rounded
// activations (whatever the batch, parallel or serial); an F32 weight and the MoE router are
// computed exactly as without the policy.
TEST(Bf16Dot, BackendAppliesThePolicyToBf16WeightsOnly) {
  std::mt19937 rng(55);
  const int64_t rows = 300, cols = 520, T = 9;
  BackendOptions bo, eo;
  bo.num_threads = eo.num_threads = 2;
  bo.activations = QuantizedActivations::kBf16;
  CpuBackend bf(bo), exact(eo);
  const conformance::HostMatrix host = MakeHostMatrix(kWeightBf16, rows, cols, WeightParams{}, rng);
  const Weight wb = *bf.PrepareWeight(host.stored), we = *exact.PrepareWeight(host.stored);
  const std::vector<float> x = RandomRows(T * cols, rng);
  std::vector<float> batch(static_cast<size_t>(T * rows)), ref(batch.size()), ex(batch.size());
  bf.MatMulRaw(x.data(), cols, T, wb, batch.data(), rows);
  Bf16Activations xb;
  RoundActivationsBf16(x.data(), cols, T, cols, &xb);
  // The backend runs the best path (AMX tiles where present, whose sums are not the scalar
  // emulation's bits; the emulation's elsewhere).
  Bf16MatMulRows(BestBf16Isa(), Bf16Loop::kAuto, reinterpret_cast<const uint16_t*>(host.stored.codes.data), cols, xb,
                 ref.data(), rows, 0, rows);
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
  // Exact without the policy: MatMulRawExact on a BF16 weight (the router's call) ...
  std::vector<float> router(batch.size());
  bf.MatMulRawExact(x.data(), cols, T, wb, router.data(), rows);
  EXPECT_EQ(std::memcmp(router.data(), ex.data(), ex.size() * sizeof(float)), 0);
  // ... and any matmul of an F32 weight.
  const conformance::HostMatrix f32 = MakeHostMatrix(kWeightF32, 40, 256, WeightParams{}, rng);
  const Weight fb = *bf.PrepareWeight(f32.stored), fe = *exact.PrepareWeight(f32.stored);
  std::vector<float> a(static_cast<size_t>(T * 40)), b(a.size());
  bf.MatMulRaw(x.data(), cols, T, fb, a.data(), 40);
  exact.MatMulRaw(x.data(), cols, T, fe, b.data(), 40);
  EXPECT_EQ(a, b);
}

// The MoE's experts run as tasks (whole experts per thread: decode, or many experts for the
// threads) or one after the other with each matmul split over the threads; which one depends on
// the thread count, never the result: 16 experts, 48 tokens of 4 choices each, bit for bit
// across 1, 2, 3 and 5 threads (tasks at 1-3, split at 5), under the BF16 policy and exactly.
TEST(Bf16Dot, MoeExpertsGiveTheSameBitsWhateverTheThreads) {
  std::mt19937 rng(57);
  const int64_t H = 160, I = 96, E = 16, K = 4, T = 48;
  std::vector<conformance::HostMatrix> host;
  for (int64_t i = 0; i < 3 * E; ++i) {
    host.push_back(MakeHostMatrix(kWeightBf16, i % 3 == 2 ? H : I, i % 3 == 2 ? I : H, WeightParams{}, rng));
  }
  const std::vector<float> x = RandomRows(T * H, rng, 0.1f);
  std::vector<int32_t> idx(static_cast<size_t>(T * K));
  std::vector<float> wts(idx.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      idx[t * K + k] = static_cast<int32_t>((t * 5 + k * 3 + t / 7) % E);  // uneven rows per expert
      wts[t * K + k] = 0.2f + 0.1f * static_cast<float>(k);
    }
  }
  for (QuantizedActivations policy : {QuantizedActivations::kBf16, QuantizedActivations::kExact}) {
    std::vector<float> first;
    for (int threads : {1, 2, 3, 5}) {
      BackendOptions o;
      o.num_threads = threads;
      o.activations = policy;
      CpuBackend be(o);
      std::vector<ExpertWeights> experts;
      for (int64_t e = 0; e < E; ++e) {
        experts.push_back({*be.PrepareWeight(host[3 * e].stored), *be.PrepareWeight(host[3 * e + 1].stored),
                           *be.PrepareWeight(host[3 * e + 2].stored)});
      }
      const auto bank = *be.PrepareExperts(std::move(experts));
      const Tensor xt = conformance::UploadF32(be, x, {T, H});
      const Tensor it = conformance::UploadI32(be, idx).Reshape({T, K});
      const Tensor wt = conformance::UploadF32(be, wts, {T, K});
      const Tensor out = *be.Allocate(DType::kF32, {T, H});
      be.MoeExperts(xt, it, wt, *bank, out);
      ASSERT_TRUE(be.Synchronize().ok());
      std::vector<float> got(static_cast<size_t>(T * H));
      ASSERT_TRUE(be.Download(out, got.data(), got.size() * sizeof(float)).ok());
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0) << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu
