// The FP8 activation policy (QuantizedActivations::kFp8, LLM_ACTIVATIONS_FP8): activations of
// matmuls with FP8 block weights quantized per row and column block to e4m3 under one float32
// scale, code products summed in float32 and scaled by both block scales.
//
// CPU kernels (src/backend/cpu/fp8_bf16_dot.h): the quantization against the format's rounding
// (zero, NaN, infinite, denormal and partial blocks), every path bit-identical to the scalar
// emulation with activation scales (the AMX tiles within the float32 bound), the distance to the
// float64 sum of the exact products, and the CPU backend's dispatch (FP8 weights quantize, BF16
// weights take the BF16 policy, INT4 and odd FP8 blocks stay exact, rows batch-invariant).
//
// Conformance (`Fp8Policy.*/cpu`, and `Fp8Policy.*/cuda` with ctest label gpu, skipped with one
// line where the CUDA backend cannot run): MatMul under the policy against the float64
// reference on the reference quantization, within (K + 10) * 2u * sum |products| (u = 2^-24):
// products of e4m3 values are exact, the float32 additions err by at most K u each, the scales
// add two roundings, and the factor 2 admits tensor cores that truncate; the CUDA backend's
// fallback for shapes cuBLASLt and the GEMV do not take (the tiled kernel on dequantized
// activations) rounds each activation and product once more, inside the same bound. Rows are
// bit for bit independent of the batch on every backend.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/fp8_bf16_dot.h"
#include "src/backend/registry.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"
#include "tests/backend/harness.h"

namespace llmrt {
namespace {

using conformance::HostMatrix;
using conformance::kU;
using conformance::MakeHostMatrix;
using conformance::RandomNormal;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The policy's quantization written from its definition: per row and block of bc columns,
// scale = amax / 448 (a NaN amax wins; 1 where the scale is zero, a float32 denormal or NaN),
// values = e4m3(x / scale as x * (1 / scale)). q [T, K] e4m3 values, s [T, nb].
struct Quantized {
  std::vector<float> q, s;
  int64_t nb = 0;
};
Quantized QuantizeReference(const std::vector<float>& x, int64_t T, int64_t K, int64_t bc) {
  Quantized r;
  r.nb = CeilDiv(K, bc);
  r.q.resize(static_cast<size_t>(T * K));
  r.s.resize(static_cast<size_t>(T * r.nb));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < r.nb; ++b) {
      const int64_t c0 = b * bc, c1 = std::min(K, c0 + bc);
      float amax = 0.0f;
      bool nan = false;
      for (int64_t c = c0; c < c1; ++c) {
        nan = nan || std::isnan(x[t * K + c]);
        amax = std::max(amax, std::fabs(x[t * K + c]));
      }
      float scale = nan ? 1.0f : amax / Fp8E4M3::kMax;
      if (scale == 0.0f || scale < FLT_MIN) scale = 1.0f;
      r.s[t * r.nb + b] = scale;
      for (int64_t c = c0; c < c1; ++c) r.q[t * K + c] = Fp8E4M3::ToFloat(Fp8E4M3::FromFloat(x[t * K + c] * (1.0f / scale)));
    }
  }
  return r;
}

// An FP8 weight's code value and block scale.
float CodeValue(const StoredMatrix& m, int64_t n, int64_t k) { return Fp8E4M3::ToFloat(m.codes.data[n * m.cols + k]); }
float BlockScale(const StoredMatrix& m, int64_t n, int64_t k) {
  const int64_t nbc = CeilDiv(m.cols, m.params.block_cols);
  return reinterpret_cast<const float*>(m.scales.data)[(n / m.params.block_rows) * nbc + k / m.params.block_cols];
}

