// Mixture of experts on the CPU: noaux_tc routing and sparse expert compute (only the experts
// some token selected run, each over the rows of the tokens that chose it).

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/util/bf16.h"
#include "src/util/status.h"

namespace llmrt {

void CpuBackend::MoeRoute(const Tensor& x, const Weight& gate, const Weight& bias,
                          const RouterParams& p, const Tensor& idx, const Tensor& weights) {
  Run("MoeRoute", [&] {
    const int64_t T = x.dim(0), E = p.num_experts, K = p.top_k;
    LLMRT_CHECK(gate.rows == E && idx.dim(0) == T && idx.row_size() == K && K >= 1 && K <= E);
    LLMRT_CHECK(p.n_group >= 1 && E % p.n_group == 0 && p.topk_group <= p.n_group);
    std::vector<float> logits(static_cast<size_t>(T * E));
    // Exact float32 under every activation policy: a rounded logit could pick another expert.
    MatMulRawExact(x.data_as<float>(), x.row_stride(), T, gate, logits.data(), E);
    const int64_t per_group = E / p.n_group;
    std::vector<float> s(E), choice(E), group_score(p.n_group);
    std::vector<int> order(E), gorder(p.n_group);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < E; ++e) {
        s[e] = 1.0f / (1.0f + std::exp(-logits[t * E + e]));
        float b = 0.0f;
        if (bias.defined()) {
          b = bias.format == kWeightBf16 ? Bf16ToF32(bias.data.data_as<uint16_t>()[e])
                                                 : bias.data.data_as<float>()[e];
        }
        choice[e] = s[e] + b;  // the bias only selects; weights come from s
        // A NaN (a NaN hidden state) ranks as -infinity: it never outranks a number, and the
        // orders below stay strict (the CUDA router's rule too).
        if (std::isnan(choice[e])) choice[e] = -std::numeric_limits<float>::infinity();
      }
      if (p.n_group > 1) {
        // Group score: sum of the group's two best choices; keep the topk_group best groups.
        for (int64_t g = 0; g < p.n_group; ++g) {
          const float* c = choice.data() + g * per_group;
          float best = -std::numeric_limits<float>::infinity(), second = best;
          for (int64_t j = 0; j < per_group; ++j) {
            if (c[j] > best) {
              second = best;
              best = c[j];
            } else if (c[j] > second) {
              second = c[j];
            }
          }
          group_score[g] = per_group >= 2 ? best + second : best;
          if (std::isnan(group_score[g])) group_score[g] = -std::numeric_limits<float>::infinity();
        }
        std::iota(gorder.begin(), gorder.end(), 0);
        std::stable_sort(gorder.begin(), gorder.end(),
                         [&](int a, int b) { return group_score[a] > group_score[b]; });
        std::vector<bool> keep(p.n_group, false);
        for (int64_t g = 0; g < p.topk_group; ++g) keep[gorder[g]] = true;
        for (int64_t e = 0; e < E; ++e) {
          if (!keep[e / per_group]) choice[e] = -std::numeric_limits<float>::infinity();
        }
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
        return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
      });
      int32_t* oi = idx.data_as<int32_t>() + t * idx.row_stride();
      float* ow = weights.data_as<float>() + t * weights.row_stride();
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        oi[k] = order[k];
        ow[k] = s[order[k]];
        sum += ow[k];
      }
      for (int64_t k = 0; k < K; ++k) {
        if (p.norm_topk_prob) ow[k] /= (sum + 1e-20f);
        ow[k] *= p.routed_scaling_factor;
      }
    }
  });
}

