// A Hugging Face checkpoint directory: config.json plus model.safetensors, or
// model.safetensors.index.json naming the shard of every tensor.
#ifndef LLMRT_MODEL_CHECKPOINT_H_
#define LLMRT_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/config.h"
#include "src/util/safetensors.h"

namespace llmrt {

// Limits on a checkpoint's shard index (the "Limits" paragraph of llm_runtime_create).
// model.safetensors.index.json [about 25 MiB for Kimi K2-Thinking's INT4 release]; its
// weight_map holds at most kMaxCheckpointTensors entries.
inline constexpr size_t kMaxIndexJsonBytes = size_t{64} << 20;
// Distinct shard files [163 for DeepSeek-V3].
inline constexpr int64_t kMaxShards = 4096;

class Checkpoint {
 public:
  // Opens and validates config.json and every safetensors file of `dir`. Shards are files of
  // `dir` (names with '/' or ".." are refused); symbolic links among them are followed, as the
  // Hugging Face cache stores shards as links into its blob store. Only regular files are read.
  static absl::StatusOr<Checkpoint> Open(const std::string& dir);
  // A checkpoint of `dir`'s config.json alone (validated as Open validates it; no other file is
  // read) whose tensors WeightLoader makes from `seed` when asked (src/model/synthetic.h). It
  // holds no tensors: Find finds none, so what reads optional tensors directly (KV scales, MTP
  // layers) sees a checkpoint without them.
  static absl::StatusOr<Checkpoint> Synthetic(const std::string& dir, uint64_t seed);

  // Checks that the checkpoint holds the last decoder layer config.json declares (its
  // input_layernorm.weight, which every architecture has): run before a model allocates anything
  // per layer, so that num_hidden_layers is confirmed by tensors, not only by its bound (a
  // synthetic checkpoint has every layer its config declares). NotFound (as for any missing tensor) naming the tensor otherwise.
  absl::Status ValidateLayerCount() const;

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  // nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool synthetic() const { return synthetic_; }
  uint64_t seed() const { return seed_; }

 private:
  // config.json of `dir`, parsed and validated.
  static absl::StatusOr<Checkpoint> OpenConfig(const std::string& dir);

  std::string dir_;
  bool synthetic_ = false;
  uint64_t seed_ = 0;
  ModelConfig config_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace llmrt

#endif  // LLMRT_MODEL_CHECKPOINT_H_