// The float64 result of the policy on weight m for activations x [T, K], and its tolerance.
// `block_rel`: a further relative error allowed per 128-long block sum, as a fraction of the sum
// of its products' magnitudes (the kernels under test here add exactly in float32: 0).
void Reference(const StoredMatrix& m, const std::vector<float>& x, int64_t T, std::vector<double>* want,
               std::vector<double>* tol, double block_rel = 0) {
  const int64_t N = m.rows, K = m.cols, bc = m.params.block_cols;
  const Quantized a = QuantizeReference(x, T, K, bc);
  want->assign(static_cast<size_t>(T * N), 0.0);
  tol->assign(want->size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0, mag = 0;
      for (int64_t b = 0; b < a.nb; ++b) {
        double block = 0, block_mag = 0;
        for (int64_t k = b * bc; k < std::min(K, (b + 1) * bc); ++k) {
          const double p = static_cast<double>(a.q[t * K + k]) * CodeValue(m, n, k);
          block += p;
          block_mag += std::fabs(p);
        }
        const double s = static_cast<double>(a.s[t * a.nb + b]) * BlockScale(m, n, b * bc);
        sum += block * s;
        mag += block_mag * s;
      }
      (*want)[t * N + n] = sum;
      (*tol)[t * N + n] = (static_cast<double>(K + 10) * 2 * kU + block_rel) * mag;
    }
  }
}

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

// ---- CPU kernels ----

std::vector<cpu::Bf16Isa> AvailableIsas() {
  std::vector<cpu::Bf16Isa> v;
  for (cpu::Bf16Isa isa :
       {cpu::Bf16Isa::kScalar, cpu::Bf16Isa::kAvx512Bf16, cpu::Bf16Isa::kAmx, cpu::Bf16Isa::kAvx2Fma}) {
    if (cpu::Fp8Bf16IsaAvailable(isa)) v.push_back(isa);
  }
  return v;
}
const bool kTiles = cpu::Fp8Bf16IsaAvailable(cpu::Bf16Isa::kAmx);

TEST(Fp8Activations, QuantizationIsTheFormatsRoundingPerRowAndBlock) {
  std::mt19937 rng(91);
  for (int64_t bc : {64, 128, 192}) {
    for (int64_t K : {1, 63, 64, 127, 128, 200, 513}) {
      const int64_t T = 6;
      std::vector<float> x = RandomNormal(static_cast<size_t>(T * K), rng, 3.0f);
      // Row 1: an all-zero row (scale 1, codes 0); row 2: float32 denormals only (scale 1: they
      // round to e4m3 zero); row 3: a NaN; row 4: an infinity; row 5: values near the
      // rounding boundaries of the largest code.
      std::fill(x.begin() + K, x.begin() + 2 * K, 0.0f);
      for (int64_t k = 0; k < K; ++k) x[2 * K + k] = (k % 2 ? -1 : 1) * 0x1p-140f * static_cast<float>(k + 1);
      x[3 * K + K / 2] = std::numeric_limits<float>::quiet_NaN();
      x[4 * K + K / 3] = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < K; ++k) x[5 * K + k] = (k % 3 == 0 ? 464.0f : 447.0f) * (k % 2 ? -1.0f : 1.0f);
      cpu::Fp8Bf16Activations got;
      cpu::QuantizeActivationsFp8(x.data(), K, T, K, bc, &got, kTiles);
      const Quantized want = QuantizeReference(x, T, K, bc);
      ASSERT_EQ(got.scale_cols, bc);
      ASSERT_EQ(got.scales.size(), want.s.size());
      for (size_t i = 0; i < want.s.size(); ++i) {
        ASSERT_TRUE(SameFloat(got.scales[i], want.s[i])) << "bc " << bc << " K " << K << " scale " << i;
      }
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t k = 0; k < got.padded; ++k) {
          const uint16_t bits = got.values[t * got.padded + cpu::Fp8Bf16Position(k)];
          const float v = Bf16ToF32(bits);
          if (k >= K) {
            ASSERT_EQ(bits, 0) << "padding at column " << k;
            continue;
          }
          ASSERT_TRUE(SameFloat(v, want.q[t * K + k]) || (std::isnan(v) && std::isnan(want.q[t * K + k])))
              << "bc " << bc << " K " << K << " row " << t << " column " << k << ": " << v << " vs "
              << want.q[t * K + k];
        }
      }
      EXPECT_EQ(Bf16ToF32(got.values[1 * got.padded]), 0.0f);
      for (int64_t b = 0; b < want.nb; ++b) EXPECT_EQ(got.scales[1 * want.nb + b], 1.0f);
    }
  }
}

