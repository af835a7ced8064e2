// MoeRoute (noaux_tc routing) and MoeExperts (sparse SwiGLU experts of any weight format).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

class MoeOps : public BackendTest {};

// ---- MoeRoute ----

struct Routed {
  std::vector<int32_t> idx;  // [k], sorted by expert
  std::vector<double> weight;
};

// The router's output of one token sorted by expert (the order of the k slots is not part of
// the contract; torch.topk(sorted=False) leaves it open too).
std::vector<Routed> SortByExpert(const std::vector<int32_t>& idx, const std::vector<float>& w, int64_t T, int64_t K) {
  std::vector<Routed> out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t> order(static_cast<size_t>(K));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[t * K + a] < idx[t * K + b]; });
    for (int64_t k : order) {
      out[t].idx.push_back(idx[t * K + k]);
      out[t].weight.push_back(w[t * K + k]);
    }
  }
  return out;
}

// DeepSeek-V3's noaux_tc gate (transformers' DeepseekV3MoE.route_tokens_to_experts) in double:
// s = sigmoid(logits), choice = s + bias; group score = sum of its two best choices (its best
// when a group has one expert); the topk_group best groups stay (ties to the lower group), the
// others' experts are excluded; top_k experts by choice (ties to the lower expert); weights
// s[idx], divided by their sum + 1e-20 when norm_topk_prob, times routed_scaling_factor.
// Deciding comparisons must be exact ties (equal inputs) or differ by more than 1e-5 (float32
// sigmoid and sums err by ~1e-7): the test data are checked for that.
Routed RouteReference(const std::vector<double>& logits, const std::vector<float>& bias, const RouterParams& p) {
  const int64_t E = p.num_experts, per = E / p.n_group;
  std::vector<double> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-logits[e]));
    choice[e] = s[e] + (bias.empty() ? 0.0 : bias[e]);
  }
  auto decisive = [](double a, double b) { return a == b || std::fabs(a - b) > 1e-5; };
  std::vector<bool> keep(static_cast<size_t>(E), true);
  if (p.n_group > 1) {
    std::vector<double> gs(static_cast<size_t>(p.n_group));
    for (int64_t g = 0; g < p.n_group; ++g) {
      std::vector<double> c(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(c.rbegin(), c.rend());
      gs[g] = per >= 2 ? c[0] + c[1] : c[0];
    }
    std::vector<int64_t> order(static_cast<size_t>(p.n_group));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return gs[a] > gs[b]; });
    if (p.topk_group < p.n_group) {
      EXPECT_TRUE(decisive(gs[order[p.topk_group - 1]], gs[order[p.topk_group]])) << "test data: group scores too close";
    }
    for (int64_t i = p.topk_group; i < p.n_group; ++i) {
      for (int64_t e = order[i] * per; e < (order[i] + 1) * per; ++e) keep[e] = false;
    }
  }
  std::vector<int64_t> order;
  for (int64_t e = 0; e < E; ++e) {
    if (keep[e]) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return choice[a] > choice[b]; });
  if (static_cast<int64_t>(order.size()) > p.top_k) {
    EXPECT_TRUE(decisive(choice[order[p.top_k - 1]], choice[order[p.top_k]])) << "test data: choices too close";
  }
  order.resize(static_cast<size_t>(p.top_k));
  std::sort(order.begin(), order.end());
  Routed r;
  double sum = 0;
  for (int64_t e : order) sum += s[e];
  for (int64_t e : order) {
    r.idx.push_back(static_cast<int32_t>(e));
    r.weight.push_back((p.norm_topk_prob ? s[e] / (sum + 1e-20) : s[e]) * p.routed_scaling_factor);
  }
  return r;
}

// Values on a coarse binary grid: products and sums of them are exact in float32 in any order,
// so the logits are exact and every tie the data contain is an exact one.
std::vector<float> Grid(size_t n, std::mt19937& rng, int steps, float step) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % (2 * steps + 1)) - steps) * step;
  return v;
}

void CheckRoute(const std::vector<int32_t>& idx, const std::vector<float>& w, const std::vector<Routed>& want,
                int64_t K, const std::string& what) {
  const std::vector<Routed> got = SortByExpert(idx, w, static_cast<int64_t>(want.size()), K);
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_TRUE(AllEqual(got[t].idx, want[t].idx)) << what << " token " << t;
    for (size_t k = 0; k < want[t].weight.size() && k < got[t].weight.size(); ++k) {
      // Sigmoid (a few ulp), a sum of k terms, a division and a product.
      const double tol = (2 * K + 16) * kU * std::fabs(want[t].weight[k]);
      EXPECT_NEAR(got[t].weight[k], want[t].weight[k], tol) << what << " token " << t << " slot " << k;
    }
  }
}

