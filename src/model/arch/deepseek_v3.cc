// DeepSeek-V3 attention (Kimi K2, K2-Thinking, K2.5+ text model), following transformers'
// modeling_deepseek_v3.py (pinned 5.24.0) block by block: MLA with weight absorption over a
// paged latent cache. Decode and prefill share one path: every token of the batch first writes
// its latent K/V into the paged cache, then attends in latent space over its causal context.
//
// GLM-5.x (modeling_glm_moe_dsa.py) is the same MLA plus DeepSeek Sparse Attention: a lightning
// indexer whose key is cached in the same rows as the latent (so KV codecs and integrity tags
// cover it) scores the causal context, and each query attends only to its index_topk best
// positions. "shared" indexer layers reuse the selection of the previous "full" layer.
//
// The layer loop, norms and feed-forward blocks are the shared decoder (src/model/decoder.h).

#include "src/model/arch/deepseek_v3.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/model/decoder.h"
#include "src/model/rope.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// transformers builds q_a_layernorm and kv_a_layernorm with the RMSNorm default eps, not
// config.rms_norm_eps (DeepSeek's reference code does the same).
constexpr float kLoraNormEps = 1e-6f;
// GlmMoeDsaIndexer.k_norm: nn.LayerNorm(index_head_dim, eps=1e-6).
constexpr float kIndexNormEps = 1e-6f;

// The DSA selection of one pass: whether any token's context exceeds index_topk, and the top-k
// positions of every token chosen by the last "full" indexer layer ([T, index_topk]).
struct DsaSelection {
  bool sparse = false;
  Tensor selected;
};

class DsaPassState final : public PassState {
 public:
  DsaPassState(int64_t top_k, std::shared_ptr<DsaSelection> sel) : top_k_(top_k), sel_(std::move(sel)) {}
  void TakeScratch(Workspace& ws, int64_t tokens) const override { ws.Take(DType::kI32, {tokens, top_k_}); }
  void Begin(PassContext& ctx) override {
    // Attention stays dense until some token's context exceeds index_topk.
    sel_->sparse = ctx.batch.attn.max_ctx > top_k_;
    sel_->selected = ctx.ws.Take(DType::kI32, {ctx.batch.num_tokens, top_k_});
  }

 private:
  int64_t top_k_;
  std::shared_ptr<DsaSelection> sel_;
};

// The DSA lightning indexer of one "full" layer.
struct Indexer {
  Weight wq_b;                 // [heads * dim, q_lora]
  Weight wk;                   // [dim, hidden]
  Weight k_norm, k_norm_bias;  // [dim]
  Weight weights_proj;         // [heads, hidden]
};

// What every layer's block shares: dimensions and the rotary table. Under tensor parallelism
// each rank runs `heads` = num_heads / ranks of the query heads (rows of q_b_proj / q_proj and
// kv_b_proj, columns of o_proj, whose partial sums an all-reduce adds); the latent path
// (q_a_proj, kv_a_proj_with_mqa and their norms) and GLM-5's indexer are replicated, so every
// rank caches the same latent rows and selects the same positions (docs/parallelism.md).
struct MlaShared {
  ModelConfig cfg;
  ShardPlan shard;
  int64_t heads = 0;  // on this rank
  MlaDims dims;
  RopeTable rope;
  float softmax_scale = 1.0f;
  std::shared_ptr<DsaSelection> dsa;  // GLM-5 only
};

class MlaBlock final : public AttentionBlock {
 public:
  explicit MlaBlock(std::shared_ptr<const MlaShared> s) : s_(std::move(s)) {}
  absl::Status Load(WeightLoader& w, int64_t layer);
  void TakeScratch(Workspace& ws, int64_t tokens) const override { Take(ws, tokens); }
  absl::Status Forward(PassContext& ctx, int64_t layer, const Tensor& x, const Tensor& out) override;

 private:
  struct Scratch {
    Tensor q;      // [T, H * (nope + rope)]
    Tensor qa;     // [T, q_lora]: the q LoRA output (q_resid), when q_lora_rank is set
    Tensor ckv;    // [T, kv_lora + rope]
    Tensor q_lat;  // [T, H * kv_lora]
    Tensor o_lat;  // [T, H * kv_lora]
    Tensor o;      // [T, H * v]
    Tensor ik;     // [T, index_head_dim]            (indexer layers)
    Tensor iq;     // [T, index_heads * index_head_dim]
    Tensor iw;     // [T, index_heads]
  };
  Scratch Take(Workspace& ws, int64_t T) const;
  void RunIndexer(PassContext& ctx, int64_t layer, const Scratch& s, const Tensor& x, const Tensor& latent,
                  const Tensor& k_rope);
  // The absorbed attention of the tokens of the sequences that bring fewer than `threshold` tokens
  // to the pass, whose other sequences the backend took in expanded form.
  absl::Status AbsorbedRest(PassContext& ctx, int64_t layer, const Scratch& s, int64_t threshold) const;

