// WeightLoader: the one place where checkpoint tensors become backend weights. Each matrix is
// recognized by the weight-format table (src/quant/weight_format.h: the first registered format
// whose loader claims it), checked against the shape the architecture expects, and prepared by
// the backend in its own layout. It counts parameters and bytes.
#ifndef LLMRT_MODEL_WEIGHTS_H_
#define LLMRT_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/checkpoint.h"
#include "src/model/model.h"

namespace llmrt {

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ck, Backend& backend, const LoadOptions& options = {});
  ~WeightLoader();

  const LoadOptions& options() const { return options_; }
  Backend& backend() { return backend_; }

  // A matrix [rows, cols] in the format the checkpoint stores it. `name` is "<stem>weight".
  absl::StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols);
  // The same matrix as BF16 or F32, quantized storage dequantized to F32 at load: for weights
  // an op reads as plain rows (embeddings, MLA's absorbed kv_b_proj).
  absl::StatusOr<Weight> Dense(const std::string& name, int64_t rows, int64_t cols);
  // The same matrix in `format` with `params`, quantized at load from whatever the checkpoint
  // stores (a checkpoint matrix already in that format and layout is used as it is).
  absl::StatusOr<Weight> Quantized(const std::string& name, int64_t rows, int64_t cols, WeightFormatId format,
                                   const WeightParams& params);
  // The matrix in the storage `s` asks for.
  absl::StatusOr<Weight> Stored(const std::string& name, int64_t rows, int64_t cols, ExpertStorage s);
  // A vector [n] (norm weights, biases), BF16 or F32.
  absl::StatusOr<Weight> Vector(const std::string& name, int64_t n);

  uint64_t num_parameters() const { return num_parameters_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the weights handed out (codes plus scales), by format id.
  const BytesByFormat& resident_bytes() const { return resident_; }

 private:
  class Source;
  // The stored matrix `name` as the first format that recognizes it; counts its tensors.
  absl::StatusOr<StoredMatrix> Find(const std::string& name, int64_t rows, int64_t cols);
  absl::StatusOr<Weight> Prepare(const StoredMatrix& m);
  // The stored matrix in float32 rows.
  static std::vector<float> HostRows(const StoredMatrix& m);

  const Checkpoint& ck_;
  Backend& backend_;
  LoadOptions options_;
  std::unique_ptr<Source> source_;
  BytesByFormat resident_{};
  std::set<std::string> counted_tensors_;
  std::set<std::string> counted_matrices_;
  uint64_t num_parameters_ = 0;
  uint64_t weight_bytes_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_MODEL_WEIGHTS_H_