TEST(Fp8Activations, EveryPathIsTheScalarEmulationBitForBit) {
  std::mt19937 rng(92);
  for (int64_t K : {64, 130, 512, 1000, 2200}) {
    for (int64_t bc : {64, 128}) {
      const int64_t rows = 13;
      WeightParams p;
      p.block_rows = 128;
      p.block_cols = bc;
      const HostMatrix w = MakeHostMatrix(kWeightFp8Block, rows, K, p, rng);
      cpu::Fp8BlockMatrix m;
      m.codes = w.stored.codes.data;
      m.scales = reinterpret_cast<const float*>(w.stored.scales.data);
      m.rows = rows;
      m.cols = K;
      m.block_rows = 128;
      m.block_cols = bc;
      for (int64_t T : {1, 2, 3, 8, 17, 70}) {
        const std::vector<float> x = RandomNormal(static_cast<size_t>(T * K), rng, 0.5f);
        cpu::Fp8Bf16Activations xq;
        cpu::QuantizeActivationsFp8(x.data(), K, T, K, bc, &xq, kTiles);
        std::vector<float> want(static_cast<size_t>(T * rows));
        cpu::Fp8MatMulRows(cpu::Bf16Isa::kScalar, m, xq, want.data(), rows, 0, rows);
        if (cpu::Fp8Bf16IsaAvailable(cpu::Bf16Isa::kAvx512Bf16)) {
          std::vector<float> got(want.size(), -1.0f);
          cpu::Fp8MatMulRows(cpu::Bf16Isa::kAvx512Bf16, m, xq, got.data(), rows, 0, 5);
          cpu::Fp8MatMulRows(cpu::Bf16Isa::kAvx512Bf16, m, xq, got.data(), rows, 5, rows);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(SameFloat(got[i], want[i])) << "K " << K << " bc " << bc << " T " << T << " at " << i;
          }
        }
        // Against the definition: the scalar emulation's float32 sums stay within the bound.
        std::vector<double> ref, tol;
        Reference(w.stored, x, T, &ref, &tol);
        EXPECT_TRUE(conformance::AllNear(want, ref, tol)) << "K " << K << " bc " << bc << " T " << T;
      }
    }
  }
}

TEST(Fp8Activations, EveryPathIsWithinTheFloat32BoundOfTheExactProducts) {
  std::mt19937 rng(93);
  for (cpu::Bf16Isa isa : AvailableIsas()) {
    for (int64_t K : {200, 7168}) {
      const int64_t rows = 9, T = 18;
      WeightParams p;
      p.block_rows = p.block_cols = 128;
      const HostMatrix w = MakeHostMatrix(kWeightFp8Block, rows, K, p, rng);
      const cpu::Fp8BlockMatrix m{w.stored.codes.data, reinterpret_cast<const float*>(w.stored.scales.data), rows, K,
                                  128, 128};
      for (float xs : {0x1p-8f, 1.0f, 0x1p8f}) {
        const std::vector<float> x = RandomNormal(static_cast<size_t>(T * K), rng, xs);
        cpu::Fp8Bf16Activations xq;
        cpu::QuantizeActivationsFp8(x.data(), K, T, K, 128, &xq, kTiles);
        std::vector<float> got(static_cast<size_t>(T * rows));
        cpu::Fp8MatMulRows(isa, m, xq, got.data(), rows, 0, rows);
        std::vector<double> ref, tol;
        Reference(w.stored, x, T, &ref, &tol);
        EXPECT_TRUE(conformance::AllNear(got, ref, tol)) << cpu::Bf16IsaName(isa) << " K " << K << " x scale " << xs;
      }
    }
  }
}