  std::shared_ptr<const MlaShared> s_;
  Weight q_proj;                 // [H*(nope+rope), hidden] when q_lora_rank is null
  Weight q_a, q_a_norm, q_b;     // q LoRA path
  Weight kv_a, kv_a_norm, kv_b, o_proj;
  bool has_indexer = false;      // DSA "full" layer
  Indexer indexer;
};

absl::Status MlaBlock::Load(WeightLoader& w, int64_t i) {
  const ModelConfig& c = s_->cfg;
  const int64_t H = c.num_heads, D = c.hidden_size;
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim, kvb = c.qk_nope_head_dim + c.v_head_dim;
  const int64_t h0 = s_->shard.Begin(H), Hl = s_->heads;  // this rank's heads [h0, h0 + Hl)
  const std::string a = absl::StrCat(c.prefix, "layers.", i, ".self_attn.");
  if (c.q_lora_rank > 0) {
    LLMRT_ASSIGN_OR_RETURN(q_a, w.Matrix(a + "q_a_proj.weight", c.q_lora_rank, D));
    LLMRT_ASSIGN_OR_RETURN(q_a_norm, w.Vector(a + "q_a_layernorm.weight", c.q_lora_rank));
    LLMRT_ASSIGN_OR_RETURN(q_b, w.Matrix(a + "q_b_proj.weight", H * qk, c.q_lora_rank, MatrixSlice::Rows(h0 * qk, Hl * qk)));
  } else {
    LLMRT_ASSIGN_OR_RETURN(q_proj, w.Matrix(a + "q_proj.weight", H * qk, D, MatrixSlice::Rows(h0 * qk, Hl * qk)));
  }
  LLMRT_ASSIGN_OR_RETURN(kv_a, w.Matrix(a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, D));
  LLMRT_ASSIGN_OR_RETURN(kv_a_norm, w.Vector(a + "kv_a_layernorm.weight", c.kv_lora_rank));
  LLMRT_ASSIGN_OR_RETURN(kv_b, w.MlaKvB(a + "kv_b_proj.weight", H * kvb, c.kv_lora_rank, MatrixSlice::Rows(h0 * kvb, Hl * kvb)));
  LLMRT_ASSIGN_OR_RETURN(o_proj, w.Matrix(a + "o_proj.weight", D, H * c.v_head_dim,
                                          MatrixSlice::Cols(h0 * c.v_head_dim, Hl * c.v_head_dim)));
  if (c.HasIndexer() && c.indexer_full[i]) {
    const std::string x = a + "indexer.";
    const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
    has_indexer = true;
    LLMRT_ASSIGN_OR_RETURN(indexer.wq_b, w.Matrix(x + "wq_b.weight", Hi * Di, c.q_lora_rank));
    LLMRT_ASSIGN_OR_RETURN(indexer.wk, w.Matrix(x + "wk.weight", Di, D));
    LLMRT_ASSIGN_OR_RETURN(indexer.k_norm, w.Vector(x + "k_norm.weight", Di));
    LLMRT_ASSIGN_OR_RETURN(indexer.k_norm_bias, w.Vector(x + "k_norm.bias", Di));
    LLMRT_ASSIGN_OR_RETURN(indexer.weights_proj, w.Matrix(x + "weights_proj.weight", Hi, D));
  }
  return absl::OkStatus();
}

MlaBlock::Scratch MlaBlock::Take(Workspace& ws, int64_t T) const {
  const ModelConfig& c = s_->cfg;
  const int64_t H = s_->heads;
  Scratch s;
  s.q = ws.Activation({T, H * (c.qk_nope_head_dim + c.qk_rope_head_dim)});
  if (c.q_lora_rank > 0) s.qa = ws.Activation({T, c.q_lora_rank});
  s.ckv = ws.Activation({T, c.kv_lora_rank + c.qk_rope_head_dim});
  s.q_lat = ws.Activation({T, H * c.kv_lora_rank});
  s.o_lat = ws.Activation({T, H * c.kv_lora_rank});
  s.o = ws.Activation({T, H * c.v_head_dim});
  if (has_indexer) {
    s.ik = ws.Activation({T, c.index_head_dim});
    s.iq = ws.Activation({T, c.index_n_heads * c.index_head_dim});
    s.iw = ws.Activation({T, c.index_n_heads});
  }
  return s;
}

