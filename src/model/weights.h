// WeightLoader: the one place where checkpoint tensors become typed backend weights. It checks
// each tensor's presence, dtype and shape against what the architecture expects and counts
// parameters and bytes.
#ifndef LLMRT_MODEL_WEIGHTS_H_
#define LLMRT_MODEL_WEIGHTS_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/checkpoint.h"

namespace llmrt {

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ck, Backend& backend) : ck_(ck), backend_(backend) {}

  // A matrix [rows, cols] in a supported weight format (BF16, F32).
  absl::StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols);
  // A vector [n] (norm weights, biases), BF16 or F32.
  absl::StatusOr<Weight> Vector(const std::string& name, int64_t n);

  uint64_t num_parameters() const { return num_parameters_; }
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  absl::StatusOr<Weight> Load(const std::string& name, const std::vector<int64_t>& shape);

  const Checkpoint& ck_;
  Backend& backend_;
  std::set<std::string> loaded_;
  uint64_t num_parameters_ = 0;
  uint64_t weight_bytes_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_MODEL_WEIGHTS_H_
