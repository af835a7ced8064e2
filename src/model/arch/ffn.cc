#include "src/model/arch/ffn.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// A SwiGLU MLP of width `inter`; `split` loads this rank's share of its intermediate columns
// (rows of gate and up, columns of down: the partial outputs of the ranks add up to the MLP's).
absl::Status LoadMlp(WeightLoader& w, const std::string& p, int64_t hidden, int64_t inter, ExpertWeights* m,
                     ExpertStorage s = ExpertStorage::kAsStored, bool split = false) {
  const ShardPlan& sp = w.options().shard;
  const int64_t i0 = split ? sp.Begin(inter) : 0, n = split ? sp.Part(inter) : inter;
  LLMRT_ASSIGN_OR_RETURN(m->gate, w.Stored(p + "gate_proj.weight", inter, hidden, s, MatrixSlice::Rows(i0, n)));
  LLMRT_ASSIGN_OR_RETURN(m->up, w.Stored(p + "up_proj.weight", inter, hidden, s, MatrixSlice::Rows(i0, n)));
  LLMRT_ASSIGN_OR_RETURN(m->down, w.Stored(p + "down_proj.weight", hidden, inter, s, MatrixSlice::Cols(i0, n)));
  return absl::OkStatus();
}

struct MlpScratch {
  Tensor g, u;  // [T, inter]
};
MlpScratch TakeMlp(Workspace& ws, const ExpertWeights& m, int64_t T) {
  return {ws.Activation({T, m.gate.rows}), ws.Activation({T, m.gate.rows})};
}

// down(silu(gate(x)) * up(x))
void RunMlp(Backend& be, const ExpertWeights& m, const MlpScratch& s, const Tensor& x, const Tensor& out) {
  be.MatMul(x, m.gate, s.g);
  be.MatMul(x, m.up, s.u);
  be.SiluMul(s.g, s.u, s.g);
  be.MatMul(s.g, m.down, out);  // [T, hidden]
}

struct MoeScratch {
  Tensor idx;     // I32 [T, k]
  Tensor wts;     // F32 [T, k]
  Tensor shared;  // [T, hidden]
  MlpScratch mlp;
};
MoeScratch TakeMoe(Workspace& ws, const ModelConfig& c, const FfnWeights& f, int64_t T) {
  MoeScratch s;
  s.idx = ws.Take(DType::kI32, {T, c.num_experts_per_tok});
  s.wts = ws.Take(DType::kF32, {T, c.num_experts_per_tok});  // routing weights are float32
  if (f.has_shared) {
    s.shared = ws.Activation({T, c.hidden_size});
    s.mlp = TakeMlp(ws, f.shared, T);
  }
  return s;
}

// Routed experts: every expert's share of its intermediate columns (tensor-parallel experts),
// or, with expert parallelism, this rank's whole experts [e0, e0 + E / ranks) and none of the
// others (their entries stay empty: MoeExperts skips them, another rank computes them).
absl::StatusOr<std::unique_ptr<ExpertBank>> LoadExperts(WeightLoader& w, const ModelConfig& c, const std::string& p,
                                                        ExpertStorage s) {
  const ShardPlan& sp = w.options().shard;
  const bool ep = sp.sharded() && sp.expert_parallel;
  const int64_t E = c.n_routed_experts, e0 = ep ? sp.Begin(E) : 0, e1 = ep ? e0 + sp.Part(E) : E;
  std::vector<ExpertWeights> experts(static_cast<size_t>(E));
  for (int64_t e = e0; e < e1; ++e) {
    LLMRT_RETURN_IF_ERROR(LoadMlp(w, absl::StrCat(p, "experts.", e, "."), c.hidden_size, c.moe_intermediate_size,
                                  &experts[e], s, /*split=*/sp.sharded() && !ep));
  }
  return w.backend().PrepareExperts(std::move(experts));
}

}  // namespace

absl::Status LoadFfn(WeightLoader& w, const ModelConfig& c, const std::string& p, bool moe, FfnWeights* f) {
  const int64_t D = c.hidden_size;
  const bool split = w.options().shard.sharded();
  f->moe = moe;
  if (!moe) return LoadMlp(w, p, D, c.intermediate_size, &f->dense, ExpertStorage::kAsStored, split);
  const int64_t E = c.n_routed_experts;
  LLMRT_ASSIGN_OR_RETURN(f->router, w.Matrix(p + "gate.weight", E, D));
  LLMRT_ASSIGN_OR_RETURN(f->router_bias, w.Vector(p + "gate.e_score_correction_bias", E));
  const LoadOptions& o = w.options();
  LLMRT_ASSIGN_OR_RETURN(f->experts, LoadExperts(w, c, p, o.prefill_experts));
  if (o.decode_experts != o.prefill_experts) {
    LLMRT_ASSIGN_OR_RETURN(f->experts_decode, LoadExperts(w, c, p, o.decode_experts));
  }
  if (c.n_shared_experts > 0) {
    f->has_shared = true;
    LLMRT_RETURN_IF_ERROR(LoadMlp(w, p + "shared_experts.", D, c.moe_intermediate_size * c.n_shared_experts, &f->shared,
                                  ExpertStorage::kAsStored, split));
  }
  return absl::OkStatus();
}

void TakeFfnScratch(Workspace& ws, const ModelConfig& c, const FfnWeights& f, int64_t tokens) {
  if (f.moe) {
    TakeMoe(ws, c, f, tokens);
  } else {
    TakeMlp(ws, f.dense, tokens);
  }
}

absl::Status RunFfn(PassContext& ctx, const ModelConfig& c, const FfnWeights& f, const Tensor& x, const Tensor& out) {
  Backend& be = ctx.be;
  const int64_t T = x.dim(0);
  if (!f.moe) {
    RunMlp(be, f.dense, TakeMlp(ctx.ws, f.dense, T), x, out);
    be.AllReduceSum(out);  // the ranks' shares of the intermediate columns
    return absl::OkStatus();
  }
  const MoeScratch s = TakeMoe(ctx.ws, c, f, T);
  const RouterParams rp{c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob,
                        c.routed_scaling_factor};
  be.MoeRoute(x, f.router, f.router_bias, rp, s.idx, s.wts);
  const ExpertBank& bank = ctx.batch.decode_phase && f.experts_decode ? *f.experts_decode : *f.experts;
  be.MoeExperts(x, s.idx, s.wts, bank, out);
  if (f.has_shared) {
    RunMlp(be, f.shared, s.mlp, x, s.shared);
    be.Add(out, s.shared, out);  // routed + shared (shared unscaled)
  }
  be.AllReduceSum(out);  // every rank's experts (or expert columns) and shared-expert columns
  return absl::OkStatus();
}

}  // namespace llmrt