// GlmMoeDsaIndexer.forward: writes the layer's cache row (latent, k_rope, indexer key) and,
// when some context exceeds index_topk, the top-k selection of every token.
void MlaBlock::RunIndexer(PassContext& ctx, int64_t layer, const Scratch& s, const Tensor& x, const Tensor& latent,
                          const Tensor& k_rope) {
  const ModelConfig& c = s_->cfg;
  Backend& be = ctx.be;
  const Tensor& positions = ctx.batch.positions;
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
  // k = k_norm(wk(x)), rope (interleaved) on its first qk_rope_head_dim dims.
  be.MatMul(x, indexer.wk, s.ik);  // [T, index_head_dim]
  be.LayerNorm(s.ik, indexer.k_norm, indexer.k_norm_bias, kIndexNormEps, s.ik);
  be.Rope(s.ik, /*heads=*/1, Di, /*offset=*/0, s_->rope, /*interleaved=*/true, positions);
  WriteKv(ctx, layer, {latent, k_rope, s.ik});
  DsaSelection& dsa = *s_->dsa;
  if (!dsa.sparse) return;
  // q = wq_b(q_resid) per index head, roped likewise; head weights = weights_proj(x). (transformers
  // also multiplies the weights by Hi^-0.5: a positive common factor, which leaves the ranking,
  // and so the selection, unchanged.)
  be.MatMul(s.qa, indexer.wq_b, s.iq);  // [T, Hi, Di]
  be.Rope(s.iq, Hi, Di, /*offset=*/0, s_->rope, /*interleaved=*/true, positions);
  be.MatMul(x, indexer.weights_proj, s.iw);  // [T, Hi]
  be.DsaSelect(s.iq, s.iw, ctx.cache, layer, ctx.batch.attn, Hi, Di, /*key_offset=*/c.kv_lora_rank + c.qk_rope_head_dim,
               1.0f / std::sqrt(static_cast<float>(Di)), c.index_topk, dsa.selected);
}

absl::Status MlaBlock::AbsorbedRest(PassContext& ctx, int64_t layer, const Scratch& s, int64_t threshold) const {
  Backend& be = ctx.be;
  AttentionBatch rest = ctx.batch.attn;
  const int64_t S = rest.num_seqs;
  if (rest.host_seq_tokens == nullptr) {
    return absl::InternalError("the backend took part of an MLA pass in expanded form without the pass's host facts");
  }
  // The runs of rows of the sequences left here (a sequence's rows are contiguous, in order).
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t q = 0, row = 0; q < S; row += rest.host_seq_tokens[q++]) {
    if (rest.host_seq_tokens[q] >= threshold) continue;
    if (!runs.empty() && runs.back().second == row) {
      runs.back().second += rest.host_seq_tokens[q];
    } else {
      runs.emplace_back(row, row + rest.host_seq_tokens[q]);
    }
  }
  if (runs.empty()) return absl::OkStatus();
  rest.skip_seq_tokens = threshold;
  for (const auto& [r0, r1] : runs) be.MlaAbsorbQuery(s.q.Rows(r0, r1), kv_b, s_->dims, s.q_lat.Rows(r0, r1));
  be.MlaAttention(s.q_lat, s.q, ctx.cache, layer, rest, s_->dims, s_->softmax_scale, nullptr, s.o_lat);
  for (const auto& [r0, r1] : runs) be.MlaProjectValue(s.o_lat.Rows(r0, r1), kv_b, s_->dims, s.o.Rows(r0, r1));
  return absl::OkStatus();
}

