#include "src/model/decoder.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/util/log.h"
#include "src/util/status.h"

namespace llmrt {

absl::Status DecoderModel::Load(
    const Checkpoint& ck, WeightLoader& w,
    const std::function<absl::StatusOr<std::unique_ptr<AttentionBlock>>(int64_t layer)>& make_attention) {
  const ModelConfig& c = cfg_;
  const int64_t D = c.hidden_size;
  // Vocab-parallel embedding and lm_head: this rank's rows of the vocabulary.
  const ShardPlan& sp = w.options().shard;
  sharded_ = sp.sharded();
  vocab_begin_ = sp.Begin(c.vocab_size);
  const MatrixSlice vocab = MatrixSlice::Rows(vocab_begin_, sp.Part(c.vocab_size));
  LLMRT_ASSIGN_OR_RETURN(embed_, w.Dense(c.prefix + "embed_tokens.weight", c.vocab_size, D, vocab));
  LLMRT_ASSIGN_OR_RETURN(final_norm_, w.Vector(c.prefix + "norm.weight", D));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    LLMRT_ASSIGN_OR_RETURN(lm_head_, w.Matrix(c.lm_head_prefix + "weight", c.vocab_size, D, vocab));
  }
  layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    DecoderLayer& l = layers_[i];
    const std::string p = absl::StrCat(c.prefix, "layers.", i, ".");
    LLMRT_ASSIGN_OR_RETURN(l.input_norm, w.Vector(p + "input_layernorm.weight", D));
    LLMRT_ASSIGN_OR_RETURN(l.post_norm, w.Vector(p + "post_attention_layernorm.weight", D));
    LLMRT_ASSIGN_OR_RETURN(l.attention, make_attention(i));
    LLMRT_RETURN_IF_ERROR(LoadFfn(w, c, p + "mlp.", c.IsMoeLayer(i), &l.ffn));
  }
  LogSkippedMtpLayers(ck);
  num_parameters_ = w.num_parameters();
  weight_bytes_ = w.weight_bytes();
  resident_bytes_ = w.resident_bytes();
  return absl::OkStatus();
}

DecoderModel::LogitScratch DecoderModel::TakeLogitScratch(Workspace& ws, int64_t S) const {
  LogitScratch l;
  l.last = ws.Activation({S, cfg_.hidden_size});  // [S, hidden]
  if (sharded_) {
    l.local = ws.Activation({S, lm_head_.rows});     // [S, vocab / ranks]
    l.gathered = ws.Activation({S * cfg_.vocab_size});  // [ranks, S, vocab / ranks]
  }
  return l;
}

DecoderModel::Stream DecoderModel::TakeStream(Workspace& ws, int64_t T) const {
  const int64_t D = cfg_.hidden_size;
  Stream s;
  s.x = ws.Activation({T, D});  // [T, hidden] residual stream
  s.h = ws.Activation({T, D});  // [T, hidden] normed
  s.y = ws.Activation({T, D});  // [T, hidden] block output
  return s;
}

uint64_t DecoderModel::WorkspaceBytes(int64_t max_tokens, int64_t max_logit_rows) const {
  Workspace ws = Workspace::Measuring(be_.activation_dtype());
  TakeStream(ws, max_tokens);
  if (pass_state_) pass_state_->TakeScratch(ws, max_tokens);
  const uint64_t base = ws.mark();
  for (const DecoderLayer& l : layers_) {  // a layer's blocks reuse the space after `base`
    ws.Reset(base);
    l.attention->TakeScratch(ws, max_tokens);
    ws.Reset(base);
    TakeFfnScratch(ws, cfg_, l.ffn, max_tokens);
  }
  ws.Reset(base);
  TakeLogitScratch(ws, max_logit_rows);
  return ws.high_water();
}

