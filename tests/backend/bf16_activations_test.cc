// The CUDA backend under the BF16 activation policy (MatMul of BF16 weights through cuBLASLt,
// docs/cuda.md "BF16 activations"), and the run-time loading of cuBLASLt.
//
// The device tests (`Bf16MatMul.*/cuda`, ctest label gpu; skipped with one line where the CUDA
// backend cannot run) hold MatMul to:
//  - the float64 product of the bf16-rounded activations and the weight, within
//    (K + 8) * 2u * sum |w x| (u = 2^-24): the products of two bfloat16 values are exact in
//    float32, so only the float32 additions err; the factor 2 admits tensor cores that truncate
//    instead of rounding each addition;
//  - exact results where every partial sum is representable (so any order gives the same
//    float), which also shows the rounding is to nearest even;
//  - rows bit for bit independent of the batch (T = 1, 7, 64 against rows of T = 300).
// Shapes cover cuBLASLt's (K a multiple of 8, N a multiple of 4: 16-byte aligned rows) and the
// ones it does not take (the tiled kernel on the rounded activations).
//
// `CublasLtLibrary.*` (label backend) runs without a device: the toolkit's library resolves
// every function the backend uses, and a missing library or symbol is UNSUPPORTED naming it.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cuda/cublaslt.h"
#include "src/backend/registry.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

TEST(CublasLtLibrary, TheToolkitsLibraryResolvesEveryFunction) {
  // absl::StrCat, not std::string's operator+: GCC 12 warns of a false out-of-bounds copy there.
  const std::string path = absl::StrCat(LLMRT_CUDA_LIBRARY_DIR, "/", CublasLtLibraryName());
  const absl::Status s = CheckCublasLtLibrary(path);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CublasLtLibrary, AMissingLibraryIsUnsupportedNamingIt) {
  const absl::Status s = CheckCublasLtLibrary("libllmrt-no-such-cublasLt.so.13");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;  // UnsupportedError's code
  EXPECT_NE(s.message().find("libllmrt-no-such-cublasLt.so.13"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cuBLASLt"), std::string::npos) << s;
}

TEST(CublasLtLibrary, ALibraryWithoutTheFunctionsIsUnsupportedNamingOne) {
  const absl::Status s = CheckCublasLtLibrary("libm.so.6");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("cublasLtCreate"), std::string::npos) << s;
}

class Bf16MatMul : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.activations = QuantizedActivations::kBf16;
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateBackend(GetParam(), o);
    if (!be.ok() && be.status().code() == absl::StatusCode::kUnimplemented &&
        be.status().message().find("cannot run here") != std::string::npos) {
      GTEST_SKIP() << "no " << BackendKindName(GetParam()) << " device here: " << be.status().message();
    }
    ASSERT_TRUE(be.ok()) << be.status();
    be_ = *std::move(be);
  }

  Tensor Upload(const std::vector<float>& v, int64_t rows, int64_t cols) {
    Tensor t = Must(be_->Allocate(DType::kF32, {rows, cols}), "Allocate");
    MustOk(be_->Upload(v.data(), v.size() * sizeof(float), t), "Upload");
    return t;
  }
  Weight Bf16Weight(const std::vector<float>& w, int64_t rows, int64_t cols) {
    const std::vector<uint16_t> bits = ToBf16Bits(w);
    Weight out;
    out.format = kWeightBf16;
    out.rows = rows;
    out.cols = cols;
    out.data = Must(be_->Allocate(DType::kBF16, {rows, cols}), "Allocate");
    MustOk(be_->Upload(bits.data(), bits.size() * sizeof(uint16_t), out.data), "Upload");
    return out;
  }
  std::vector<float> MatMul(const Tensor& x, const Weight& w) {
    Tensor out = Must(be_->Allocate(DType::kF32, {x.dim(0), w.rows}), "Allocate");
    be_->MatMul(x, w, out);
    MustOk(be_->Synchronize(), "MatMul");
    std::vector<float> v(static_cast<size_t>(out.numel()));
    MustOk(be_->Download(out, v.data(), v.size() * sizeof(float)), "Download");
    return v;
  }

  std::unique_ptr<Backend> be_;
};

struct Shape {
  int64_t n, k;
};
// cuBLASLt's shapes (K % 8 == 0, N % 4 == 0), then shapes it does not take.
const Shape kShapes[] = {{64, 128}, {1000, 1280}, {512, 7168}, {4, 8}, {19, 1280}, {64, 100}, {33, 77}};