// DeepseekV3Attention.forward with the cache in latent form (docs/models.md, "MLA").
absl::Status MlaBlock::Forward(PassContext& ctx, int64_t layer, const Tensor& x, const Tensor& out) {
  const ModelConfig& c = s_->cfg;
  Backend& be = ctx.be;
  const Tensor& positions = ctx.batch.positions;
  const int64_t H = s_->heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  const Scratch s = Take(ctx.ws, ctx.batch.num_tokens);
  // q = q_b_proj(q_a_layernorm(q_a_proj(x)))  or  q_proj(x)
  if (c.q_lora_rank > 0) {
    be.MatMul(x, q_a, s.qa);
    be.RmsNorm(s.qa, q_a_norm, kLoraNormEps, s.qa);
    be.MatMul(s.qa, q_b, s.q);
  } else {
    be.MatMul(x, q_proj, s.q);
  }
  // compressed_kv = kv_a_proj_with_mqa(x); latent = kv_a_layernorm(compressed_kv[:kv_lora])
  const int64_t mla_width = c.kv_lora_rank + c.qk_rope_head_dim;
  be.MatMul(x, kv_a, s.ckv);
  const Tensor latent = s.ckv.Cols(0, c.kv_lora_rank);         // [T, kv_lora]
  const Tensor k_rope = s.ckv.Cols(c.kv_lora_rank, mla_width);  // [T, rope]
  be.RmsNorm(latent, kv_a_norm, kLoraNormEps, latent);
  // RoPE on q_rot (each head's last `rope` dims) and on the shared k_rot.
  be.Rope(s.q, H, qk, /*offset=*/c.qk_nope_head_dim, s_->rope, c.rope_interleave, positions);
  be.Rope(s.ckv, /*heads=*/1, mla_width, /*offset=*/c.kv_lora_rank, s_->rope, c.rope_interleave, positions);
  if (has_indexer) {
    RunIndexer(ctx, layer, s, x, latent, k_rope);
  } else {
    WriteKv(ctx, layer, {latent, k_rope});
  }
  // Absorbed attention: q_lat = W_UK^T q_nope; o_lat = softmax(q.k) . c; o = W_UV o_lat. A backend
  // may take a dense pass in expanded form instead (Backend::MlaExpandedAttention: prefill), whole
  // or for the sequences that bring at least `taken` tokens; the others run absorbed here.
  const DsaSelection* dsa = s_->dsa.get();
  const bool sparse = dsa != nullptr && dsa->sparse;
  const AttentionBatch& batch = ctx.batch.attn;
  const int64_t taken =
      sparse ? 0 : be.MlaExpandedAttention(s.q, kv_b, ctx.cache, layer, batch, s_->dims, s_->softmax_scale, s.o);
  if (taken <= 0) {
    be.MlaAbsorbQuery(s.q, kv_b, s_->dims, s.q_lat);
    be.MlaAttention(s.q_lat, s.q, ctx.cache, layer, batch, s_->dims, s_->softmax_scale,
                    sparse ? &dsa->selected : nullptr, s.o_lat);
    be.MlaProjectValue(s.o_lat, kv_b, s_->dims, s.o);
  } else if (batch.min_seq_tokens <= 0 || batch.min_seq_tokens < taken) {
    LLMRT_RETURN_IF_ERROR(AbsorbedRest(ctx, layer, s, taken));
  }
  be.MatMul(s.o, o_proj, out);  // [T, hidden]: this rank's heads' share
  be.AllReduceSum(out);          // the sum over every rank's heads
  return absl::OkStatus();
}

}  // namespace

// The cache row: the normalized latent and the roped shared key (kept in BF16 by quantizing
// codecs: rotary components are precision-sensitive), then GLM-5's indexer key.
KvShape DeepseekV3KvShape(const ModelConfig& c) {
  KvShape s;
  s.num_layers = c.num_layers;
  s.parts.push_back({c.kv_lora_rank, 128, false});
  s.parts.push_back({c.qk_rope_head_dim, 128, true});
  if (c.HasIndexer()) s.parts.push_back({c.index_head_dim, 128, false});
  return s;
}

absl::StatusOr<std::unique_ptr<Model>> LoadDeepseekV3(const Checkpoint& ck, Backend& backend,
                                                      const LoadOptions& options) {
  const ModelConfig& c = ck.config();
  auto shared = std::make_shared<MlaShared>();
  shared->cfg = c;
  shared->shard = options.shard;
  shared->heads = options.shard.Part(c.num_heads);
  shared->dims = MlaDims{shared->heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank};
  LLMRT_ASSIGN_OR_RETURN(shared->rope,
                         PrepareRope(backend, ComputeRope(c.rope, c.qk_rope_head_dim, c.max_position_embeddings)));
  shared->softmax_scale = MlaSoftmaxScale(c);
  auto model = std::make_unique<DecoderModel>(c, DeepseekV3KvShape(c), backend);
  if (c.HasIndexer()) {
    shared->dsa = std::make_shared<DsaSelection>();
    model->set_pass_state(std::make_unique<DsaPassState>(c.index_topk, shared->dsa));
  }
  WeightLoader w(ck, backend, options);
  LLMRT_RETURN_IF_ERROR(LoadDecoder<MlaBlock>(*model, ck, w, shared));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace llmrt