// Through the CPU backend: FP8 weights with whole 64-column chunks take the quantized path
// (the same bits as the kernels called directly, rows alone equal rows in a batch, parallel or
// serial), BF16 weights take the BF16 policy's, INT4 weights and FP8 blocks of 32 columns the
// exact path; the policy moves results from the exact ones by about e4m3's rounding.
TEST(Fp8Activations, CpuBackendAppliesThePolicyByFormat) {
  std::mt19937 rng(94);
  BackendOptions fo, bo, eo;
  fo.num_threads = bo.num_threads = eo.num_threads = 2;
  fo.activations = QuantizedActivations::kFp8;
  bo.activations = QuantizedActivations::kBf16;
  CpuBackend fp8(fo), bf16(bo), exact(eo);
  const int64_t rows = 300, cols = 520, T = 9;
  WeightParams p;
  p.block_rows = p.block_cols = 128;
  const HostMatrix h = MakeHostMatrix(kWeightFp8Block, rows, cols, p, rng);
  const Weight wf = *fp8.PrepareWeight(h.stored), we = *exact.PrepareWeight(h.stored);
  const std::vector<float> x = RandomNormal(static_cast<size_t>(T * cols), rng);
  std::vector<float> batch(static_cast<size_t>(T * rows)), ref(batch.size()), ex(batch.size());
  fp8.MatMulRaw(x.data(), cols, T, wf, batch.data(), rows);
  cpu::Fp8Bf16Activations xq;
  cpu::QuantizeActivationsFp8(x.data(), cols, T, cols, 128, &xq, kTiles);
  cpu::Fp8MatMulRowsBest(cpu::Fp8BlockOf(wf), xq, ref.data(), rows, 0, rows);
  EXPECT_EQ(std::memcmp(batch.data(), ref.data(), ref.size() * sizeof(float)), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> one(static_cast<size_t>(rows));
    fp8.MatMulRaw(x.data() + t * cols, cols, 1, wf, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "token " << t;
    fp8.MatMulRowsSerial(x.data() + t * cols, cols, 1, wf, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)), 0) << "serial, token " << t;
  }
  exact.MatMulRaw(x.data(), cols, T, we, ex.data(), rows);
  double err = 0, norm = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    err += (batch[i] - ex[i]) * static_cast<double>(batch[i] - ex[i]);
    norm += ex[i] * static_cast<double>(ex[i]);
  }
  // e4m3 keeps 4 significant bits: each activation moves by up to 2^-4 of itself (about 2^-6
  // on average over a uniform mantissa), and the errors of 520 products mostly cancel.
  EXPECT_GT(err, 0.0) << "the policy did not quantize";
  EXPECT_LT(std::sqrt(err / norm), 0.05) << "relative RMS distance to the exact path";

  // BF16 weights: the BF16 policy's bits.
  const HostMatrix hb = MakeHostMatrix(kWeightBf16, 64, 256, WeightParams{}, rng);
  const std::vector<float> xb = RandomNormal(static_cast<size_t>(T * 256), rng);
  std::vector<float> a(static_cast<size_t>(T * 64)), b(a.size()), c(a.size());
  fp8.MatMulRaw(xb.data(), 256, T, *fp8.PrepareWeight(hb.stored), a.data(), 64);
  bf16.MatMulRaw(xb.data(), 256, T, *bf16.PrepareWeight(hb.stored), b.data(), 64);
  EXPECT_EQ(a, b);
  // INT4 and FP8 blocks of 32 columns: the exact path.
  WeightParams g;
  g.group = 32;
  WeightParams b32;
  b32.block_rows = b32.block_cols = 32;
  for (const HostMatrix& hm : {MakeHostMatrix(kWeightInt4Group, 64, 256, g, rng),
                               MakeHostMatrix(kWeightFp8Block, 64, 256, b32, rng)}) {
    fp8.MatMulRaw(xb.data(), 256, T, *fp8.PrepareWeight(hm.stored), a.data(), 64);
    exact.MatMulRaw(xb.data(), 256, T, *exact.PrepareWeight(hm.stored), c.data(), 64);
    EXPECT_EQ(a, c) << hm.Describe();
  }
}

}  // namespace

// ---- conformance on every backend ----
namespace conformance {
namespace {

class Fp8Policy : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.num_threads = 3;
    o.activations = QuantizedActivations::kFp8;
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateBackend(GetParam(), o);
    // Only a missing device (or a build without the backend) skips: a device backend that cannot
    // load what the policy needs (cuBLASLt) fails the test.
    if (!be.ok() && be.status().code() == absl::StatusCode::kUnimplemented &&
        (be.status().message().find("cannot run here") != std::string::npos ||
         be.status().message().find("is not part of this build") != std::string::npos)) {
      GTEST_SKIP() << "no " << BackendKindName(GetParam()) << " device here: " << be.status().message();
    }
    ASSERT_TRUE(be.ok()) << be.status();
    be_ = *std::move(be);
  }
  std::vector<float> MatMul(const std::vector<float>& x, int64_t T, const Weight& w) {
    Tensor xt = Must(be_->Allocate(DType::kF32, {T, w.cols}), "Allocate");
    MustOk(be_->Upload(x.data(), x.size() * sizeof(float), xt), "Upload");
    Tensor out = Must(be_->Allocate(DType::kF32, {T, w.rows}), "Allocate");
    be_->MatMul(xt, w, out);
    MustOk(be_->Synchronize(), "MatMul");
    std::vector<float> v(static_cast<size_t>(out.numel()));
    MustOk(be_->Download(out, v.data(), v.size() * sizeof(float)), "Download");
    return v;
  }
  std::unique_ptr<Backend> be_;
};