struct RouteCase {
  int64_t E, K, n_group, topk_group;
  bool norm;
  float scaling;
  bool bias;
};

// Random tokens: group-limited and plain routing, with and without normalization, scaling and
// a bias, F32 and BF16 gates, T = 1, 3, 7. Biases are >= 0 so every kept choice is positive:
// excluded experts cannot matter whether they are masked with -inf (vLLM) or 0 (transformers).
TEST_P(MoeOps, MoeRoute) {
  std::mt19937 rng(60);
  const std::vector<RouteCase> cases = {{16, 4, 4, 2, true, 2.5f, true},  {16, 4, 4, 2, false, 1.0f, true},
                                        {8, 2, 1, 1, true, 1.0f, false},  {12, 3, 3, 1, false, 2.827f, true},
                                        {8, 3, 8, 4, true, 1.5f, true}};
  for (const RouteCase& c : cases) {
    for (WeightFormatId format : {kWeightF32, kWeightBf16}) {
      for (int64_t T : {1, 3, 7}) {
        const int64_t H = 33;
        RouterParams p;
        p.num_experts = c.E;
        p.top_k = c.K;
        p.n_group = c.n_group;
        p.topk_group = c.topk_group;
        p.norm_topk_prob = c.norm;
        p.routed_scaling_factor = c.scaling;
        const std::vector<float> x = Grid(static_cast<size_t>(T * H), rng, 8, 0.25f);
        HostMatrix gate = MakeHostMatrix(format, c.E, H, {}, rng);
        const std::vector<float> g = Grid(static_cast<size_t>(c.E * H), rng, 16, 1.0f / 64);
        if (format == kWeightF32) {
          std::copy(g.begin(), g.end(), reinterpret_cast<float*>(const_cast<uint8_t*>(gate.stored.codes.data)));
        } else {
          const std::vector<uint16_t> b = ToBf16Bits(g);
          std::copy(b.begin(), b.end(), reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(gate.stored.codes.data)));
        }
        gate.dense = DequantizeReference(gate.stored);
        std::vector<float> bias;
        if (c.bias) {
          bias = Grid(static_cast<size_t>(c.E), rng, 32, 1.0f / 64);
          for (float& b : bias) b = std::fabs(b);
        }
        Weight w;
        if (!Prepare(gate, &w)) continue;
        const Weight wb = c.bias ? Vector(bias, format == kWeightBf16) : Weight{};
        std::vector<Routed> want;
        for (int64_t t = 0; t < T; ++t) {
          std::vector<double> logits(static_cast<size_t>(c.E), 0.0);
          for (int64_t e = 0; e < c.E; ++e) {
            for (int64_t i = 0; i < H; ++i) logits[e] += static_cast<double>(gate.dense[e * H + i]) * x[t * H + i];
          }
          want.push_back(RouteReference(logits, bias, p));
        }
        Tensor idx = NewTensor(DType::kI32, {T, c.K}), weights = NewTensor(DType::kF32, {T, c.K});
        be().MoeRoute(F32(x, {T, H}), w, wb, p, idx, weights);
        CheckRoute(ReadI32(idx), ReadF32(weights), want, c.K,
                   absl::StrCat("E=", c.E, " K=", c.K, " groups ", c.n_group, "/", c.topk_group, " norm ", c.norm,
                                " scale ", c.scaling, " bias ", c.bias, " format ", int{format}, " T=", T));
      }
    }
  }
}

// A router gate [E, H] of these float32 values (row-major), as a checkpoint stores it.
HostMatrix F32Gate(const std::vector<float>& values, int64_t E, int64_t H) {
  HostMatrix gate;
  gate.stored.format = kWeightF32;
  gate.stored.rows = E;
  gate.stored.cols = H;
  gate.stored.codes = NewHostArray(DType::kF32, {E, H});
  std::copy(values.begin(), values.end(), reinterpret_cast<float*>(const_cast<uint8_t*>(gate.stored.codes.data)));
  gate.dense = values;
  return gate;
}

