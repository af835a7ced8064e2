// WeightLoader: the one place where checkpoint tensors become typed backend weights. It checks
// each tensor's presence, dtype and shape against what the architecture expects and counts
// parameters and bytes.
#ifndef LLMRT_MODEL_WEIGHTS_H_
#define LLMRT_MODEL_WEIGHTS_H_

#include <array>
#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/checkpoint.h"
#include "src/model/model.h"

namespace llmrt {

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ck, Backend& backend, const LoadOptions& options = {})
      : ck_(ck), backend_(backend), options_(options) {}

  const LoadOptions& options() const { return options_; }

  // A matrix [rows, cols] in the format the checkpoint stores it: BF16 or F32; FP8 e4m3 with
  // `<name>_scale_inv` block scales (quantization_config fp8); or INT4 pack-quantized as
  // `<stem>weight_packed` / `weight_scale` / `weight_shape` (compressed-tensors), where `name`
  // is "<stem>weight".
  absl::StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols);
  // The same matrix as BF16 or F32, quantized storage dequantized to F32 at load: for weights
  // an op reads as plain rows (embeddings, MLA's absorbed kv_b_proj).
  absl::StatusOr<Weight> Dense(const std::string& name, int64_t rows, int64_t cols);
  // The same matrix quantized at load to INT4 (symmetric, round to nearest, `group` columns per
  // scale) from whatever the checkpoint stores (BF16, F32, FP8 blocks, or INT4 of another
  // group); an INT4 checkpoint tensor of the same group is used as is.
  absl::StatusOr<Weight> Int4(const std::string& name, int64_t rows, int64_t cols, int64_t group);
  // The matrix in the storage `s` asks for.
  absl::StatusOr<Weight> Stored(const std::string& name, int64_t rows, int64_t cols, ExpertStorage s);
  // A vector [n] (norm weights, biases), BF16 or F32.
  absl::StatusOr<Weight> Vector(const std::string& name, int64_t n);

  uint64_t num_parameters() const { return num_parameters_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the weights handed out (codes plus scales), by WeightFormat.
  const std::array<uint64_t, 4>& resident_bytes() const { return resident_; }

 private:
  absl::StatusOr<Weight> Load(const std::string& name, const std::vector<int64_t>& shape);
  absl::StatusOr<Weight> LoadFp8(const std::string& name, const TensorInfo& info, int64_t rows, int64_t cols);
  absl::StatusOr<Weight> LoadInt4(const std::string& stem, int64_t rows, int64_t cols);
  // Checks a companion tensor (scales, packed codes) and imports it.
  absl::StatusOr<Tensor> Companion(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                   DType import_as, const std::vector<int64_t>& import_shape);
  void Count(const std::string& name, const TensorInfo& info, uint64_t params);
  Weight Resident(Weight w);
  // Matrix without counting it resident (Int4 and Dense keep a different copy).
  absl::StatusOr<Weight> LoadMatrix(const std::string& name, int64_t rows, int64_t cols);
  // Row r of the checkpoint matrix `name` [rows, cols] in float32, whatever its storage.
  absl::Status HostRows(const std::string& name, int64_t rows, int64_t cols, std::vector<float>* out);

  const Checkpoint& ck_;
  Backend& backend_;
  LoadOptions options_;
  std::array<uint64_t, 4> resident_{};
  std::set<std::string> loaded_;
  uint64_t num_parameters_ = 0;
  uint64_t weight_bytes_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_MODEL_WEIGHTS_H_