absl::Status DecoderModel::Forward(const ForwardBatch& b, const KvCacheView& cache, Workspace& ws,
                                   const Tensor& logits) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.num_tokens;
  const float eps = static_cast<float>(c.rms_norm_eps);
  ws.Reset();
  PassContext ctx{be_, b, cache, ws};
  const Stream s = TakeStream(ws, T);
  if (pass_state_) pass_state_->Begin(ctx);
  const uint64_t base = ws.mark();  // each block's scratch starts here
  if (sharded_) {
    be_.EmbeddingShard(embed_, vocab_begin_, b.token_ids, s.x);  // this rank's ids; zeros for the others
    be_.AllReduceSum(s.x);
  } else {
    be_.Embedding(embed_, b.token_ids, s.x);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const DecoderLayer& l = layers_[i];
    // h = x + Attn(RMSNorm(x))
    be_.RmsNorm(s.x, l.input_norm, eps, s.h);
    ws.Reset(base);
    LLMRT_RETURN_IF_ERROR(l.attention->Forward(ctx, i, s.h, s.y));
    be_.Add(s.x, s.y, s.x);
    // out = h + FFN(RMSNorm(h))    (DeepseekV3MoE / Glm4MoeMoE, or the dense MLP)
    be_.RmsNorm(s.x, l.post_norm, eps, s.h);
    ws.Reset(base);
    LLMRT_RETURN_IF_ERROR(RunFfn(ctx, c, l.ffn, s.h, s.y));
    be_.Add(s.x, s.y, s.x);
  }
  // logits [S, vocab] = lm_head(RMSNorm(x[rows])) for the batch's logit rows only: the rows whose
  // next token is sampled or scored.
  const int64_t S = b.num_logit_rows;
  if (S == 0) return absl::OkStatus();
  ws.Reset(base);
  const LogitScratch l = TakeLogitScratch(ws, S);
  be_.GatherRows(s.x, b.logit_rows, l.last);
  be_.RmsNorm(l.last, final_norm_, eps, l.last);
  if (sharded_) {
    be_.MatMul(l.last, lm_head_, l.local);  // [S, vocab / ranks]: this rank's vocabulary rows
    be_.AllGatherColumns(l.local, l.gathered, logits.Rows(0, S));
  } else {
    be_.MatMul(l.last, lm_head_, logits.Rows(0, S));
  }
  return absl::OkStatus();
}

absl::StatusOr<RopeTable> PrepareRope(Backend& be, const RopeParams& p) {
  RopeTable r;
  r.half = static_cast<int64_t>(p.inv_freq.size());
  r.attention_factor = p.attention_factor;
  LLMRT_ASSIGN_OR_RETURN(r.inv_freq, be.Allocate(DType::kF32, {std::max<int64_t>(r.half, 1)}));
  LLMRT_RETURN_IF_ERROR(be.Upload(p.inv_freq.data(), p.inv_freq.size() * sizeof(float), r.inv_freq));
  return r;
}

void WriteKv(PassContext& ctx, int64_t layer, std::initializer_list<Tensor> parts) {
  if (ctx.cache.scale_set != nullptr && ctx.cache.scale_set[layer] == 0) {
    ctx.be.KvCalibrate(ctx.cache, layer, parts);
    ctx.cache.scale_set[layer] = 1;
  }
  ctx.be.KvWrite(ctx.cache, layer, parts, ctx.batch.attn);
}

void LogSkippedMtpLayers(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  const std::string prefix = c.prefix + "layers.";
  std::set<int64_t> layers;
  int64_t tensors = 0;
  for (auto it = ck.tensors().lower_bound(prefix); it != ck.tensors().end(); ++it) {
    const std::string& name = it->first;
    if (name.compare(0, prefix.size(), prefix) != 0) break;
    const size_t dot = name.find('.', prefix.size());
    int64_t layer = 0;
    if (dot == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name).substr(prefix.size(), dot - prefix.size()), &layer)) {
      continue;
    }
    if (layer >= c.num_layers) {
      layers.insert(layer);
      ++tensors;
    }
  }
  if (layers.empty()) return;
  Log(LogLevel::kInfo, absl::StrCat(ck.dir(), ": skipping ", layers.size(),
                                    " multi-token-prediction layer(s) from layer ", *layers.begin(), " (", tensors,
                                    " tensors; num_nextn_predict_layers=", c.num_nextn_predict_layers,
                                    "): llmrt does not run speculative MTP heads"));
}

}  // namespace llmrt