// Exact ties, made with one-hot tokens (logit e = gate[e][j] exactly): a tie between two
// groups at the topk_group boundary goes to the lower group; a tie between experts at the
// top_k boundary goes to the lower expert.
TEST_P(MoeOps, MoeRouteTies) {
  const int64_t H = 4, E = 8;
  // Column j of the gate is the logit vector of a token that is one-hot at j.
  const std::vector<std::vector<float>> columns = {
      // groups of 2: scores 2, 1.5, 1.5, 0.25 (sums of sigmoids of these logits order likewise)
      {1.0f, 1.0f, 0.75f, 0.75f, 0.75f, 0.75f, -1.0f, -1.0f},
      // one group: 2 first, then four experts tied at 1
      {0.5f, 2.0f, 1.0f, 1.0f, 1.0f, -1.0f, 0.0f, 1.0f},
      // all tied
      {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f},
      {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
  };
  std::vector<float> g(static_cast<size_t>(E * H));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t j = 0; j < H; ++j) g[e * H + j] = columns[j][e];
  }
  Weight w;
  if (!Prepare(F32Gate(g, E, H), &w)) GTEST_SKIP() << "F32 gates refused";
  std::vector<float> x(static_cast<size_t>(H * H), 0.0f);
  for (int64_t j = 0; j < H; ++j) x[j * H + j] = 1.0f;
  for (const RouteCase& c : std::vector<RouteCase>{{E, 3, 4, 2, true, 1.0f, false}, {E, 3, 1, 1, false, 1.0f, false},
                                                   {E, 4, 4, 3, true, 2.0f, false}}) {
    RouterParams p;
    p.num_experts = c.E;
    p.top_k = c.K;
    p.n_group = c.n_group;
    p.topk_group = c.topk_group;
    p.norm_topk_prob = c.norm;
    p.routed_scaling_factor = c.scaling;
    std::vector<Routed> want;
    for (int64_t j = 0; j < H; ++j) {
      want.push_back(RouteReference(std::vector<double>(columns[j].begin(), columns[j].end()), {}, p));
    }
    Tensor idx = NewTensor(DType::kI32, {H, c.K}), weights = NewTensor(DType::kF32, {H, c.K});
    be().MoeRoute(F32(x, {H, H}), w, Weight{}, p, idx, weights);
    CheckRoute(ReadI32(idx), ReadF32(weights), want, c.K,
               absl::StrCat("ties: K=", c.K, " groups ", c.n_group, "/", c.topk_group));
  }
  // Two of the cases above, spelled out: without groups, token 1 takes expert 1 then experts 2 and
  // 3 of the four tied at logit 1; token 2 (all tied) takes experts 0, 1, 2. (With groups of two
  // and topk_group 2, token 0 keeps group 1 over the tied group 2: experts 0, 1, 2, not 0, 1, 4.)
  Tensor idx = NewTensor(DType::kI32, {H, 3}), weights = NewTensor(DType::kF32, {H, 3});
  RouterParams p;
  p.num_experts = E;
  p.top_k = 3;
  be().MoeRoute(F32(x, {H, H}), w, Weight{}, p, idx, weights);
  const std::vector<Routed> got = SortByExpert(ReadI32(idx), ReadF32(weights), H, 3);
  EXPECT_EQ(got[1].idx, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(got[2].idx, (std::vector<int32_t>{0, 1, 2}));
  RouterParams grouped = p;
  grouped.n_group = 4;
  grouped.topk_group = 2;
  be().MoeRoute(F32(x, {H, H}), w, Weight{}, grouped, idx, weights);
  EXPECT_EQ(SortByExpert(ReadI32(idx), ReadF32(weights), H, 3)[0].idx, (std::vector<int32_t>{0, 1, 2}));
}

