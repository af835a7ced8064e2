// RmsNorm, HeadRmsNorm, LayerNorm against double references.
//
// Tolerance: the ops are "in float32", so a backend may sum the D squares (or values) of a row
// in float32 in any order: relative error up to about D u in the sum, hence in the mean and
// (halved by the square root) in the inverse norm; then a handful of rounded operations
// (square root, reciprocal, two or three products, LayerNorm's subtraction and bias add). We
// allow (D + 16) u relative to the magnitudes involved: |x_i * inv * w_i| for the RMS norms,
// (|x_i| + mean|x|) * inv * |w_i| + |b_i| for LayerNorm (the subtraction of the mean cancels).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

class NormOps : public BackendTest {};

// Columns outside [1, 1 + cols) of a padded parent (F32View) still hold their NaN sentinels.
::testing::AssertionResult PaddingIntact(const std::vector<float>& parent, int64_t ld, int64_t cols) {
  for (size_t i = 0; i < parent.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % ld;
    if (c >= 1 && c < 1 + cols) continue;
    if (!std::isnan(parent[i])) return ::testing::AssertionFailure() << "column " << c << " outside the view was written";
  }
  return ::testing::AssertionSuccess();
}

// RMS norm of each `group`-wide block of each row: out = x * rsqrt(mean(x^2) + eps) * w.
void RmsReference(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t D, int64_t group,
                  double eps, std::vector<double>* want, std::vector<double>* tol) {
  want->assign(x.size(), 0.0);
  tol->assign(x.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t g = 0; g < D; g += group) {
      const float* xi = x.data() + t * D + g;
      double ss = 0;
      for (int64_t i = 0; i < group; ++i) ss += static_cast<double>(xi[i]) * xi[i];
      const double inv = 1.0 / std::sqrt(ss / group + eps);
      for (int64_t i = 0; i < group; ++i) {
        const double v = xi[i] * inv * w[i];
        (*want)[t * D + g + i] = v;
        (*tol)[t * D + g + i] = (group + 16) * kU * std::fabs(v);
      }
    }
  }
}

// Rows of x: random normal, one all-zero row (eps alone keeps it finite: out = 0 exactly).
std::vector<float> NormInput(int64_t T, int64_t D, float shift, std::mt19937& rng) {
  std::vector<float> x = RandomNormal(static_cast<size_t>(T * D), rng, 2.0f);
  for (float& v : x) v += shift;
  if (T >= 3) std::fill(x.begin() + D, x.begin() + 2 * D, 0.0f);
  return x;
}

// x [T, D] contiguous or a misaligned column view; out separate or x itself (both allowed).
TEST_P(NormOps, RmsNorm) {
  std::mt19937 rng(10);
  const float eps = 1e-6f;
  for (bool bf16 : {false, true}) {
    for (int64_t T : {1, 3}) {
      for (int64_t D : {1, 3, 7, 33, 130, 7168}) {  // 7168: Kimi K2's hidden, rows past the threads
        for (int64_t pad : {0, 3}) {
          for (bool in_place : {false, true}) {
            const std::vector<float> x = NormInput(T, D, 0.0f, rng);
            std::vector<float> w = RandomNormal(static_cast<size_t>(D), rng);
            if (bf16) w = RoundToBf16(w);
            std::vector<double> want, tol;
            RmsReference(x, w, T, D, D, eps, &want, &tol);
            Tensor parent;
            Tensor tx = F32View(x, T, D, pad, &parent);
            Tensor out = in_place ? tx : NewTensor(DType::kF32, {T, D});
            be().RmsNorm(tx, Vector(w, bf16), eps, out);
            const std::vector<float> got = in_place ? ColumnBlock(ReadF32(parent), D + pad, pad > 0 ? 1 : 0, D) : ReadF32(out);
            EXPECT_TRUE(AllNear(got, want, tol)) << (bf16 ? "BF16" : "F32") << " T=" << T << " D=" << D << " pad=" << pad
                                                 << " in_place=" << in_place;
            if (pad > 0) {
              EXPECT_TRUE(PaddingIntact(ReadF32(parent), D + pad, D));
            }
          }
        }
      }
    }
  }
}

