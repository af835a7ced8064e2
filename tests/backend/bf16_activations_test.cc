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
//  - rows bit for bit independent of the batch (T = 1, 7, 64 against rows of T = 300);
// and the routed experts' grouped GEMM on the tensor cores to the same bits for every tile size.
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
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cuda/cublaslt.h"
#include "src/backend/cuda/cuda_backend.h"
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

  // MoeExpertsGiveEveryTileSizeTheSameBits, with the mma.sync or the warpgroup-MMA kernel, BF16
  // experts under the BF16 policy or FP8 experts under the FP8 policy.
  void MoeTileSizes(bool wgmma, bool fp8);
  void ExpectBf16MoeReference(const std::vector<float>& all, const std::vector<float>& x, const std::vector<int32_t>& idx,
                              const std::vector<float>& w, const std::vector<HostMatrix>& gate,
                              const std::vector<HostMatrix>& up, const std::vector<HostMatrix>& down, int64_t K);

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

// The routed experts under the BF16 policy run the tensor-core grouped GEMM, whose tiles take up
// to 32, 64 or 128 rows of one expert (by the rows an expert gets in the pass, or forced by
// BackendOptions::device_moe_tile_rows). Four BF16 experts of hidden 256 and intermediate 128,
// top 2, 300 tokens (150 rows an expert: tiles of 128), 100 (50: tiles of 64) and 1 (tiles of 32):
//  - every tile size gives the 300-token pass the same bits (backends forced to 32, 64 and 128);
//  - a token's row is the same bits alone, in 100 tokens and in 300;
//  - the result is the float64 expert MLP of the bf16-rounded input, with silu(g) * u rounded to
//    bfloat16 before the down projection, within 2^-7 sum |w h d| (where the device's float32 g
//    and u put silu(g) * u on the other side of a rounding boundary, h moves by one bfloat16
//    step, at most 2^-7 |h|) plus the float32 bound of the three sums.
//  Under BackendOptions::device_moe_wgmma (the warpgroup-MMA kernel, on a Hopper device) the same
//  holds with its own bits; its tiles take at least 64 rows unless forced.
//  FP8 experts (128 x 128 blocks) under the FP8 policy: every tile size the kernel takes (the
//  mma.sync kernel at most 64 rows, the warpgroup kernel 128 too) gives the same bits, alone and
//  in a batch. (Their accuracy against the CPU: the FP8 goldens, CudaFp8MatchesCpu, which also
//  hold LLMRT_CUDA_MOE=wgmma to the default kernel.)
TEST_P(Bf16MatMul, MoeExpertsGiveEveryTileSizeTheSameBits) { MoeTileSizes(false, false); }
TEST_P(Bf16MatMul, MoeExpertsOnWarpgroupMmasGiveEveryTileSizeTheSameBits) { MoeTileSizes(true, false); }
TEST_P(Bf16MatMul, Fp8MoeExpertsGiveEveryTileSizeTheSameBits) { MoeTileSizes(false, true); }
TEST_P(Bf16MatMul, Fp8MoeExpertsOnWarpgroupMmasGiveEveryTileSizeTheSameBits) { MoeTileSizes(true, true); }