// NaN logits (a NaN hidden state, a NaN gate row) rank below every number and tie among
// themselves (to the lower expert): the router still names K distinct experts in range, the
// numbered ones first, on every backend (the CUDA router once read outside its logits here).
// A NaN anywhere in a gate row makes that expert's logit NaN for every token (NaN x 0 is NaN),
// and a NaN in a token makes all of its logits NaN.
TEST_P(MoeOps, MoeRouteNaNLogitsRankLast) {
  const int64_t H = 2, E = 8, K = 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto make_gate = [&](const std::vector<float>& rows, Weight* w) { return Prepare(F32Gate(rows, E, H), w); };
  RouterParams p;
  p.num_experts = E;
  p.top_k = K;
  p.norm_topk_prob = false;
  // Experts 0, 2 and 5 NaN; token 0 reads column 0, token 1 column 1, token 2 is NaN.
  Weight a;
  if (!make_gate({nan, 0, 2, -1, 0, nan, 1, 0.25f, 0.5f, 2, nan, 0, -1, 1, 3, -2}, &a)) {
    GTEST_SKIP() << "F32 gates refused";
  }
  const std::vector<float> x = {1, 0, 0, 1, nan, 1};
  Tensor idx = NewTensor(DType::kI32, {3, K}), weights = NewTensor(DType::kF32, {3, K});
  be().MoeRoute(F32(x, {3, H}), a, Weight{}, p, idx, weights);
  MustOk(be().Synchronize(), "MoeRoute");
  std::vector<Routed> got = SortByExpert(ReadI32(idx), ReadF32(weights), 3, K);
  EXPECT_EQ(got[0].idx, (std::vector<int32_t>{1, 3, 7}));
  EXPECT_EQ(got[1].idx, (std::vector<int32_t>{3, 4, 6}));
  EXPECT_EQ(got[2].idx, (std::vector<int32_t>{0, 1, 2}));
  for (int t = 0; t < 2; ++t) {
    for (double wk : got[t].weight) EXPECT_TRUE(std::isfinite(wk)) << "token " << t;
  }
  // Six NaN experts, two numbers: both numbers, then the lowest NaN expert.
  Weight b;
  ASSERT_TRUE(make_gate({nan, 0, nan, 0, nan, 0, nan, 0, nan, 0, 0.5f, 0, nan, 0, 1, 0}, &b));
  be().MoeRoute(F32(x, {3, H}), b, Weight{}, p, idx, weights);
  MustOk(be().Synchronize(), "MoeRoute");
  got = SortByExpert(ReadI32(idx), ReadF32(weights), 3, K);
  EXPECT_EQ(got[0].idx, (std::vector<int32_t>{0, 5, 7}));
  EXPECT_EQ(got[2].idx, (std::vector<int32_t>{0, 1, 2}));
}

// ---- MoeExperts ----

struct HostExpert {
  HostMatrix gate, up, down;  // [I, H], [I, H], [H, I]
};

// out[t] = sum_k w[t, k] down(silu(gate x) * up x) in double, with a propagated float32 bound:
// each dot product contributes (K + 8) u of its magnitude (matmul_test.cc), silu's slope is at
// most 1.1, and errors flow through the products and the down projection; the final weighted
// sum adds (k + 2) u. Twice that bound is allowed. eps: a relative error per product that the
// backend's expert GEMMs add to float32's (CUDA's INT4 tensor-core kernel: 2^-16).
void ExpertsReference(const std::vector<HostExpert>& experts, const std::vector<float>& x, const std::vector<int32_t>& idx,
                      const std::vector<float>& w, int64_t T, int64_t K, int64_t H, std::vector<double>* want,
                      std::vector<double>* tol, double eps = 0) {
  want->assign(static_cast<size_t>(T * H), 0.0);
  tol->assign(want->size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> mag(static_cast<size_t>(H), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const HostExpert& e = experts[idx[t * K + k]];
      const int64_t I = e.gate.stored.rows;
      const float* xt = x.data() + t * H;
      std::vector<double> h(static_cast<size_t>(I)), eh(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0, mg = 0, mu = 0;
        for (int64_t j = 0; j < H; ++j) {
          g += static_cast<double>(e.gate.dense[i * H + j]) * xt[j];
          u += static_cast<double>(e.up.dense[i * H + j]) * xt[j];
          mg += std::fabs(static_cast<double>(e.gate.dense[i * H + j]) * xt[j]);
          mu += std::fabs(static_cast<double>(e.up.dense[i * H + j]) * xt[j]);
        }
        const double a = g / (1.0 + std::exp(-g));
        const double ea = 1.1 * ((H + 8) * kU + eps) * mg + 8 * kU * std::fabs(a);
        h[i] = a * u;
        eh[i] = std::fabs(u) * ea + std::fabs(a) * ((H + 8) * kU + eps) * mu + kU * std::fabs(h[i]);
      }
      for (int64_t j = 0; j < H; ++j) {
        double y = 0, ey = 0, my = 0;
        for (int64_t i = 0; i < I; ++i) {
          const double d = e.down.dense[j * I + i];
          y += d * h[i];
          ey += std::fabs(d) * eh[i];
          my += std::fabs(d * h[i]);
        }
        ey += ((I + 8) * kU + eps) * my;
        const double wk = w[t * K + k];
        (*want)[t * H + j] += wk * y;
        (*tol)[t * H + j] += std::fabs(wk) * ey;
        mag[j] += std::fabs(wk * y);
      }
    }
    for (int64_t j = 0; j < H; ++j) (*tol)[t * H + j] = 2 * ((*tol)[t * H + j] + (K + 2) * kU * mag[j]) + 1e-30;
  }
}