// The RMS norm of every head_dim-wide group of a row with one shared weight [head_dim].
TEST_P(NormOps, HeadRmsNorm) {
  std::mt19937 rng(11);
  const float eps = 1e-5f;
  for (bool bf16 : {false, true}) {
    for (int64_t T : {1, 3}) {
      for (int64_t head_dim : {1, 3, 7, 33}) {
        for (int64_t groups : {1, 3}) {
          for (int64_t pad : {0, 2}) {
            for (bool in_place : {false, true}) {
              const int64_t D = head_dim * groups;
              const std::vector<float> x = NormInput(T, D, 0.0f, rng);
              std::vector<float> w = RandomNormal(static_cast<size_t>(head_dim), rng);
              if (bf16) w = RoundToBf16(w);
              std::vector<double> want, tol;
              RmsReference(x, w, T, D, head_dim, eps, &want, &tol);
              Tensor parent;
              Tensor tx = F32View(x, T, D, pad, &parent);
              Tensor out = in_place ? tx : NewTensor(DType::kF32, {T, D});
              be().HeadRmsNorm(tx, head_dim, Vector(w, bf16), eps, out);
              const std::vector<float> got =
                  in_place ? ColumnBlock(ReadF32(parent), D + pad, pad > 0 ? 1 : 0, D) : ReadF32(out);
              EXPECT_TRUE(AllNear(got, want, tol)) << (bf16 ? "BF16" : "F32") << " T=" << T << " head_dim=" << head_dim
                                                   << " groups=" << groups << " pad=" << pad << " in_place=" << in_place;
              if (pad > 0) {
              EXPECT_TRUE(PaddingIntact(ReadF32(parent), D + pad, D));
            }
            }
          }
        }
      }
    }
  }
}

// nn.LayerNorm: (x - mean) * rsqrt(biased var + eps) * w + b. Rows are shifted by +3 so the
// mean subtraction cancels.
TEST_P(NormOps, LayerNorm) {
  std::mt19937 rng(12);
  const float eps = 1e-5f;
  for (bool bf16 : {false, true}) {
    for (int64_t T : {1, 3}) {
      for (int64_t D : {1, 3, 7, 33, 130, 7168}) {  // 7168: Kimi K2's hidden, rows past the threads
        for (bool in_place : {false, true}) {
          const std::vector<float> x = NormInput(T, D, 3.0f, rng);
          std::vector<float> w = RandomNormal(static_cast<size_t>(D), rng), b = RandomNormal(static_cast<size_t>(D), rng);
          if (bf16) {
            w = RoundToBf16(w);
            b = RoundToBf16(b);
          }
          std::vector<double> want(x.size()), tol(x.size());
          for (int64_t t = 0; t < T; ++t) {
            const float* xi = x.data() + t * D;
            double sum = 0, abs_sum = 0;
            for (int64_t i = 0; i < D; ++i) {
              sum += xi[i];
              abs_sum += std::fabs(xi[i]);
            }
            const double mean = sum / D;
            double var = 0;
            for (int64_t i = 0; i < D; ++i) var += (xi[i] - mean) * (xi[i] - mean);
            const double inv = 1.0 / std::sqrt(var / D + eps);
            for (int64_t i = 0; i < D; ++i) {
              want[t * D + i] = (xi[i] - mean) * inv * w[i] + b[i];
              tol[t * D + i] = (D + 16) * kU * ((std::fabs(xi[i]) + abs_sum / D) * inv * std::fabs(w[i]) + std::fabs(b[i]));
            }
          }
          Tensor tx = F32(x, {T, D});
          Tensor out = in_place ? tx : NewTensor(DType::kF32, {T, D});
          be().LayerNorm(tx, Vector(w, bf16), Vector(b, bf16), eps, out);
          EXPECT_TRUE(AllNear(ReadF32(out), want, tol))
              << (bf16 ? "BF16" : "F32") << " T=" << T << " D=" << D << " in_place=" << in_place;
        }
      }
    }
  }
}

LLMRT_BACKEND_SUITE(NormOps);

}  // namespace
}  // namespace llmrt::conformance