void CpuBackend::MoeExperts(const Tensor& x, const Tensor& idx, const Tensor& weights, const ExpertBank& bank,
                            const Tensor& out) {
  Run("MoeExperts", [&] {
    const std::vector<ExpertWeights>& experts = static_cast<const CpuExpertBank&>(bank).experts;
    const int64_t T = x.dim(0), D = x.row_size(), K = idx.row_size();
    const int64_t E = static_cast<int64_t>(experts.size());
    LLMRT_CHECK(out.dim(0) == T && out.row_size() == D);
    if (!moe_) moe_ = std::make_unique<MoeScratch>();
    MoeScratch& m = *moe_;
    // Tokens per expert, in token order.
    m.assigned.resize(static_cast<size_t>(E));
    for (auto& a : m.assigned) a.clear();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = idx.data_as<int32_t>()[t * idx.row_stride() + k];
        LLMRT_CHECK(e >= 0 && e < E);
        m.assigned[e].push_back({static_cast<int32_t>(t), weights.data_as<float>()[t * weights.row_stride() + k]});
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      float* o = out.data_as<float>() + t * out.row_stride();
      std::fill(o, o + D, 0.0f);
    }
    m.active.clear();
    int64_t max_rows = 0;
    for (int64_t e = 0; e < E; ++e) {
      // Experts another rank holds (expert parallelism) contribute nothing here.
      if (m.assigned[e].empty() || !experts[e].gate.defined()) continue;
      m.active.push_back(e);
      max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(m.assigned[e].size()));
    }
    // Experts as tasks (one expert per task, no synchronization inside, each into its own
    // buffers) where they are many enough to keep every thread busy: decode-sized work (a few
    // tokens per expert, at least one expert per thread), or at least four experts per thread
    // while all their buffers stay small. Otherwise one expert after the other, every matmul
    // split over all threads, all in one set of buffers. (A batch of 64 tokens over 16 experts
    // on two threads: 48 split matmuls and their handoffs per layer against none.)
    const int64_t threads = pool_.num_threads(), num_active = static_cast<int64_t>(m.active.size());
    int64_t total_rows = 0, inter = 0;
    for (int64_t e : m.active) {
      total_rows += static_cast<int64_t>(m.assigned[e].size());
      inter = std::max(inter, experts[e].gate.rows);
    }
    constexpr int64_t kTaskBufferBytes = int64_t{64} << 20;
    const bool per_task = (max_rows <= 4 && num_active >= threads) ||
                          (num_active >= 4 * threads &&
                           total_rows * (2 * D + 2 * inter) * int64_t{sizeof(float)} <= kTaskBufferBytes);
    const size_t buffers = per_task ? m.active.size() : 1;
    if (m.per_expert.size() < buffers) m.per_expert.resize(buffers);
    // y_e [n_e, hidden] of an active expert, added into `out` in expert order (as each expert
    // finishes, or after all of them), so the result does not depend on how the work was split.
    auto add_into_out = [&](size_t a, const std::vector<float>& y) {
      const auto& list = m.assigned[m.active[a]];
      for (size_t i = 0; i < list.size(); ++i) {
        float* o = out.data_as<float>() + list[i].first * out.row_stride();
        const float w = list[i].second;
        const float* yi = y.data() + i * D;
        for (int64_t j = 0; j < D; ++j) o[j] += w * yi[j];
      }
    };
    auto run_expert = [&](size_t a, bool parallel_inside) {
      const int64_t e = m.active[a];
      const auto& list = m.assigned[e];
      const ExpertWeights& ew = experts[e];
      const int64_t n = static_cast<int64_t>(list.size()), I = ew.gate.rows;
      MoeScratch::PerExpert& b = m.per_expert[per_task ? a : 0];
      b.xin.resize(static_cast<size_t>(n * D));
      b.g.resize(static_cast<size_t>(n * I));
      b.u.resize(static_cast<size_t>(n * I));
      b.y.resize(static_cast<size_t>(n * D));
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(x.data_as<float>() + list[i].first * x.row_stride(), D, b.xin.data() + i * D);
      }
      if (parallel_inside) {
        MatMulRaw(b.xin.data(), D, n, ew.gate, b.g.data(), I);
        MatMulRaw(b.xin.data(), D, n, ew.up, b.u.data(), I);
      } else {
        MatMulRowsSerial(b.xin.data(), D, n, ew.gate, b.g.data(), I);
        MatMulRowsSerial(b.xin.data(), D, n, ew.up, b.u.data(), I);
      }
      for (int64_t i = 0; i < n * I; ++i) b.g[i] = b.g[i] / (1.0f + std::exp(-b.g[i])) * b.u[i];
      if (parallel_inside) {
        MatMulRaw(b.g.data(), I, n, ew.down, b.y.data(), D);
      } else {
        MatMulRowsSerial(b.g.data(), I, n, ew.down, b.y.data(), D);
      }
    };
    if (per_task) {
      // The experts with the most rows first, so that the pool's shrinking chunks even out the
      // threads' ends; the sums into `out` keep expert order whatever ran where.
      m.schedule.resize(m.active.size());
      std::iota(m.schedule.begin(), m.schedule.end(), size_t{0});
      std::stable_sort(m.schedule.begin(), m.schedule.end(), [&](size_t a, size_t b) {
        return m.assigned[m.active[a]].size() > m.assigned[m.active[b]].size();
      });
      pool_.ParallelFor(m.active.size(), 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) run_expert(m.schedule[i], false);
      });
      for (size_t a = 0; a < m.active.size(); ++a) add_into_out(a, m.per_expert[a].y);
    } else {
      for (size_t a = 0; a < m.active.size(); ++a) {
        run_expert(a, true);
        add_into_out(a, m.per_expert[0].y);
      }
    }
  });
}

}  // namespace llmrt