// Six experts in different formats (F32; BF16; FP8 blocks 3x7 / 128x128 with BF16 down; INT4
// g32; INT4 g128 gate and up with g32 down; FP8 5x16), hidden 128, intermediate 64. Tokens
// share experts, one token lists an expert twice, some experts go unused; T = 1 (decode), 3 and
// 9 (several tokens per expert).
TEST_P(MoeOps, MoeExperts) {
  std::mt19937 rng(61);
  const int64_t H = 128, I = 64, K = 3;
  auto p = [](int64_t br, int64_t bc, int64_t g) {
    WeightParams w;
    w.block_rows = br;
    w.block_cols = bc;
    w.group = g;
    return w;
  };
  struct Formats {
    WeightFormatId gate, up, down;
    WeightParams pg, pu, pd;
  };
  const std::vector<Formats> formats = {
      {kWeightF32, kWeightF32, kWeightF32, {}, {}, {}},
      {kWeightBf16, kWeightBf16, kWeightBf16, {}, {}, {}},
      {kWeightFp8Block, kWeightFp8Block, kWeightBf16, p(3, 7, 0), p(128, 128, 0), {}},
      {kWeightInt4Group, kWeightInt4Group, kWeightInt4Group, p(0, 0, 32), p(0, 0, 32), p(0, 0, 32)},
      {kWeightInt4Group, kWeightInt4Group, kWeightInt4Group, p(0, 0, 128), p(0, 0, 128), p(0, 0, 32)},
      {kWeightFp8Block, kWeightFp8Block, kWeightFp8Block, p(5, 16, 0), p(5, 16, 0), p(5, 16, 0)},
  };
  std::vector<HostExpert> host;
  std::vector<ExpertWeights> prepared;
  for (const Formats& f : formats) {
    HostExpert e{MakeHostMatrix(f.gate, I, H, f.pg, rng), MakeHostMatrix(f.up, I, H, f.pu, rng),
                 MakeHostMatrix(f.down, H, I, f.pd, rng)};
    ExpertWeights ew;
    if (!Prepare(e.gate, &ew.gate) || !Prepare(e.up, &ew.up) || !Prepare(e.down, &ew.down)) continue;
    host.push_back(std::move(e));
    prepared.push_back(std::move(ew));
  }
  const int64_t E = static_cast<int64_t>(host.size());
  ASSERT_GE(E, 2) << "the backend refused almost every weight format";
  const std::unique_ptr<ExpertBank> bank = Must(be().PrepareExperts(std::move(prepared)), "PrepareExperts");
  ASSERT_EQ(bank->num_experts(), E);
  for (int64_t T : {1, 3, 9}) {
    // Activations scaled so that FP8 codes (up to 448 times their block scale) keep the
    // intermediate values moderate.
    const std::vector<float> x = RandomNormal(static_cast<size_t>(T * H), rng, 0.05f);
    std::vector<int32_t> idx(static_cast<size_t>(T * K));
    std::vector<float> w(idx.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        idx[t * K + k] = static_cast<int32_t>(1 + (t + 2 * k) % (E - 1));  // expert 0 unused; experts shared
        w[t * K + k] = 0.1f + static_cast<float>(rng() % 100) / 100.0f;
      }
    }
    if (T > 1) idx[1 * K + 2] = idx[1 * K + 0];  // token 1 lists one expert twice
    std::vector<double> want, tol;
    ExpertsReference(host, x, idx, w, T, K, H, &want, &tol);
    Tensor out = NewTensor(DType::kF32, {T, H});
    const Tensor tx = F32(x, {T, H}), ti = NewTensor(DType::kI32, {T, K}), tw = F32(w, {T, K});
    MustOk(be().Upload(idx.data(), idx.size() * sizeof(int32_t), ti), "Upload");
    be().MoeExperts(tx, ti, tw, *bank, out);
    const std::vector<float> got = ReadF32(out);
    EXPECT_TRUE(AllNear(got, want, tol)) << "T=" << T;

    // Each token's k slots in another order: the same sum, bit for bit (contributions are summed
    // in expert order, not slot order).
    std::vector<int32_t> idx2 = idx;
    std::vector<float> w2 = w;
    for (int64_t t = 0; t < T; ++t) {
      std::reverse(idx2.begin() + t * K, idx2.begin() + (t + 1) * K);
      std::reverse(w2.begin() + t * K, w2.begin() + (t + 1) * K);
    }
    Tensor out2 = NewTensor(DType::kF32, {T, H});
    const Tensor ti2 = NewTensor(DType::kI32, {T, K});
    MustOk(be().Upload(idx2.data(), idx2.size() * sizeof(int32_t), ti2), "Upload");
    be().MoeExperts(tx, ti2, F32(w2, {T, K}), *bank, out2);
    EXPECT_TRUE(AllBitEqual(ReadF32(out2), got)) << "T=" << T << ": slot order changed the result";
  }
}

