// GLM-4.5 forward pass, following transformers' modeling_glm4_moe.py (pinned 5.24.0).

#include "src/model/arch/glm4_moe.h"

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

struct Layer {
  Weight input_norm, post_norm;
  Weight q_proj, k_proj, v_proj, o_proj;  // [H*hd, D], [KVH*hd, D] x2, [D, H*hd]
  Weight q_bias, k_bias, v_bias;          // when attention_bias
  Weight q_norm, k_norm;                  // [hd] when use_qk_norm
  FfnWeights ffn;
};

class Glm4Moe final : public Model {
 public:
  Glm4Moe(const ModelConfig& c, Backend& b) : cfg_(c), be_(b) {}
  absl::Status Load(const Checkpoint& ck, const LoadOptions& options);
  const ModelConfig& config() const override { return cfg_; }
  int64_t kv_width() const override { return cfg_.KvWidth(); }
  uint64_t num_parameters() const override { return num_parameters_; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::array<uint64_t, 4> resident_bytes() const override { return resident_bytes_; }
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& cache, const Tensor& logits) override;

 private:
  absl::Status Attention(const Layer& l, int64_t layer, const ForwardBatch& b, const KvCacheView& cache,
                         const Tensor& x, const Tensor& out);

  ModelConfig cfg_;
  Backend& be_;
  RopeParams rope_;
  Weight embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  uint64_t num_parameters_ = 0, weight_bytes_ = 0;
  std::array<uint64_t, 4> resident_bytes_{};
};

absl::Status Glm4Moe::Load(const Checkpoint& ck, const LoadOptions& options) {
  const ModelConfig& c = cfg_;
  WeightLoader w(ck, be_, options);
  const int64_t D = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
  rope_ = ComputeRope(c.rope, static_cast<int64_t>(hd * c.partial_rotary_factor), c.max_position_embeddings);
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
    LLMRT_ASSIGN_OR_RETURN(l.q_proj, w.Matrix(a + "q_proj.weight", H * hd, D));
    LLMRT_ASSIGN_OR_RETURN(l.k_proj, w.Matrix(a + "k_proj.weight", KV * hd, D));
    LLMRT_ASSIGN_OR_RETURN(l.v_proj, w.Matrix(a + "v_proj.weight", KV * hd, D));
    LLMRT_ASSIGN_OR_RETURN(l.o_proj, w.Matrix(a + "o_proj.weight", D, H * hd));
    if (c.attention_bias) {
      LLMRT_ASSIGN_OR_RETURN(l.q_bias, w.Vector(a + "q_proj.bias", H * hd));
      LLMRT_ASSIGN_OR_RETURN(l.k_bias, w.Vector(a + "k_proj.bias", KV * hd));
      LLMRT_ASSIGN_OR_RETURN(l.v_bias, w.Vector(a + "v_proj.bias", KV * hd));
    }
    if (c.use_qk_norm) {
      LLMRT_ASSIGN_OR_RETURN(l.q_norm, w.Vector(a + "q_norm.weight", hd));
      LLMRT_ASSIGN_OR_RETURN(l.k_norm, w.Vector(a + "k_norm.weight", hd));
    }
    LLMRT_RETURN_IF_ERROR(LoadFfn(w, c, p + "mlp.", c.IsMoeLayer(i), &l.ffn));
  }
  LogSkippedMtpLayers(ck);
  num_parameters_ = w.num_parameters();
  weight_bytes_ = w.weight_bytes();
  resident_bytes_ = w.resident_bytes();
  return absl::OkStatus();
}

// Glm4MoeAttention.forward over the paged K/V cache.
absl::Status Glm4Moe::Attention(const Layer& l, int64_t layer, const ForwardBatch& b, const KvCacheView& cache,
                                const Tensor& x, const Tensor& out) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.num_tokens, H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
  LLMRT_ASSIGN_OR_RETURN(Tensor q, be_.Allocate(DType::kF32, {T, H * hd}));   // [T, H, hd]
  LLMRT_ASSIGN_OR_RETURN(Tensor kv, be_.Allocate(DType::kF32, {T, 2 * KV * hd}));  // [T, K heads | V heads]
  const Tensor k = kv.Cols(0, KV * hd), v = kv.Cols(KV * hd, 2 * KV * hd);
  // q/k/v = proj(x) (+ bias)
  be_.MatMul(x, l.q_proj, q);
  be_.MatMul(x, l.k_proj, k);
  be_.MatMul(x, l.v_proj, v);
  if (c.attention_bias) {
    be_.AddBias(q, l.q_bias);
    be_.AddBias(k, l.k_bias);
    be_.AddBias(v, l.v_bias);
  }
  // Per-head RMSNorm of q and k (use_qk_norm), before rope.
  if (c.use_qk_norm) {
    const Tensor qh = q.Reshape({T * H, hd});
    be_.RmsNorm(qh, l.q_norm, static_cast<float>(c.rms_norm_eps), qh);
    for (int64_t t = 0; t < T; ++t) {  // k is a column view of kv: one row of KV heads at a time
      const Tensor kt = k.Rows(t, t + 1).Reshape({KV, hd});
      be_.RmsNorm(kt, l.k_norm, static_cast<float>(c.rms_norm_eps), kt);
    }
  }
  // Partial NeoX rotary on the first rot dims of every head.
  be_.Rope(q, H, hd, /*offset=*/0, rope_.inv_freq, rope_.attention_factor, /*interleaved=*/false, b.positions);
  be_.Rope(k, KV, hd, /*offset=*/0, rope_.inv_freq, rope_.attention_factor, /*interleaved=*/false, b.positions);
  be_.KvWrite(cache, layer, {k, v}, b.attn);
  LLMRT_ASSIGN_OR_RETURN(Tensor o, be_.Allocate(DType::kF32, {T, H * hd}));  // [T, H, hd]
  be_.GqaAttention(q, cache, layer, b.attn, H, KV, hd, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), o);
  be_.MatMul(o, l.o_proj, out);  // [T, hidden]
  return absl::OkStatus();
}

absl::Status Glm4Moe::Forward(const ForwardBatch& b, const KvCacheView& cache, const Tensor& logits) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.num_tokens, D = c.hidden_size;
  LLMRT_ASSIGN_OR_RETURN(Tensor x, be_.Allocate(DType::kF32, {T, D}));  // residual stream
  LLMRT_ASSIGN_OR_RETURN(Tensor h, be_.Allocate(DType::kF32, {T, D}));
  LLMRT_ASSIGN_OR_RETURN(Tensor y, be_.Allocate(DType::kF32, {T, D}));
  be_.Embedding(embed_, b.token_ids, x);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const Layer& l = layers_[i];
    be_.RmsNorm(x, l.input_norm, static_cast<float>(c.rms_norm_eps), h);
    LLMRT_RETURN_IF_ERROR(Attention(l, i, b, cache, h, y));
    be_.Add(x, y, x);
    be_.RmsNorm(x, l.post_norm, static_cast<float>(c.rms_norm_eps), h);
    LLMRT_RETURN_IF_ERROR(RunFfn(be_, c, l.ffn, h, y, b.decode_phase));  // Glm4MoeMoE / Glm4MoeMLP
    be_.Add(x, y, x);
  }
  return ComputeLogits(be_, b, x, final_norm_, static_cast<float>(c.rms_norm_eps), lm_head_, logits);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadGlm4Moe(const Checkpoint& ck, Backend& backend, const LoadOptions& options) {
  auto m = std::make_unique<Glm4Moe>(ck.config(), backend);
  LLMRT_RETURN_IF_ERROR(m->Load(ck, options));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace llmrt
