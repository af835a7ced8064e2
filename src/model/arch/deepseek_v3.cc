// DeepSeek-V3 forward pass, following transformers' modeling_deepseek_v3.py (pinned 5.24.0)
// block by block. Decode and prefill share one path: every token of the batch first writes its
// latent K/V into the paged cache, then attends in latent space over its causal context.
//
// GLM-5.x (modeling_glm_moe_dsa.py) is the same MLA plus DeepSeek Sparse Attention: a lightning
// indexer whose key is cached in the same rows as the latent (so KV codecs and integrity tags
// cover it) scores the causal context, and each query attends only to its index_topk best
// positions. "shared" indexer layers reuse the selection of the previous "full" layer.

#include "src/model/arch/deepseek_v3.h"

#include <cmath>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/model/arch/common.h"
#include "src/model/arch/ffn.h"
#include "src/model/rope.h"
#include "src/model/weights.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// transformers builds q_a_layernorm and kv_a_layernorm with the RMSNorm default eps, not
// config.rms_norm_eps (DeepSeek's reference code does the same).
constexpr float kLoraNormEps = 1e-6f;
// GlmMoeDsaIndexer.k_norm: nn.LayerNorm(index_head_dim, eps=1e-6).
constexpr float kIndexNormEps = 1e-6f;

// The DSA lightning indexer of one "full" layer.
struct Indexer {
  Weight wq_b;          // [heads * dim, q_lora]
  Weight wk;            // [dim, hidden]
  Weight k_norm, k_norm_bias;  // [dim]
  Weight weights_proj;  // [heads, hidden]
};

struct Layer {
  Weight input_norm, post_norm;
  // Attention.
  Weight q_proj;                    // [H*(nope+rope), hidden] when q_lora_rank is null
  Weight q_a, q_a_norm, q_b;        // q LoRA path
  Weight kv_a, kv_a_norm, kv_b, o_proj;
  FfnWeights ffn;                   // dense MLP or MoE
  bool has_indexer = false;         // DSA "full" layer
  Indexer indexer;
};

// Per-forward DSA state: whether any token's context exceeds index_topk, and the selection of
// the last full indexer layer ([T, index_topk]).
struct DsaState {
  bool sparse = false;
  Tensor selected;
};

class DeepseekV3 final : public Model {
 public:
  DeepseekV3(const ModelConfig& c, Backend& b) : cfg_(c), be_(b) {}

  absl::Status Load(const Checkpoint& ck, const LoadOptions& options);
  const ModelConfig& config() const override { return cfg_; }
  int64_t kv_width() const override { return cfg_.KvWidth(); }
  uint64_t num_parameters() const override { return num_parameters_; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::array<uint64_t, 4> resident_bytes() const override { return resident_bytes_; }
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& cache, const Tensor& logits) override;

 private:
  absl::Status Attention(const Layer& l, int64_t layer, const ForwardBatch& b, const KvCacheView& cache,
                         const Tensor& x, DsaState& dsa, const Tensor& out);
  absl::Status RunIndexer(const Indexer& ix, int64_t layer, const ForwardBatch& b, const KvCacheView& cache,
                          const Tensor& x, const Tensor& q_resid, const Tensor& latent, const Tensor& k_rope,
                          DsaState& dsa);
  absl::StatusOr<Tensor> Scratch(std::initializer_list<int64_t> shape, DType dt = DType::kF32) {
    return be_.Allocate(dt, shape);
  }

  ModelConfig cfg_;
  Backend& be_;
  MlaDims dims_;
  RopeParams rope_;
  float softmax_scale_ = 1.0f;
  Weight embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  uint64_t num_parameters_ = 0;
  uint64_t weight_bytes_ = 0;
  std::array<uint64_t, 4> resident_bytes_{};
};