struct Fp8Shape {
  int64_t n, k, block_rows, block_cols;
};
// The released 128 x 128 blocks: cuBLASLt on Hopper where ceil(K / 128) is a multiple of 4
// ({256, 512}, {576, 1024}, {200, 1536}: several rows of blocks, a partial one in the last),
// the GEMV otherwise ({100, 320}; {256, 320}: two rows of blocks of 3 scales each, the layout
// cuBLASLt would misread); then 64-column blocks (the GEMV with activation scales on CUDA) and a
// K that is not a multiple of 16 (the tiled fallback on CUDA).
const Fp8Shape kFp8Shapes[] = {{256, 512, 128, 128}, {576, 1024, 128, 128}, {200, 1536, 128, 128},
                               {100, 320, 128, 128}, {256, 320, 128, 128},  {64, 256, 64, 64},
                               {48, 200, 128, 64}};

// Hopper's FP8 tensor cores add a 128-long block's products with about 14 significant bits
// (cublaslt.h), so where cuBLASLt may run (CUDA, 128 x 128 blocks) each block sum may be off by
// up to about 2^-13 of its magnitude; 2^-11 leaves a factor 4 of margin. Every other path adds
// in float32.
double BlockRel(BackendKind kind, const Fp8Shape& sh) {
  return kind == BackendKind::kCuda && sh.block_rows == 128 && sh.block_cols == 128 ? std::ldexp(1.0, -11) : 0.0;
}

TEST_P(Fp8Policy, MatMulIsTheFloat64ProductOfTheQuantizedActivations) {
  std::mt19937 rng(95);
  for (const Fp8Shape& sh : kFp8Shapes) {
    WeightParams p;
    p.block_rows = sh.block_rows;
    p.block_cols = sh.block_cols;
    const HostMatrix h = MakeHostMatrix(kWeightFp8Block, sh.n, sh.k, p, rng);
    const Weight w = Must(be_->PrepareWeight(h.stored), "PrepareWeight");
    for (int64_t T : {1, 7, 64, 300}) {
      const std::vector<float> x = RandomNormal(static_cast<size_t>(T * sh.k), rng);
      const std::vector<float> got = MatMul(x, T, w);
      std::vector<double> want, tol;
      Reference(h.stored, x, T, &want, &tol, BlockRel(GetParam(), sh));
      EXPECT_TRUE(AllNear(got, want, tol)) << h.Describe() << ", T = " << T;
    }
  }
}

TEST_P(Fp8Policy, RowsDoNotDependOnTheBatch) {
  std::mt19937 rng(96);
  const int64_t kAll = 300;
  for (const Fp8Shape& sh : kFp8Shapes) {
    WeightParams p;
    p.block_rows = sh.block_rows;
    p.block_cols = sh.block_cols;
    const HostMatrix h = MakeHostMatrix(kWeightFp8Block, sh.n, sh.k, p, rng);
    const Weight w = Must(be_->PrepareWeight(h.stored), "PrepareWeight");
    const std::vector<float> x = RandomNormal(static_cast<size_t>(kAll * sh.k), rng);
    const std::vector<float> all = MatMul(x, kAll, w);
    for (int64_t T : {1, 7, 64}) {
      const int64_t o = kAll - T - 3;
      const std::vector<float> part(x.begin() + o * sh.k, x.begin() + (o + T) * sh.k);
      const std::vector<float> got = MatMul(part, T, w);
      const std::vector<float> want(all.begin() + o * sh.n, all.begin() + (o + T) * sh.n);
      EXPECT_TRUE(AllBitEqual(got, want)) << h.Describe() << ": rows [" << o << ", " << o + T << ") alone";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, Fp8Policy, ::testing::Values(BackendKind::kCpu, BackendKind::kCuda), BackendParamName);

}  // namespace
}  // namespace conformance
}  // namespace llmrt
