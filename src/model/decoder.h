// The decoder every supported architecture is: token embedding, then per layer
//   h = x + Attention(RMSNorm(x));  x = h + FFN(RMSNorm(h))
// then the final RMSNorm and lm_head over the rows whose logits are wanted. One loop runs it;
// what differs between architectures is the attention block (MLA, MLA with the DSA indexer, GQA)
// and the feed-forward block (dense SwiGLU or MoE), each a variant chosen per layer at load. An
// architecture file (src/model/arch/) holds only what is particular to it.
#ifndef LLMRT_MODEL_DECODER_H_
#define LLMRT_MODEL_DECODER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/arch/ffn.h"
#include "src/model/model.h"
#include "src/model/pass.h"
#include "src/model/rope.h"
#include "src/model/weights.h"
#include "src/model/workspace.h"

namespace llmrt {

// An attention block variant: reads the normed hidden states, writes the layer's cache rows and
// the attention output.
class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // Takes every buffer Forward uses for `tokens` tokens (see Workspace).
  virtual void TakeScratch(Workspace& ws, int64_t tokens) const = 0;
  // out [T, hidden] = attention over x [T, hidden] for `layer`.
  virtual absl::Status Forward(PassContext& ctx, int64_t layer, const Tensor& x, const Tensor& out) = 0;
};

// State an architecture keeps across the layers of one pass (the DSA selection shared by the
// "shared" indexer layers), set up before the first layer.
class PassState {
 public:
  virtual ~PassState() = default;
  virtual void TakeScratch(Workspace& ws, int64_t tokens) const = 0;
  virtual void Begin(PassContext& ctx) = 0;
};

struct DecoderLayer {
  Weight input_norm, post_norm;  // [hidden]
  std::unique_ptr<AttentionBlock> attention;
  FfnWeights ffn;  // dense MLP or MoE
};

class DecoderModel final : public Model {
 public:
  DecoderModel(const ModelConfig& c, KvShape kv_shape, Backend& backend)
      : cfg_(c), kv_shape_(std::move(kv_shape)), be_(backend) {}

  // Loads the embedding, final norm, lm_head and every layer's norms and feed-forward block;
  // make_attention builds each layer's attention block.
  absl::Status Load(const Checkpoint& ck, WeightLoader& w,
                    const std::function<absl::StatusOr<std::unique_ptr<AttentionBlock>>(int64_t layer)>& make_attention);
  void set_pass_state(std::unique_ptr<PassState> s) { pass_state_ = std::move(s); }

  const ModelConfig& config() const override { return cfg_; }
  const KvShape& kv_shape() const override { return kv_shape_; }
  uint64_t num_parameters() const override { return num_parameters_; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  const BytesByFormat& resident_bytes() const override { return resident_bytes_; }
  uint64_t WorkspaceBytes(int64_t max_tokens, int64_t max_logit_rows) const override;
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& cache, Workspace& ws,
                       const Tensor& logits) override;

 private:
  // The pass-long buffers: residual stream, normed input, block output ([T, hidden] each).
  struct Stream {
    Tensor x, h, y;
  };
  Stream TakeStream(Workspace& ws, int64_t tokens) const;
  // The logit rows' buffers: normed hidden states, and under tensor parallelism this rank's
  // logits and the gathered ones before they are laid side by side.
  struct LogitScratch {
    Tensor last, local, gathered;
  };
  LogitScratch TakeLogitScratch(Workspace& ws, int64_t rows) const;

  ModelConfig cfg_;
  KvShape kv_shape_;
  Backend& be_;
  // Under tensor parallelism embed_ and lm_head_ hold this rank's rows of the vocabulary,
  // [vocab_begin_, vocab_begin_ + vocab_size / ranks).
  Weight embed_, final_norm_, lm_head_;
  int64_t vocab_begin_ = 0;
  bool sharded_ = false;
  std::vector<DecoderLayer> layers_;
  std::unique_ptr<PassState> pass_state_;
  uint64_t num_parameters_ = 0;
  uint64_t weight_bytes_ = 0;
  BytesByFormat resident_bytes_{};
};

// Loads `model` with one attention block of type Block per layer: Block(shared), then
// Block::Load(w, layer).
template <typename Block, typename Shared>
absl::Status LoadDecoder(DecoderModel& model, const Checkpoint& ck, WeightLoader& w, const std::shared_ptr<Shared>& shared) {
  return model.Load(ck, w, [&](int64_t layer) -> absl::StatusOr<std::unique_ptr<AttentionBlock>> {
    auto block = std::make_unique<Block>(shared);
    absl::Status st = block->Load(w, layer);
    if (!st.ok()) return st;
    return std::unique_ptr<AttentionBlock>(std::move(block));
  });
}

// A rotary table in backend memory.
absl::StatusOr<RopeTable> PrepareRope(Backend& be, const RopeParams& p);

// Logs the multi-token-prediction layers the checkpoint stores after its last decoder layer
// (DeepSeek-V3 / GLM: model.layers.<num_layers>...), which llmrt does not run.
void LogSkippedMtpLayers(const Checkpoint& ck);

}  // namespace llmrt

#endif  // LLMRT_MODEL_DECODER_H_