void Bf16MatMul::MoeTileSizes(bool wgmma, bool fp8) {
  std::mt19937 rng(73);
  const int64_t H = 256, I = 128, E = 4, K = 2, kAll = 300;
  const WeightFormatId format = fp8 ? kWeightFp8Block : kWeightBf16;
  const WeightParams params = fp8 ? WeightParams{128, 128, 0} : WeightParams{};
  std::vector<HostMatrix> gate, up, down;
  for (int64_t e = 0; e < E; ++e) {
    gate.push_back(MakeHostMatrix(format, I, H, params, rng));
    up.push_back(MakeHostMatrix(format, I, H, params, rng));
    down.push_back(MakeHostMatrix(format, H, I, params, rng));
  }
  const std::vector<float> x = RandomNormal(static_cast<size_t>(kAll * H), rng, 0.1f);
  std::vector<int32_t> idx(static_cast<size_t>(kAll * K));
  std::vector<float> w(idx.size());
  for (int64_t t = 0; t < kAll; ++t) {
    idx[t * K] = static_cast<int32_t>(t % E);
    idx[t * K + 1] = static_cast<int32_t>((t + 1 + t / 7) % E);
    if (idx[t * K + 1] == idx[t * K]) idx[t * K + 1] = static_cast<int32_t>((idx[t * K] + 1) % E);
    w[t * K] = 0.25f + static_cast<float>(rng() % 100) / 200.0f;
    w[t * K + 1] = 0.25f + static_cast<float>(rng() % 100) / 200.0f;
  }
  // Tokens [o, o + T) through backend `be`'s bank.
  const auto run = [&](Backend& be, const ExpertBank& bank, int64_t o, int64_t T) {
    Tensor tx = Must(be.Allocate(DType::kF32, {T, H}), "Allocate");
    Tensor ti = Must(be.Allocate(DType::kI32, {T, K}), "Allocate");
    Tensor tw = Must(be.Allocate(DType::kF32, {T, K}), "Allocate");
    Tensor out = Must(be.Allocate(DType::kF32, {T, H}), "Allocate");
    MustOk(be.Upload(x.data() + o * H, static_cast<size_t>(T * H) * sizeof(float), tx), "Upload");
    MustOk(be.Upload(idx.data() + o * K, static_cast<size_t>(T * K) * sizeof(int32_t), ti), "Upload");
    MustOk(be.Upload(w.data() + o * K, static_cast<size_t>(T * K) * sizeof(float), tw), "Upload");
    be.MoeExperts(tx, ti, tw, bank, out);
    MustOk(be.Synchronize(), "MoeExperts");
    std::vector<float> v(static_cast<size_t>(T * H));
    MustOk(be.Download(out, v.data(), v.size() * sizeof(float)), "Download");
    return v;
  };
  const auto bank_of = [&](Backend& be) {
    std::vector<ExpertWeights> experts(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      experts[e].gate = Must(be.PrepareWeight(gate[e].stored), "PrepareWeight");
      experts[e].up = Must(be.PrepareWeight(up[e].stored), "PrepareWeight");
      experts[e].down = Must(be.PrepareWeight(down[e].stored), "PrepareWeight");
    }
    return Must(be.PrepareExperts(std::move(experts)), "PrepareExperts");
  };
  // The tile size the last MoeExperts took.
  const auto tile_rows = [](Backend& be) {
    const auto* cuda = dynamic_cast<const CudaBackend*>(&be);
    return cuda != nullptr ? cuda->last_moe_tile_rows() : int64_t{-1};
  };
  const auto options = [&](int64_t forced) {
    BackendOptions o;
    o.activations = fp8 ? QuantizedActivations::kFp8 : QuantizedActivations::kBf16;
    o.device_moe_tile_rows = forced;
    o.device_moe_wgmma = wgmma;
    return o;
  };
  const int64_t widest = fp8 && !wgmma ? 64 : 128;  // the largest tile the kernel takes
  const std::unique_ptr<Backend> main = Must(CreateBackend(GetParam(), options(0)), "CreateBackend");
  const std::unique_ptr<ExpertBank> bank = bank_of(*main);
  const std::vector<float> all = run(*main, *bank, 0, kAll);
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(main.get()); cuda != nullptr) {
    if (wgmma && !cuda->moe_wgmma_available()) {
      ASSERT_FALSE(cuda->last_moe_wgmma()) << "the warpgroup-MMA kernel ran where it cannot";
      GTEST_SKIP() << "the warpgroup-MMA grouped GEMM needs a device of compute capability 9.0 and the sm_90a build";
    }
    ASSERT_EQ(cuda->last_moe_wgmma(), wgmma) << "the warpgroup-MMA kernel ran, or did not, against the option";
  }
  EXPECT_EQ(tile_rows(*main), widest) << "150 rows an expert";

  if (!fp8) ExpectBf16MoeReference(all, x, idx, w, gate, up, down, K);
  for (const int64_t forced : {int64_t{32}, int64_t{64}, int64_t{128}}) {
    if (forced > widest) continue;
    const std::unique_ptr<Backend> be = Must(CreateBackend(GetParam(), options(forced)), "CreateBackend");
    const std::unique_ptr<ExpertBank> b = bank_of(*be);
    EXPECT_TRUE(AllBitEqual(run(*be, *b, 0, kAll), all)) << "tiles of " << forced << " rows against the chosen size";
    EXPECT_EQ(tile_rows(*be), forced);
  }
  for (const auto& [o, T] : {std::pair<int64_t, int64_t>{0, 1}, {150, 1}, {kAll - 1, 1}, {37, 100}}) {
    const std::vector<float> got = run(*main, *bank, o, T);
    EXPECT_EQ(tile_rows(*main), T == 100 || wgmma ? 64 : 32) << T << " tokens";
    EXPECT_TRUE(AllBitEqual(got, std::vector<float>(all.begin() + o * H, all.begin() + (o + T) * H)))
        << "tokens [" << o << ", " << o + T << ") alone vs in a batch of " << kAll;
  }
}