absl::Status DeepseekV3::Load(const Checkpoint& ck, const LoadOptions& options) {
  const ModelConfig& c = cfg_;
  WeightLoader w(ck, be_, options);
  const int64_t H = c.num_heads, D = c.hidden_size;
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  dims_ = MlaDims{H, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank};
  rope_ = ComputeRope(c.rope, c.qk_rope_head_dim, c.max_position_embeddings);
  softmax_scale_ = MlaSoftmaxScale(c);

  LLMRT_ASSIGN_OR_RETURN(embed_, w.Dense(c.prefix + "embed_tokens.weight", c.vocab_size, D));
  LLMRT_ASSIGN_OR_RETURN(final_norm_, w.Vector(c.prefix + "norm.weight", D));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    LLMRT_ASSIGN_OR_RETURN(lm_head_, w.Matrix(c.lm_head_prefix + "weight", c.vocab_size, D));
  }
  layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat(c.prefix, "layers.", i, ".");
    const std::string a = p + "self_attn.";
    LLMRT_ASSIGN_OR_RETURN(l.input_norm, w.Vector(p + "input_layernorm.weight", D));
    LLMRT_ASSIGN_OR_RETURN(l.post_norm, w.Vector(p + "post_attention_layernorm.weight", D));
    if (c.q_lora_rank > 0) {
      LLMRT_ASSIGN_OR_RETURN(l.q_a, w.Matrix(a + "q_a_proj.weight", c.q_lora_rank, D));
      LLMRT_ASSIGN_OR_RETURN(l.q_a_norm, w.Vector(a + "q_a_layernorm.weight", c.q_lora_rank));
      LLMRT_ASSIGN_OR_RETURN(l.q_b, w.Matrix(a + "q_b_proj.weight", H * qk, c.q_lora_rank));
    } else {
      LLMRT_ASSIGN_OR_RETURN(l.q_proj, w.Matrix(a + "q_proj.weight", H * qk, D));
    }
    LLMRT_ASSIGN_OR_RETURN(l.kv_a, w.Matrix(a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, D));
    LLMRT_ASSIGN_OR_RETURN(l.kv_a_norm, w.Vector(a + "kv_a_layernorm.weight", c.kv_lora_rank));
    LLMRT_ASSIGN_OR_RETURN(l.kv_b, w.Dense(a + "kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim),
                                            c.kv_lora_rank));
    LLMRT_ASSIGN_OR_RETURN(l.o_proj, w.Matrix(a + "o_proj.weight", D, H * c.v_head_dim));
    if (c.HasIndexer() && c.indexer_full[i]) {
      const std::string x = a + "indexer.";
      const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
      l.has_indexer = true;
      LLMRT_ASSIGN_OR_RETURN(l.indexer.wq_b, w.Matrix(x + "wq_b.weight", Hi * Di, c.q_lora_rank));
      LLMRT_ASSIGN_OR_RETURN(l.indexer.wk, w.Matrix(x + "wk.weight", Di, D));
      LLMRT_ASSIGN_OR_RETURN(l.indexer.k_norm, w.Vector(x + "k_norm.weight", Di));
      LLMRT_ASSIGN_OR_RETURN(l.indexer.k_norm_bias, w.Vector(x + "k_norm.bias", Di));
      LLMRT_ASSIGN_OR_RETURN(l.indexer.weights_proj, w.Matrix(x + "weights_proj.weight", Hi, D));
    }
    LLMRT_RETURN_IF_ERROR(LoadFfn(w, c, p + "mlp.", c.IsMoeLayer(i), &l.ffn));
  }
  LogSkippedMtpLayers(ck);
  num_parameters_ = w.num_parameters();
  weight_bytes_ = w.weight_bytes();
  resident_bytes_ = w.resident_bytes();
  return absl::OkStatus();
}