// Banks whose experts all share one quantized format (how a checkpoint or a per-phase weight
// choice stores them): the device runs these through its grouped tensor-core kernel (INT4, and FP8
// with blocks of whole 32-column steps) or dequantizing GEMV rather than the mixed-format tiled
// kernel. Hidden 256, intermediate 128, eight experts; T = 1 (decode), 6
// and 40 (a prefill chunk: more than one 32-row tile for some experts). Tolerance as above.
TEST_P(MoeOps, MoeExpertsSingleFormatBanks) {
  std::mt19937 rng(62);
  const int64_t H = 256, I = 128, K = 4, E = 8;
  for (const FormatCase& fc : FormatCases(I)) {
    if (fc.format == kWeightF32 || fc.format == kWeightBf16) continue;
    std::vector<HostExpert> host;
    std::vector<ExpertWeights> prepared;
    bool refused = false;
    for (int64_t e = 0; e < E && !refused; ++e) {
      HostExpert he{MakeHostMatrix(fc.format, I, H, fc.params, rng), MakeHostMatrix(fc.format, I, H, fc.params, rng),
                    MakeHostMatrix(fc.format, H, I, fc.params, rng)};
      ExpertWeights ew;
      refused = !Prepare(he.gate, &ew.gate) || !Prepare(he.up, &ew.up) || !Prepare(he.down, &ew.down);
      host.push_back(std::move(he));
      prepared.push_back(std::move(ew));
    }
    if (refused) continue;
    const std::unique_ptr<ExpertBank> bank = Must(be().PrepareExperts(std::move(prepared)), "PrepareExperts");
    for (int64_t T : {1, 6, 40}) {
      const std::vector<float> x = RandomNormal(static_cast<size_t>(T * H), rng, 0.05f);
      std::vector<int32_t> idx(static_cast<size_t>(T * K));
      std::vector<float> w(idx.size());
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t k = 0; k < K; ++k) {
          idx[t * K + k] = static_cast<int32_t>((t * 3 + k * 2 + t / 5) % E);
          w[t * K + k] = 0.1f + static_cast<float>(rng() % 100) / 100.0f;
        }
      }
      std::vector<double> want, tol;
      // CUDA runs all-INT4 and all-FP8 banks on the tensor cores (two bfloat16 parts an activation).
      const bool mma = fc.format == kWeightInt4Group || fc.format == kWeightFp8Block;
      const double eps = GetParam() == BackendKind::kCuda && mma ? 0x1p-16 : 0.0;
      ExpertsReference(host, x, idx, w, T, K, H, &want, &tol, eps);
      Tensor out = NewTensor(DType::kF32, {T, H}), ti = NewTensor(DType::kI32, {T, K});
      MustOk(be().Upload(idx.data(), idx.size() * sizeof(int32_t), ti), "Upload");
      be().MoeExperts(F32(x, {T, H}), ti, F32(w, {T, K}), *bank, out);
      EXPECT_TRUE(AllNear(ReadF32(out), want, tol)) << fc.name << " T=" << T;
    }
  }
}

LLMRT_BACKEND_SUITE(MoeOps);

}  // namespace
}  // namespace llmrt::conformance