// The BF16 policy's routed experts `all` (x's tokens through the two experts each names in idx,
// weighted by w) against the float64 expert MLP of the bf16-rounded input, with silu(g) * u
// rounded to bfloat16 before the down projection (MoeExpertsGiveEveryTileSizeTheSameBits).
void Bf16MatMul::ExpectBf16MoeReference(const std::vector<float>& all, const std::vector<float>& x,
                                        const std::vector<int32_t>& idx, const std::vector<float>& w,
                                        const std::vector<HostMatrix>& gate, const std::vector<HostMatrix>& up,
                                        const std::vector<HostMatrix>& down, int64_t K) {
  const int64_t I = gate[0].stored.rows, H = gate[0].stored.cols, kAll = static_cast<int64_t>(idx.size()) / K;
  // The reference and its bound, token by token.
  std::vector<double> want(all.size(), 0.0), tol(all.size(), 1e-30);
  const std::vector<float> xr = RoundToBf16(x);
  for (int64_t t = 0; t < kAll; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = idx[t * K + k];
      // h_j = bf16(silu(g_j) u_j) and how far the device's may lie from it: one bfloat16 step
      // (2^-7 |h|) plus what the float32 sums of g and u (each within (H + 8) 2u sum |x w|) and
      // silu's float32 evaluation move silu(g) u by (|silu'| < 1.1).
      std::vector<double> h(static_cast<size_t>(I)), dh(static_cast<size_t>(I));
      for (int64_t j = 0; j < I; ++j) {
        double g = 0, u = 0, mg = 0, mu = 0;
        for (int64_t c = 0; c < H; ++c) {
          const double xv = xr[t * H + c];
          g += xv * gate[e].dense[j * H + c];
          u += xv * up[e].dense[j * H + c];
          mg += std::fabs(xv * gate[e].dense[j * H + c]);
          mu += std::fabs(xv * up[e].dense[j * H + c]);
        }
        const double silu = g / (1.0 + std::exp(-g)), exact = silu * u;
        h[j] = static_cast<double>(RoundToBf16({static_cast<float>(exact)})[0]);
        dh[j] = 0x1p-7 * std::fabs(exact) + 1.1 * (H + 8) * 2 * kU * mg * std::fabs(u) +
                std::fabs(silu) * (H + 8) * 2 * kU * mu + 16 * kU * std::fabs(exact);
      }
      for (int64_t n = 0; n < H; ++n) {
        double y = 0, mag = 0, moved = 0;
        for (int64_t j = 0; j < I; ++j) {
          const double d = down[e].dense[n * I + j];
          y += h[j] * d;
          mag += std::fabs(h[j] * d);
          moved += dh[j] * std::fabs(d);
        }
        want[t * H + n] += w[t * K + k] * y;
        tol[t * H + n] += std::fabs(w[t * K + k]) * (moved + (I + 8) * 2 * kU * mag);
      }
    }
    for (int64_t n = 0; n < H; ++n) tol[t * H + n] += (K + 2) * kU * std::fabs(want[t * H + n]);
  }
  EXPECT_TRUE(AllNear(all, want, tol)) << kAll << " tokens";
}

// A tile size the grouped GEMM has no instance for is refused at creation, naming the option.
TEST_P(Bf16MatMul, AnUnknownMoeTileSizeIsRefused) {
  for (const int64_t rows : {16, 48, 256}) {
    BackendOptions o;
    o.device_moe_tile_rows = rows;
    const absl::StatusOr<std::unique_ptr<Backend>> be = CreateBackend(GetParam(), o);
    ASSERT_FALSE(be.ok()) << rows;
    EXPECT_EQ(be.status().code(), absl::StatusCode::kInvalidArgument) << be.status();
    EXPECT_NE(be.status().message().find("device_moe_tile_rows"), std::string::npos) << be.status();
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
