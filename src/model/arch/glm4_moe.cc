// GLM-4.5 / 4.6 / 4.7 attention (Glm4MoeForCausalLM), following transformers' modeling_glm4_moe.py
// (pinned 5.24.0): grouped-query attention with q/k/v biases, optional per-head q/k RMSNorm and
// partial NeoX rotary over a paged per-KV-head K/V cache. The layer loop, norms and feed-forward
// blocks are the shared decoder (src/model/decoder.h).

#include "src/model/arch/glm4_moe.h"

#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/model/decoder.h"
#include "src/model/rope.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// Under tensor parallelism each rank runs `heads` = num_heads / ranks query heads and
// `kv_heads` KV heads: its share of them, or, when the ranks outnumber the KV heads, the one KV
// head its query heads read (replicated on ranks / num_kv_heads ranks, as SGLang and vLLM do).
struct GqaShared {
  ModelConfig cfg;
  RopeTable rope;
  int64_t heads = 0, kv_heads = 0;  // on this rank
  int64_t h0 = 0, kv0 = 0;          // first query and KV head of this rank
};

class GqaBlock final : public AttentionBlock {
 public:
  explicit GqaBlock(std::shared_ptr<const GqaShared> s) : s_(std::move(s)) {}
  absl::Status Load(WeightLoader& w, int64_t layer);
  void TakeScratch(Workspace& ws, int64_t tokens) const override { Take(ws, tokens); }
  absl::Status Forward(PassContext& ctx, int64_t layer, const Tensor& x, const Tensor& out) override;

 private:
  struct Scratch {
    Tensor q;   // [T, H * hd]
    Tensor kv;  // [T, KV * hd | KV * hd]: keys then values, a cache row each
    Tensor o;   // [T, H * hd]
  };
  Scratch Take(Workspace& ws, int64_t T) const;

  std::shared_ptr<const GqaShared> s_;
  Weight q_proj, k_proj, v_proj, o_proj;  // [H*hd, D], [KVH*hd, D] x2, [D, H*hd]
  Weight q_bias, k_bias, v_bias;          // when attention_bias
  Weight q_norm, k_norm;                  // [hd] when use_qk_norm
};

absl::Status GqaBlock::Load(WeightLoader& w, int64_t i) {
  const ModelConfig& c = s_->cfg;
  const int64_t D = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
  const int64_t Hl = s_->heads, KVl = s_->kv_heads, h0 = s_->h0, kv0 = s_->kv0;
  const std::string a = absl::StrCat(c.prefix, "layers.", i, ".self_attn.");
  LLMRT_ASSIGN_OR_RETURN(q_proj, w.Matrix(a + "q_proj.weight", H * hd, D, MatrixSlice::Rows(h0 * hd, Hl * hd)));
  LLMRT_ASSIGN_OR_RETURN(k_proj, w.Matrix(a + "k_proj.weight", KV * hd, D, MatrixSlice::Rows(kv0 * hd, KVl * hd)));
  LLMRT_ASSIGN_OR_RETURN(v_proj, w.Matrix(a + "v_proj.weight", KV * hd, D, MatrixSlice::Rows(kv0 * hd, KVl * hd)));
  LLMRT_ASSIGN_OR_RETURN(o_proj, w.Matrix(a + "o_proj.weight", D, H * hd, MatrixSlice::Cols(h0 * hd, Hl * hd)));
  if (c.attention_bias) {
    LLMRT_ASSIGN_OR_RETURN(q_bias, w.Vector(a + "q_proj.bias", H * hd, h0 * hd, Hl * hd));
    LLMRT_ASSIGN_OR_RETURN(k_bias, w.Vector(a + "k_proj.bias", KV * hd, kv0 * hd, KVl * hd));
    LLMRT_ASSIGN_OR_RETURN(v_bias, w.Vector(a + "v_proj.bias", KV * hd, kv0 * hd, KVl * hd));
  }
  if (c.use_qk_norm) {
    LLMRT_ASSIGN_OR_RETURN(q_norm, w.Vector(a + "q_norm.weight", hd));
    LLMRT_ASSIGN_OR_RETURN(k_norm, w.Vector(a + "k_norm.weight", hd));
  }
  return absl::OkStatus();
}

