// Rope: the rotary embedding, interleaved (GPT-J / DeepSeek) and NeoX (rotate_half), with a
// dims offset (MLA's q_rope after q_nope), partial rotary (GLM-4.5: half < head_dim / 2), several
// heads, column views, YaRN-like inverse frequencies and attention_factor != 1.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

class RopeOps : public BackendTest {};

// YaRN-shaped inverse frequencies (src/model/rope.cc computes the real ones): base^(-2i/dim)
// blended towards the interpolated base^(-2i/dim) / factor over a linear ramp.
std::vector<float> YarnLikeInvFreq(int64_t half, double factor) {
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double extrap = std::pow(10000.0, -2.0 * i / (2.0 * half));
    const double ramp = half > 1 ? std::clamp((i - 0.25 * half) / (0.5 * half), 0.0, 1.0) : 0.0;
    f[i] = static_cast<float>(extrap * (1 - ramp) + extrap / factor * ramp);
  }
  return f;
}

struct RopeCase {
  int64_t heads, head_dim, offset, half;
  bool interleaved;
  float attention_factor;
  int64_t pad;  // > 0: x is a column view
};

// Tolerance: the reference takes the angle as transformers does (float32 position times float32
// inv_freq, one rounding) and cos/sin in double; a backend's cos/sin are within a couple of ulp,
// then two products and an add: 8 u of af * (|x1| + |x2|). A backend computing the angle more
// exactly differs by up to u |angle| in it, so we add |angle| u: (8 + |angle|) u af (|x1| + |x2|).
TEST_P(RopeOps, RotatesTheDocumentedPairs) {
  std::mt19937 rng(20);
  const std::vector<RopeCase> cases = {
      {1, 64, 0, 32, true, 1.0f, 0},     // DSA indexer key: one head, full width
      {3, 14, 8, 3, true, 1.3689f, 0},   // MLA q: rope after nope, YaRN mscale
      {3, 14, 8, 3, false, 1.3689f, 2},  // the same, NeoX, column view
      {2, 576, 512, 32, true, 1.2f, 0},  // MLA compressed kv: k_rope at column 512 of one head
      {3, 10, 0, 2, false, 1.0f, 0},     // GLM-4.5 partial rotary: half < head_dim / 2
      {2, 7, 1, 3, false, 0.75f, 3},     // odd sizes, column view
      {2, 7, 1, 2, true, 1.0f, 0},
  };
  for (const RopeCase& c : cases) {
    for (const std::vector<int32_t>& pos : std::vector<std::vector<int32_t>>{{0}, {4099}, {0, 1, 17, 130, 4099}}) {
      const int64_t T = static_cast<int64_t>(pos.size()), W = c.heads * c.head_dim;
      const std::vector<float> x = RandomNormal(static_cast<size_t>(T * W), rng);
      const std::vector<float> inv_freq = YarnLikeInvFreq(c.half, 40.0);
      RopeTable rope;
      rope.half = c.half;
      rope.attention_factor = c.attention_factor;
      rope.inv_freq = F32(inv_freq, {c.half});
      Tensor parent;
      Tensor tx = F32View(x, T, W, c.pad, &parent);
      be().Rope(tx, c.heads, c.head_dim, c.offset, rope, c.interleaved, I32(pos));
      const int64_t ld = W + c.pad;
      const std::vector<float> all = ReadF32(parent);
      const std::vector<float> got = ColumnBlock(all, ld, c.pad > 0 ? 1 : 0, W);
      std::vector<double> want(x.begin(), x.end()), tol(x.size(), 0.0);  // untouched dims: exact
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < c.heads; ++h) {
          for (int64_t i = 0; i < c.half; ++i) {
            const float angle = static_cast<float>(pos[t]) * inv_freq[i];
            const double co = std::cos(static_cast<double>(angle)) * c.attention_factor;
            const double si = std::sin(static_cast<double>(angle)) * c.attention_factor;
            const int64_t base = t * W + h * c.head_dim + c.offset;
            const int64_t a = base + (c.interleaved ? 2 * i : i), b = base + (c.interleaved ? 2 * i + 1 : i + c.half);
            const double x1 = x[a], x2 = x[b];
            want[a] = x1 * co - x2 * si;
            want[b] = x2 * co + x1 * si;
            tol[a] = tol[b] = (8 + std::fabs(angle)) * kU * c.attention_factor * (std::fabs(x1) + std::fabs(x2));
          }
        }
      }
      EXPECT_TRUE(AllNear(got, want, tol)) << "heads=" << c.heads << " head_dim=" << c.head_dim << " offset=" << c.offset
                                           << " half=" << c.half << " interleaved=" << c.interleaved
                                           << " af=" << c.attention_factor << " pad=" << c.pad << " T=" << T;
      for (size_t i = 0; i < all.size() && c.pad > 0; ++i) {
        const int64_t col = static_cast<int64_t>(i) % ld;
        if (col < 1 || col >= 1 + W) {
          ASSERT_TRUE(std::isnan(all[i])) << "column " << col << " outside the view written";
        }
      }
    }
  }
}

LLMRT_BACKEND_SUITE(RopeOps);

}  // namespace
}  // namespace llmrt::conformance