TEST_P(Bf16MatMul, MatchesTheFloat64ProductOfRoundedActivations) {
  std::mt19937 rng(71);
  for (const Shape& sh : kShapes) {
    const std::vector<float> w = RoundToBf16(RandomNormal(static_cast<size_t>(sh.n * sh.k), rng));
    const Weight wt = Bf16Weight(w, sh.n, sh.k);
    for (int64_t T : {1, 7, 64, 300}) {
      const std::vector<float> x = RandomNormal(static_cast<size_t>(T * sh.k), rng);
      const std::vector<float> got = MatMul(Upload(x, T, sh.k), wt);
      const std::vector<float> xr = RoundToBf16(x);  // what the policy multiplies
      std::vector<double> want(got.size()), tol(got.size());
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < sh.n; ++n) {
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < sh.k; ++k) {
            const double p = static_cast<double>(xr[t * sh.k + k]) * w[n * sh.k + k];
            sum += p;
            mag += std::fabs(p);
          }
          want[t * sh.n + n] = sum;
          tol[t * sh.n + n] = static_cast<double>(sh.k + 8) * 2 * kU * mag;
        }
      }
      EXPECT_TRUE(AllNear(got, want, tol)) << "weight [" << sh.n << ", " << sh.k << "], T = " << T;
    }
  }
}

// x alternates 1 + 2^-8 (halfway between 1 and 1 + 2^-7: to even, 1) and 1 + 3 * 2^-8 (halfway
// between 1 + 2^-7 and 1 + 2^-6: to even, 1 + 2^-6); w is +-1 by row. Every partial sum is a
// multiple of 2^-6 below 2^17, exact in float32, so the result is exact in any order:
// +-(K/2 + K/2 * (1 + 2^-6)). Unrounded activations would give +-(K + K/2 * 2^-7).
TEST_P(Bf16MatMul, RoundsActivationsToNearestEven) {
  for (const Shape& sh : kShapes) {
    if (sh.k % 2 != 0) continue;
    const int64_t T = 7;
    std::vector<float> x(static_cast<size_t>(T * sh.k)), w(static_cast<size_t>(sh.n * sh.k));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 == 0) ? 1.0f + 0x1p-8f : 1.0f + 3 * 0x1p-8f;
    for (int64_t n = 0; n < sh.n; ++n) {
      for (int64_t k = 0; k < sh.k; ++k) w[n * sh.k + k] = (n % 3 == 0) ? -1.0f : 1.0f;
    }
    const std::vector<float> got = MatMul(Upload(x, T, sh.k), Bf16Weight(w, sh.n, sh.k));
    const float half = static_cast<float>(sh.k / 2);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < sh.n; ++n) {
        const float want = ((n % 3 == 0) ? -1.0f : 1.0f) * (half + half * (1.0f + 0x1p-6f));
        ASSERT_EQ(got[t * sh.n + n], want) << "weight [" << sh.n << ", " << sh.k << "], row " << t << ", column " << n;
      }
    }
  }
}

// A row's result is the same float whatever the batch it is in: rows [o, o + T) of the T = 300
// product against the same rows multiplied alone, for T = 1, 7, 64 at several offsets.
TEST_P(Bf16MatMul, RowsDoNotDependOnTheBatch) {
  std::mt19937 rng(72);
  const int64_t kAll = 300;
  for (const Shape& sh : kShapes) {
    const Weight wt = Bf16Weight(RandomNormal(static_cast<size_t>(sh.n * sh.k), rng), sh.n, sh.k);
    const std::vector<float> x = RandomNormal(static_cast<size_t>(kAll * sh.k), rng);
    const std::vector<float> all = MatMul(Upload(x, kAll, sh.k), wt);
    for (int64_t T : {1, 7, 64}) {
      for (int64_t o : {int64_t{0}, int64_t{5}, kAll - T}) {
        const std::vector<float> part(x.begin() + o * sh.k, x.begin() + (o + T) * sh.k);
        const std::vector<float> got = MatMul(Upload(part, T, sh.k), wt);
        const std::vector<float> want(all.begin() + o * sh.n, all.begin() + (o + T) * sh.n);
        EXPECT_TRUE(AllBitEqual(got, want)) << "weight [" << sh.n << ", " << sh.k << "], rows [" << o << ", "
                                            << o + T << ") alone vs in a batch of " << kAll;
      }
    }
  }
}

// INT8 stays refused on CUDA (no integer-dot kernels there).
TEST_P(Bf16MatMul, Int8ActivationsStayRefused) {
  BackendOptions o;
  o.activations = QuantizedActivations::kInt8;
  const absl::StatusOr<std::unique_ptr<Backend>> be = CreateBackend(GetParam(), o);
  ASSERT_FALSE(be.ok());
  EXPECT_NE(be.status().message().find("int8"), std::string::npos) << be.status();
}

INSTANTIATE_TEST_SUITE_P(, Bf16MatMul, ::testing::Values(BackendKind::kCuda), BackendParamName);

}  // namespace
}  // namespace llmrt::conformance