// DeepseekV3Attention.forward with the cache in latent form (MODELS.md section 1, "absorb").
// GlmMoeDsaIndexer.forward: writes the layer's cache row (latent, k_rope, indexer key) and,
// when some context exceeds index_topk, the top-k selection of every token.
absl::Status DeepseekV3::RunIndexer(const Indexer& ix, int64_t layer, const ForwardBatch& b,
                                    const KvCacheView& cache, const Tensor& x, const Tensor& q_resid,
                                    const Tensor& latent, const Tensor& k_rope, DsaState& dsa) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.num_tokens, Hi = c.index_n_heads, Di = c.index_head_dim;
  // k = k_norm(wk(x)), rope (interleaved) on its first qk_rope_head_dim dims.
  LLMRT_ASSIGN_OR_RETURN(Tensor k, Scratch({T, Di}));  // [T, index_head_dim]
  be_.MatMul(x, ix.wk, k);
  be_.LayerNorm(k, ix.k_norm, ix.k_norm_bias, kIndexNormEps, k);
  be_.Rope(k, /*heads=*/1, Di, /*offset=*/0, rope_.inv_freq, rope_.attention_factor, /*interleaved=*/true,
           b.positions);
  be_.KvWrite(cache, layer, {latent, k_rope, k}, b.attn);
  if (!dsa.sparse) return absl::OkStatus();
  // q = wq_b(q_resid) per index head, roped likewise; head weights = weights_proj(x). (transformers
  // also multiplies the weights by Hi^-0.5: a positive common factor, which leaves the ranking,
  // and so the selection, unchanged.)
  LLMRT_ASSIGN_OR_RETURN(Tensor q, Scratch({T, Hi * Di}));  // [T, Hi, Di]
  be_.MatMul(q_resid, ix.wq_b, q);
  be_.Rope(q, Hi, Di, /*offset=*/0, rope_.inv_freq, rope_.attention_factor, /*interleaved=*/true, b.positions);
  LLMRT_ASSIGN_OR_RETURN(Tensor hw, Scratch({T, Hi}));  // [T, Hi]
  be_.MatMul(x, ix.weights_proj, hw);
  be_.DsaSelect(q, hw, cache, layer, b.attn, Hi, Di, /*key_offset=*/c.kv_lora_rank + c.qk_rope_head_dim,
                1.0f / std::sqrt(static_cast<float>(Di)), c.index_topk, dsa.selected);
  return absl::OkStatus();
}

