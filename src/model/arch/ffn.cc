#include "src/model/arch/ffn.h"

#include "absl/strings/str_cat.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

absl::Status LoadMlp(WeightLoader& w, const std::string& p, int64_t hidden, int64_t inter, ExpertWeights* m,
                     ExpertStorage s = ExpertStorage::kAsStored) {
  LLMRT_ASSIGN_OR_RETURN(m->gate, w.Stored(p + "gate_proj.weight", inter, hidden, s));
  LLMRT_ASSIGN_OR_RETURN(m->up, w.Stored(p + "up_proj.weight", inter, hidden, s));
  LLMRT_ASSIGN_OR_RETURN(m->down, w.Stored(p + "down_proj.weight", hidden, inter, s));
  return absl::OkStatus();
}

// down(silu(gate(x)) * up(x))
absl::Status RunMlp(Backend& be, const ExpertWeights& m, const Tensor& x, const Tensor& out) {
  const int64_t T = x.dim(0), I = m.gate.rows;
  LLMRT_ASSIGN_OR_RETURN(Tensor g, be.Allocate(DType::kF32, {T, I}));  // [T, inter]
  LLMRT_ASSIGN_OR_RETURN(Tensor u, be.Allocate(DType::kF32, {T, I}));  // [T, inter]
  be.MatMul(x, m.gate, g);
  be.MatMul(x, m.up, u);
  be.SiluMul(g, u, g);
  be.MatMul(g, m.down, out);  // [T, hidden]
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadFfn(WeightLoader& w, const ModelConfig& c, const std::string& p, bool moe, FfnWeights* f) {
  const int64_t D = c.hidden_size;
  f->moe = moe;
  if (!moe) return LoadMlp(w, p, D, c.intermediate_size, &f->dense);
  const int64_t E = c.n_routed_experts;
  LLMRT_ASSIGN_OR_RETURN(f->router, w.Matrix(p + "gate.weight", E, D));
  LLMRT_ASSIGN_OR_RETURN(f->router_bias, w.Vector(p + "gate.e_score_correction_bias", E));
  const LoadOptions& o = w.options();
  f->experts.resize(E);
  if (o.decode_experts != o.prefill_experts) f->experts_decode.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = absl::StrCat(p, "experts.", e, ".");
    LLMRT_RETURN_IF_ERROR(LoadMlp(w, ep, D, c.moe_intermediate_size, &f->experts[e], o.prefill_experts));
    if (!f->experts_decode.empty()) {
      LLMRT_RETURN_IF_ERROR(LoadMlp(w, ep, D, c.moe_intermediate_size, &f->experts_decode[e], o.decode_experts));
    }
  }
  if (c.n_shared_experts > 0) {
    f->has_shared = true;
    LLMRT_RETURN_IF_ERROR(LoadMlp(w, p + "shared_experts.", D, c.moe_intermediate_size * c.n_shared_experts, &f->shared));
  }
  return absl::OkStatus();
}

absl::Status RunFfn(Backend& be, const ModelConfig& c, const FfnWeights& f, const Tensor& x, const Tensor& out,
                    bool decode_phase) {
  if (!f.moe) return RunMlp(be, f.dense, x, out);
  const int64_t T = x.dim(0), K = c.num_experts_per_tok;
  const RouterParams rp{c.n_routed_experts, K, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling_factor};
  LLMRT_ASSIGN_OR_RETURN(Tensor idx, be.Allocate(DType::kI32, {T, K}));  // [T, k]
  LLMRT_ASSIGN_OR_RETURN(Tensor wts, be.Allocate(DType::kF32, {T, K}));  // [T, k]
  be.MoeRoute(x, f.router, f.router_bias, rp, idx, wts);
  be.MoeExperts(x, idx, wts, decode_phase && !f.experts_decode.empty() ? f.experts_decode : f.experts, out);
  if (f.has_shared) {
    LLMRT_ASSIGN_OR_RETURN(Tensor s, be.Allocate(DType::kF32, {T, c.hidden_size}));  // [T, hidden]
    LLMRT_RETURN_IF_ERROR(RunMlp(be, f.shared, x, s));
    be.Add(out, s, out);  // routed + shared (shared unscaled)
  }
  return absl::OkStatus();
}

}  // namespace llmrt
