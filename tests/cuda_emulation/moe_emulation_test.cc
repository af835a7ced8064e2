// The CUDA backend's mixture-of-experts kernels (kernels/moe_kernels.cuh) run on the host
// (cuda_emulation.h: each block's threads as fibers, warp shuffles, __match_any_sync and
// atomics emulated): noaux_tc routing against the CPU's rules written out here in the same float
// operations (so the expert ids and weights must match bit for bit), the permutation by expert
// against a stable sort, and the combination against the (expert, weight, slot) order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "kernels/moe_kernels.cuh"

namespace llmrt::cuda {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Rank(float v) { return std::isnan(v) ? -INFINITY : v; }
bool Before(float v1, int32_t i1, float v2, int32_t i2) { return v1 > v2 || (v1 == v2 && i1 < i2); }

// noaux_tc routing of one token, as src/backend/cpu/moe.cc defines it: choices sigmoid + bias
// (NaN ranks last), groups scored by their two best choices, all but the topk_group best groups
// masked, the K best choices (ties to the lower expert), weights the sigmoids of the chosen,
// normalized, scaled.
void ReferenceRoute(const float* logits, const std::vector<float>& bias, int64_t E, int64_t K, int64_t n_group,
                    int64_t topk_group, bool norm, float scaling, int32_t* idx, float* weights) {
  std::vector<float> choice(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) choice[e] = Rank(Sigmoid(logits[e]) + (bias.empty() ? 0.0f : bias[e]));
  if (n_group > 1) {
    const int64_t per = E / n_group;
    std::vector<float> gs(static_cast<size_t>(n_group));
    for (int64_t g = 0; g < n_group; ++g) {
      std::vector<float> c(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(c.begin(), c.end(), std::greater<float>());
      gs[g] = Rank(per >= 2 ? c[0] + c[1] : c[0]);
    }
    for (int64_t g = 0; g < n_group; ++g) {
      int64_t rank = 0;
      for (int64_t o = 0; o < n_group; ++o) rank += Before(gs[o], static_cast<int32_t>(o), gs[g], static_cast<int32_t>(g));
      if (rank >= topk_group) std::fill(choice.begin() + g * per, choice.begin() + (g + 1) * per, -INFINITY);
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return Before(choice[a], a, choice[b], b); });
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    idx[k] = order[k];
    weights[k] = Sigmoid(logits[order[k]]);
    sum += weights[k];
  }
  for (int64_t k = 0; k < K; ++k) {
    if (norm) weights[k] /= (sum + 1e-20f);
    weights[k] *= scaling;
  }
}

struct RouteCase {
  int64_t T, E, K, n_group, topk_group;
  bool bias, norm;
};

TEST(MoeKernelsEmulated, RouteIsTheCpuRouting) {
  std::mt19937 rng(81);
  std::normal_distribution<float> normal;
  // Kimi K2's grouping in small (8 groups, 4 kept, top-8 of 64), no groups, an expert count that
  // is no multiple of 32, and a partial last block of tokens (4 per block).
  for (const RouteCase& c : {RouteCase{9, 64, 8, 8, 4, true, true}, RouteCase{5, 16, 4, 1, 1, false, true},
                             RouteCase{6, 40, 6, 1, 1, true, false}, RouteCase{3, 256, 8, 8, 4, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " E " << c.E << " K " << c.K << " groups " << c.n_group);
    std::vector<float> logits(static_cast<size_t>(c.T * c.E));
    for (float& x : logits) x = normal(rng);
    // Ties (equal logits), and a token whose logits are all NaN (it still routes to K experts).
    for (int64_t e = 0; e + 1 < c.E; e += 7) logits[e + 1] = logits[e];
    for (int64_t e = 0; e < c.E; ++e) logits[(c.T - 1) * c.E + e] = NAN;
    std::vector<float> bias;
    if (c.bias) {
      for (int64_t e = 0; e < c.E; ++e) bias.push_back(0.1f * normal(rng));
    }
    std::vector<float> scratch(logits.size()), weights(static_cast<size_t>(c.T * c.K), -1.0f);
    std::vector<int32_t> idx(static_cast<size_t>(c.T * c.K), -1);
    RouteArgs a{};
    a.logits = logits.data();
    a.T = c.T;
    a.E = c.E;
    a.K = c.K;
    a.n_group = c.n_group;
    a.topk_group = c.topk_group;
    a.norm_topk_prob = c.norm;
    a.routed_scaling_factor = 2.5f;
    a.bias = c.bias ? bias.data() : nullptr;
    a.bias_type = kElemF32;
    a.scratch = scratch.data();
    a.idx = idx.data();
    a.idx_ld = c.K;
    a.weights = weights.data();
    a.weights_ld = c.K;
    emulation::RunGrid({BlocksFor(c.T, moe::kRouteWarps), 1, 1}, 32 * moe::kRouteWarps, 0,
                       [&] { moe::RouteKernel(a); });
    for (int64_t t = 0; t < c.T; ++t) {
      std::vector<int32_t> want_idx(static_cast<size_t>(c.K));
      std::vector<float> want_w(static_cast<size_t>(c.K));
      ReferenceRoute(logits.data() + t * c.E, bias, c.E, c.K, c.n_group, c.topk_group, c.norm, 2.5f, want_idx.data(),
                     want_w.data());
      for (int64_t k = 0; k < c.K; ++k) {
        EXPECT_EQ(idx[t * c.K + k], want_idx[k]) << "token " << t << " slot " << k;
        const float got = weights[t * c.K + k], want = want_w[k];
        EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
            << "token " << t << " slot " << k << ": " << got << ", want " << want;
      }
    }
  }
}

// Runs the permutation of the pairs idx [T][K] over E experts into tiles of tile_rows and checks
// it: rows by expert, each expert's pairs in (token, slot) order; tiles of at most tile_rows rows
// of one expert each, in expert order, the first max_tiles of them where the table is shorter
// (tile_count then max_tiles). Returns the arguments (for a second run).
PermuteArgs CheckPermute(const std::vector<int32_t>& idx, int64_t T, int64_t K, int64_t E, int64_t tile_rows,
                         int64_t max_tiles, std::vector<std::vector<int32_t>>& store) {
  const int64_t P = T * K;
  store.assign(7, {});
  store[0].assign(static_cast<size_t>(P), -5);
  store[1].assign(static_cast<size_t>(P), -5);
  store[2].assign(static_cast<size_t>(2 * E), 0);
  for (int i = 3; i < 6; ++i) store[i].assign(static_cast<size_t>(max_tiles), -5);
  store[6].assign(1, -5);
  std::vector<int32_t>& perm_token = store[0];
  std::vector<int32_t>& perm_pos = store[1];
  std::vector<int32_t>& te = store[3];
  std::vector<int32_t>& r0 = store[4];
  std::vector<int32_t>& r1 = store[5];
  PermuteArgs a{};
  a.idx = idx.data();
  a.idx_ld = K;
  a.T = T;
  a.K = K;
  a.E = E;
  a.perm_token = perm_token.data();
  a.perm_pos = perm_pos.data();
  a.counts = store[2].data();
  a.tile_expert = te.data();
  a.tile_row0 = r0.data();
  a.tile_row1 = r1.data();
  a.tile_count = store[6].data();
  a.max_tiles = max_tiles;
  a.tile_rows = tile_rows;
  int32_t err = 0;
  emulation::RunGrid({1, 1, 1}, moe::kPermuteThreads, 0, [&] { moe::PermuteKernel(a, &err); });
  EXPECT_EQ(err, 0);
  std::vector<int64_t> pairs(static_cast<size_t>(P));
  std::iota(pairs.begin(), pairs.end(), 0);
  std::stable_sort(pairs.begin(), pairs.end(), [&](int64_t x, int64_t y) { return idx[x] < idx[y]; });
  for (int64_t r = 0; r < P; ++r) {
    EXPECT_EQ(perm_pos[pairs[r]], r) << "pair " << pairs[r];
    EXPECT_EQ(perm_token[r], pairs[r] / K) << "row " << r;
  }
  const int32_t step = static_cast<int32_t>(tile_rows);
  int32_t tiles = 0, row = 0;
  for (int32_t e = 0; e < E; ++e) {
    const int32_t n = static_cast<int32_t>(std::count(idx.begin(), idx.end(), e));
    for (int32_t s = 0; s < n; s += step, ++tiles) {
      if (tiles >= max_tiles) continue;
      EXPECT_EQ(te[tiles], e);
      EXPECT_EQ(r0[tiles], row + s);
      EXPECT_EQ(r1[tiles], row + std::min(s + step, n));
    }
    row += n;
  }
  EXPECT_EQ(store[6][0], std::min<int64_t>(tiles, max_tiles));
  return a;
}

TEST(MoeKernelsEmulated, PermuteSortsPairsByExpertStably) {
  std::mt19937 rng(82);
  const int64_t T = 45, K = 4, E = 9;  // 180 pairs: several warp rounds, experts over a tile
  std::vector<int32_t> idx(static_cast<size_t>(T * K));
  for (int32_t& e : idx) e = static_cast<int32_t>(rng() % E);
  for (int64_t i = 0; i < 140; ++i) idx[i] = 3;  // expert 3 gets more than one tile of every size
  // Tiles of at most 32 rows (every grouped kernel), 64 and 128 (the tensor-core kernel).
  for (const int64_t tile_rows : {kGemmTileRows, int64_t{64}, kGemmWideTileRows}) {
    SCOPED_TRACE(::testing::Message() << "tiles of " << tile_rows);
    std::vector<std::vector<int32_t>> store;
    PermuteArgs a = CheckPermute(idx, T, K, E, tile_rows, 32, store);
    // An expert id outside the bank: reported, and its pair has no row.
    std::vector<int32_t> bad = idx;
    bad[7] = static_cast<int32_t>(E);
    a.idx = bad.data();
    int32_t err = 0;
    emulation::RunGrid({1, 1, 1}, moe::kPermuteThreads, 0, [&] { moe::PermuteKernel(a, &err); });
    EXPECT_EQ(err, kErrExpert);
    EXPECT_EQ(store[1][7], -1);
  }
}

// More experts than the block's threads (each thread lays out a run of 2 to 5, the last run cut
// short where E is not a multiple; Kimi K2's 384 take one each), many empty, a few with several
// tiles, the cursors in shared memory (up to kPermuteSharedExperts, 4,096) and in global memory
// (past it); the tile table as large as the backend sizes it (ceil(P / tile) + min(E, P)), and
// shorter than the tiles.
TEST(MoeKernelsEmulated, PermuteLaysOutMoreExpertsThanThreads) {
  std::mt19937 rng(84);
  const int64_t T = 300, K = 8, P = T * K;
  for (const int64_t E : {int64_t{1025}, int64_t{2100}, int64_t{2101}, int64_t{4096}, int64_t{4097}, int64_t{5000}}) {
    SCOPED_TRACE(::testing::Message() << E << " experts");
    std::vector<int32_t> idx(static_cast<size_t>(P));
    for (int32_t& e : idx) e = static_cast<int32_t>(rng() % (E / 3)) * 3;  // every third expert
    for (int64_t i = 0; i < 200; ++i) idx[static_cast<size_t>(i * 5)] = static_cast<int32_t>(E - 1);  // 7 tiles
    std::vector<std::vector<int32_t>> store;
    CheckPermute(idx, T, K, E, 32, std::min(P, (P + 31) / 32 + std::min(E, P)), store);
    // A table shorter than the tiles: its first entries, and tile_count its length.
    CheckPermute(idx, T, K, E, 32, 40, store);
  }
}

TEST(MoeKernelsEmulated, CombineSumsInExpertWeightSlotOrder) {
  std::mt19937 rng(83);
  std::normal_distribution<float> normal;
  const int64_t T = 3, K = 5, cols = 300, P = T * K;
  // Token 0 names expert 2 twice (ordered by weight), token 2 has a pair without a row.
  const std::vector<int32_t> idx = {2, 7, 2, 0, 5, 1, 3, 9, 4, 6, 8, 0, 2, 4, 6};
  std::vector<float> w(static_cast<size_t>(P)), y(static_cast<size_t>(P * cols)), out(static_cast<size_t>(T * cols));
  for (float& x : w) x = normal(rng);
  for (float& x : y) x = normal(rng);
  std::vector<int32_t> perm_pos(static_cast<size_t>(P));
  std::iota(perm_pos.begin(), perm_pos.end(), 0);
  std::shuffle(perm_pos.begin(), perm_pos.end(), rng);
  perm_pos[2 * K + 3] = -1;
  emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 256, 0, [&] {
    moe::CombineKernel(idx.data(), K, ConstMat{w.data(), T, K, K}, perm_pos.data(), K,
                       ConstMat{y.data(), P, cols, cols}, MutMat{out.data(), T, cols, cols});
  });
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t> order(static_cast<size_t>(K));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const int32_t ea = idx[t * K + a], eb = idx[t * K + b];
      const float wa = w[t * K + a], wb = w[t * K + b];
      return ea != eb ? ea < eb : (wa != wb ? wa < wb : a < b);
    });
    for (int64_t j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (int64_t k : order) {
        const int32_t r = perm_pos[t * K + k];
        if (r >= 0) acc += w[t * K + k] * y[r * cols + j];
      }
      ASSERT_EQ(out[t * cols + j], acc) << "token " << t << " column " << j;
    }
  }
}

}  // namespace
}  // namespace llmrt::cuda