absl::Status DeepseekV3::Attention(const Layer& l, int64_t layer, const ForwardBatch& b,
                                   const KvCacheView& cache, const Tensor& x, DsaState& dsa, const Tensor& out) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.num_tokens, H = c.num_heads;
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  // q = q_b_proj(q_a_layernorm(q_a_proj(x)))  or  q_proj(x)
  LLMRT_ASSIGN_OR_RETURN(Tensor q, Scratch({T, H * qk}));  // [T, H, nope + rope]
  Tensor qa;                                                // [T, q_lora]: q_resid
  if (c.q_lora_rank > 0) {
    LLMRT_ASSIGN_OR_RETURN(qa, Scratch({T, c.q_lora_rank}));
    be_.MatMul(x, l.q_a, qa);
    be_.RmsNorm(qa, l.q_a_norm, kLoraNormEps, qa);
    be_.MatMul(qa, l.q_b, q);
  } else {
    be_.MatMul(x, l.q_proj, q);
  }
  // compressed_kv = kv_a_proj_with_mqa(x); latent = kv_a_layernorm(compressed_kv[:kv_lora])
  const int64_t mla_width = c.kv_lora_rank + c.qk_rope_head_dim;
  LLMRT_ASSIGN_OR_RETURN(Tensor ckv, Scratch({T, mla_width}));  // [T, kv_lora + rope]
  be_.MatMul(x, l.kv_a, ckv);
  const Tensor latent = ckv.Cols(0, c.kv_lora_rank);                 // [T, kv_lora]
  const Tensor k_rope = ckv.Cols(c.kv_lora_rank, mla_width);       // [T, rope]
  be_.RmsNorm(latent, l.kv_a_norm, kLoraNormEps, latent);
  // RoPE on q_rot (each head's last `rope` dims) and on the shared k_rot.
  be_.Rope(q, H, qk, /*offset=*/c.qk_nope_head_dim, rope_.inv_freq, rope_.attention_factor,
           c.rope_interleave, b.positions);
  be_.Rope(ckv, /*heads=*/1, mla_width, /*offset=*/c.kv_lora_rank, rope_.inv_freq,
           rope_.attention_factor, c.rope_interleave, b.positions);
  if (l.has_indexer) {
    LLMRT_RETURN_IF_ERROR(RunIndexer(l.indexer, layer, b, cache, x, qa, latent, k_rope, dsa));
  } else {
    be_.KvWrite(cache, layer, {latent, k_rope}, b.attn);
  }
  // Absorbed attention: q_lat = W_UK^T q_nope; o_lat = softmax(q.k) . c; o = W_UV o_lat.
  LLMRT_ASSIGN_OR_RETURN(Tensor q_lat, Scratch({T, H * c.kv_lora_rank}));  // [T, H, kv_lora]
  be_.MlaAbsorbQuery(q, l.kv_b, dims_, q_lat);
  LLMRT_ASSIGN_OR_RETURN(Tensor o_lat, Scratch({T, H * c.kv_lora_rank}));  // [T, H, kv_lora]
  be_.MlaAttention(q_lat, q, cache, layer, b.attn, dims_, softmax_scale_, dsa.sparse ? &dsa.selected : nullptr,
                   o_lat);
  LLMRT_ASSIGN_OR_RETURN(Tensor o, Scratch({T, H * c.v_head_dim}));  // [T, H * v]
  be_.MlaProjectValue(o_lat, l.kv_b, dims_, o);
  be_.MatMul(o, l.o_proj, out);  // [T, hidden]
  return absl::OkStatus();
}

absl::Status DeepseekV3::Forward(const ForwardBatch& b, const KvCacheView& cache, const Tensor& logits) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.num_tokens, D = c.hidden_size;
  LLMRT_ASSIGN_OR_RETURN(Tensor x, Scratch({T, D}));     // [T, hidden] residual stream
  LLMRT_ASSIGN_OR_RETURN(Tensor h, Scratch({T, D}));     // [T, hidden] normed
  LLMRT_ASSIGN_OR_RETURN(Tensor y, Scratch({T, D}));     // [T, hidden] block output
  be_.Embedding(embed_, b.token_ids, x);
  // DSA: attention stays dense until some token's context exceeds index_topk.
  DsaState dsa;
  if (c.HasIndexer() && b.attn.max_ctx > c.index_topk) {
    dsa.sparse = true;
    LLMRT_ASSIGN_OR_RETURN(dsa.selected, Scratch({T, c.index_topk}, DType::kI32));
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const Layer& l = layers_[i];
    // h = x + Attn(RMSNorm(x))
    be_.RmsNorm(x, l.input_norm, static_cast<float>(c.rms_norm_eps), h);
    LLMRT_RETURN_IF_ERROR(Attention(l, i, b, cache, h, dsa, y));
    be_.Add(x, y, x);
    // out = h + FFN(RMSNorm(h))
    be_.RmsNorm(x, l.post_norm, static_cast<float>(c.rms_norm_eps), h);
    LLMRT_RETURN_IF_ERROR(RunFfn(be_, c, l.ffn, h, y, b.decode_phase));  // DeepseekV3MoE / DeepseekV3MLP
    be_.Add(x, y, x);
  }
  return ComputeLogits(be_, b, x, final_norm_, static_cast<float>(c.rms_norm_eps), lm_head_, logits);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadDeepseekV3(const Checkpoint& ck, Backend& backend, const LoadOptions& options) {
  auto m = std::make_unique<DeepseekV3>(ck.config(), backend);
  LLMRT_RETURN_IF_ERROR(m->Load(ck, options));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace llmrt
