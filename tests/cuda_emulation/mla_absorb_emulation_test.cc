// MLA's absorbed projections on the device (kernels/mla_absorb_kernels.cuh) run on the host, over
// the launchers' own grids: every tile size (1, 4 and 16 tokens a block, as T picks them) must give
// each output the bits of its own arithmetic,
// written out here in the same float operations: the query's absorption as the CPU's axpy order
// (a sequential fmaf over r), the value's projection as a warp's lane-strided fmaf chains and
// butterfly sum. So a row's result depends neither on its batch nor on the tile it shares.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "kernels/mla_absorb_kernels.cuh"

namespace llmrt::cuda {
namespace {

struct Shape {
  int64_t heads, nope, rope, v, L;
};

// kv_b [heads * (nope + v), L] in F32 or BF16 (its values as floats alongside).
struct KvB {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  WeightRef ref{};
  float At(int64_t i) const { return ref.type == kElemBf16 ? Bf16ToF32(bf16[i]) : f32[i]; }
};

KvB MakeKvB(const Shape& s, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  KvB w;
  const int64_t n = s.heads * (s.nope + s.v) * s.L;
  for (int64_t i = 0; i < n; ++i) {
    const float x = normal(rng) * 0.05f;
    w.f32.push_back(x);
    w.bf16.push_back(F32ToBf16(x));
  }
  w.ref = WeightRef{bf16 ? static_cast<const void*>(w.bf16.data()) : w.f32.data(), bf16 ? kElemBf16 : kElemF32,
                    s.heads * (s.nope + s.v), s.L, nullptr, 0, 0, 0};
  return w;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The launchers' grids (mab::AbsorbGrid / ProjectGrid), for the tile they choose by T
// (kTokens: TokensPerBlock(rows)).
template <int kTokens>
void RunAbsorb(const Shape& s, const ConstMat& q, const KvB& w, const MutMat& q_lat) {
  ASSERT_EQ(mab::TokensPerBlock(q.rows), kTokens);
  const mab::Grid g = mab::AbsorbGrid(q.rows, s.heads, s.L);
  emulation::RunGrid({g.x, g.y, g.z}, mab::kThreads, 0, [&] {
    mab::AbsorbKernel<kTokens>(q, w.ref, s.nope, s.nope + s.rope, s.nope + s.v, s.L, q_lat);
  });
}

template <int kTokens>
void RunProject(const Shape& s, const ConstMat& o_lat, const KvB& w, const MutMat& out) {
  ASSERT_EQ(mab::TokensPerBlock(o_lat.rows), kTokens);
  const mab::Grid g = mab::ProjectGrid(o_lat.rows, s.heads, s.v);
  emulation::RunGrid({g.x, g.y, g.z}, mab::kThreads, static_cast<size_t>(mab::ProjectSharedBytes(kTokens, s.L)),
                     [&] { mab::ProjectKernel<kTokens>(o_lat, w.ref, s.nope, s.v, s.nope + s.v, s.L, out); });
}

// Heads of Kimi K2's shape in small (nope 16 + rope 8, v 24 over a latent of 72: a partial block
// of 256 columns and of 32 output columns), a latent wider than one block (300) under a nope of
// 80 (two chunks of staged query values), and token counts
// of 1, 3 and 17 (partial tiles of every size, two tiles of 16); rows wider than the heads'.
TEST(MlaAbsorbEmulated, EveryTileGivesEachTokenItsOwnBits) {
  std::mt19937 rng(61);
  std::normal_distribution<float> normal;
  for (const Shape& s : {Shape{3, 16, 8, 24, 72}, Shape{2, 80, 4, 40, 300}}) {
    for (const bool bf16 : {false, true}) {
      const KvB w = MakeKvB(s, bf16, rng);
      const int64_t qw = s.nope + s.rope, blk = s.nope + s.v;
      for (const int64_t T : {int64_t{1}, int64_t{3}, int64_t{17}}) {
        SCOPED_TRACE(::testing::Message() << "heads " << s.heads << " nope " << s.nope << " v " << s.v << " L " << s.L
                                          << (bf16 ? " BF16" : " F32") << " T " << T);
        const int64_t q_ld = s.heads * qw + 5, lat_ld = s.heads * s.L + 3, out_ld = s.heads * s.v + 2;
        std::vector<float> q(static_cast<size_t>(T * q_ld)), o_lat(static_cast<size_t>(T * lat_ld));
        for (float& x : q) x = normal(rng);
        for (float& x : o_lat) x = normal(rng);
        // The references, in the kernels' own operations.
        // (Two rows past T, which must stay as they are.)
        std::vector<float> want_lat(static_cast<size_t>((T + 2) * lat_ld), -1.0f),
            want_out(static_cast<size_t>((T + 2) * out_ld), -1.0f);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t h = 0; h < s.heads; ++h) {
            for (int64_t j = 0; j < s.L; ++j) {
              float acc = 0.0f;
              for (int64_t r = 0; r < s.nope; ++r) acc = std::fma(q[t * q_ld + h * qw + r], w.At((h * blk + r) * s.L + j), acc);
              want_lat[t * lat_ld + h * s.L + j] = acc;
            }
            for (int64_t j = 0; j < s.v; ++j) {
              float lane[32] = {};
              for (int64_t k = 0; k < s.L; ++k) {
                lane[k % 32] = std::fma(w.At((h * blk + s.nope + j) * s.L + k), o_lat[t * lat_ld + h * s.L + k], lane[k % 32]);
              }
              for (int o = 16; o > 0; o >>= 1) {  // the butterfly: every lane ends with the same sum
                float next[32];
                for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
                std::memcpy(lane, next, sizeof(lane));
              }
              want_out[t * out_ld + h * s.v + j] = lane[0];
            }
          }
        }
        // The tile the launchers choose for T: 1 token, 4 (3 of them), 16 (a whole tile and one).
        std::vector<float> lat(want_lat.size(), -1.0f), out(want_out.size(), -1.0f);
        const ConstMat qm{q.data(), T, s.heads * qw, q_ld}, om{o_lat.data(), T, s.heads * s.L, lat_ld};
        const MutMat lm{lat.data(), T, s.heads * s.L, lat_ld}, outm{out.data(), T, s.heads * s.v, out_ld};
        switch (mab::TokensPerBlock(T)) {
          case 1: RunAbsorb<1>(s, qm, w, lm); RunProject<1>(s, om, w, outm); break;
          case 4: RunAbsorb<4>(s, qm, w, lm); RunProject<4>(s, om, w, outm); break;
          default: RunAbsorb<16>(s, qm, w, lm); RunProject<16>(s, om, w, outm); break;
        }
        int64_t bad_lat = 0, bad_out = 0;
        for (size_t i = 0; i < lat.size(); ++i) bad_lat += !SameBits(lat[i], want_lat[i]);
        for (size_t i = 0; i < out.size(); ++i) bad_out += !SameBits(out[i], want_out[i]);
        EXPECT_EQ(bad_lat, 0) << "absorbed queries (and the rows' gaps and the rows past T left alone)";
        EXPECT_EQ(bad_out, 0) << "projected values (and the rows' gaps and the rows past T left alone)";
      }
    }
  }
  EXPECT_EQ(mab::TokensPerBlock(1), 1);
  EXPECT_EQ(mab::TokensPerBlock(4), 4);
  EXPECT_EQ(mab::TokensPerBlock(5), 16);
}

}  // namespace
}  // namespace llmrt::cuda