GqaBlock::Scratch GqaBlock::Take(Workspace& ws, int64_t T) const {
  const ModelConfig& c = s_->cfg;
  Scratch s;
  s.q = ws.Activation({T, s_->heads * c.head_dim});
  s.kv = ws.Activation({T, 2 * s_->kv_heads * c.head_dim});
  s.o = ws.Activation({T, s_->heads * c.head_dim});
  return s;
}

// Glm4MoeAttention.forward over the paged K/V cache.
absl::Status GqaBlock::Forward(PassContext& ctx, int64_t layer, const Tensor& x, const Tensor& out) {
  const ModelConfig& c = s_->cfg;
  Backend& be = ctx.be;
  const Tensor& positions = ctx.batch.positions;
  const int64_t H = s_->heads, KV = s_->kv_heads, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Scratch s = Take(ctx.ws, ctx.batch.num_tokens);
  const Tensor k = s.kv.Cols(0, KV * hd), v = s.kv.Cols(KV * hd, 2 * KV * hd);
  // q/k/v = proj(x) (+ bias)
  be.MatMul(x, q_proj, s.q);
  be.MatMul(x, k_proj, k);
  be.MatMul(x, v_proj, v);
  if (c.attention_bias) {
    be.AddBias(s.q, q_bias);
    be.AddBias(k, k_bias);
    be.AddBias(v, v_bias);
  }
  // Per-head RMSNorm of q and k (use_qk_norm), before rope.
  if (c.use_qk_norm) {
    be.HeadRmsNorm(s.q, hd, q_norm, eps, s.q);
    be.HeadRmsNorm(k, hd, k_norm, eps, k);
  }
  // Partial NeoX rotary on the first rot dims of every head.
  be.Rope(s.q, H, hd, /*offset=*/0, s_->rope, /*interleaved=*/false, positions);
  be.Rope(k, KV, hd, /*offset=*/0, s_->rope, /*interleaved=*/false, positions);
  WriteKv(ctx, layer, {k, v});
  be.GqaAttention(s.q, ctx.cache, layer, ctx.batch.attn, H, KV, hd,
                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), s.o);
  be.MatMul(s.o, o_proj, out);  // [T, hidden]: this rank's heads' share
  be.AllReduceSum(out);          // the sum over every rank's heads
  return absl::OkStatus();
}

}  // namespace

// The cache row: every KV head's key, then every KV head's value; quantizing codecs scale per
// head.
int64_t Glm4MoeRankKvHeads(const ModelConfig& c, int tp) {
  return tp <= c.num_kv_heads ? c.num_kv_heads / tp : 1;
}

KvShape Glm4MoeKvShape(const ModelConfig& c, int tp) {
  const int64_t kv = Glm4MoeRankKvHeads(c, tp);
  KvShape s;
  s.num_layers = c.num_layers;
  s.parts.push_back({kv * c.head_dim, c.head_dim, false});
  s.parts.push_back({kv * c.head_dim, c.head_dim, false});
  return s;
}

absl::StatusOr<std::unique_ptr<Model>> LoadGlm4Moe(const Checkpoint& ck, Backend& backend, const LoadOptions& options) {
  const ModelConfig& c = ck.config();
  auto shared = std::make_shared<GqaShared>();
  shared->cfg = c;
  const ShardPlan& sp = options.shard;
  shared->heads = sp.Part(c.num_heads);
  shared->h0 = sp.Begin(c.num_heads);
  shared->kv_heads = Glm4MoeRankKvHeads(c, sp.size);
  shared->kv0 = sp.size <= c.num_kv_heads ? sp.rank * shared->kv_heads : sp.rank / (sp.size / c.num_kv_heads);
  const int64_t rot = static_cast<int64_t>(c.head_dim * c.partial_rotary_factor);
  LLMRT_ASSIGN_OR_RETURN(shared->rope, PrepareRope(backend, ComputeRope(c.rope, rot, c.max_position_embeddings)));
  auto model = std::make_unique<DecoderModel>(c, Glm4MoeKvShape(c, sp.size), backend);
  WeightLoader w(ck, backend, options);
  LLMRT_RETURN_IF_ERROR(LoadDecoder<GqaBlock>(*model, ck, w, shared));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace llmrt
