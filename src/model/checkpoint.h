// A Hugging Face checkpoint directory: config.json plus model.safetensors, or
// model.safetensors.index.json naming the shard of every tensor.
#ifndef LLMRT_MODEL_CHECKPOINT_H_
#define LLMRT_MODEL_CHECKPOINT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/config.h"
#include "src/util/safetensors.h"

namespace llmrt {

class Checkpoint {
 public:
  // Opens and validates config.json and every safetensors file of `dir`.
  static absl::StatusOr<Checkpoint> Open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  // nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  std::string dir_;
  ModelConfig config_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace llmrt

#endif  // LLMRT_MODEL_CHECKPOINT_H_
