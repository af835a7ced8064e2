// WeightLoader: the one place where checkpoint tensors become backend weights. Each matrix is
// recognized by the weight-format table (src/quant/weight_format.h: the first registered format
// whose loader claims it), checked against the shape the architecture expects, and prepared by
// the backend in its own layout. It counts parameters and bytes. For a synthetic checkpoint
// (Checkpoint::Synthetic) it makes each requested tensor instead, in the format the checkpoint
// would store it (src/model/synthetic.h), and only the part this rank owns: on the device when
// the backend generates there (Backend::MakeSyntheticWeight), else on the host, handed to the
// backend the same way; every backend and phase policy runs unchanged.
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
#include "src/quant/synthetic_weights.h"

namespace llmrt {

// The part of a checkpoint matrix one rank loads (tensor parallelism): rows [row0, row0 + rows)
// and columns [col0, col0 + cols); a negative count means all of them. Row ranges of
// row-major stored matrices are views of the mapped checkpoint; column ranges are copies of
// only the rank's slice.
struct MatrixSlice {
  int64_t row0 = 0, rows = -1, col0 = 0, cols = -1;
  static MatrixSlice Rows(int64_t begin, int64_t n) { return {begin, n, 0, -1}; }
  static MatrixSlice Cols(int64_t begin, int64_t n) { return {0, -1, begin, n}; }
};

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ck, Backend& backend, const LoadOptions& options = {});
  ~WeightLoader();

  const LoadOptions& options() const { return options_; }
  Backend& backend() { return backend_; }

  // A matrix [rows, cols] in the format the checkpoint stores it. `name` is "<stem>weight".
  // With `part`, only that slice of it (checked and counted as the whole matrix).
  absl::StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols, const MatrixSlice& part = {});
  // The same matrix as BF16 or F32, quantized storage dequantized to F32 at load: for weights
  // an op reads as plain rows (embeddings).
  absl::StatusOr<Weight> Dense(const std::string& name, int64_t rows, int64_t cols, const MatrixSlice& part = {});
  // MLA's kv_b_proj: as Dense, except that a quantized matrix the backend's MLA ops read as it is
  // (Backend::ReadsQuantizedMlaKvB: the CPU's FP8 blocks) stays in its stored format.
  absl::StatusOr<Weight> MlaKvB(const std::string& name, int64_t rows, int64_t cols, const MatrixSlice& part = {});
  // The same matrix in `format` with `params`, quantized at load from whatever the checkpoint
  // stores (a checkpoint matrix already in that format and layout is used as it is).
  absl::StatusOr<Weight> Quantized(const std::string& name, int64_t rows, int64_t cols, WeightFormatId format,
                                   const WeightParams& params, const MatrixSlice& part = {});
  // The matrix in the storage `s` asks for.
  absl::StatusOr<Weight> Stored(const std::string& name, int64_t rows, int64_t cols, ExpertStorage s,
                                const MatrixSlice& part = {});
  // A vector [n] (norm weights, biases), BF16 or F32; with count >= 0, elements
  // [begin, begin + count) of it.
  absl::StatusOr<Weight> Vector(const std::string& name, int64_t n, int64_t begin = 0, int64_t count = -1);

  uint64_t num_parameters() const { return num_parameters_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the weights handed out (codes plus scales), by format id.
  const BytesByFormat& resident_bytes() const { return resident_; }

 private:
  class Source;
  // The stored matrix `name` as the first format that recognizes it; counts its tensors.
  absl::StatusOr<StoredMatrix> Find(const std::string& name, int64_t rows, int64_t cols);
  absl::StatusOr<Weight> Prepare(const StoredMatrix& m, const std::string& name);
  // The stored matrix's `part` in float32 rows.
  static std::vector<float> HostRows(const StoredMatrix& m, const MatrixSlice& part = {});
  // m's `part` in m's format (m itself when the part is the whole matrix). InvalidArgument naming
  // the tensor, the sizes and the rank when the format's blocks or groups straddle the part.
  absl::StatusOr<StoredMatrix> Cut(const std::string& name, const StoredMatrix& m, const MatrixSlice& part);
  // The InvalidArgument of a part that the format's blocks or groups straddle (`cause`).
  absl::Status SplitError(const std::string& name, int64_t rows, int64_t cols, const absl::Status& cause) const;
  // Synthetic checkpoints (src/model/synthetic.h): matrices are made, not looked up, and only
  // the part this rank owns. The spec of `part` of matrix `name`, counted as the checkpoint
  // would store the whole matrix.
  SyntheticMatrixSpec SyntheticPart(const std::string& name, int64_t rows, int64_t cols, const MatrixSlice& part);
  // CheckSyntheticSpec, with a part off the format's blocks worded as Cut words it.
  absl::Status CheckSynthetic(const SyntheticMatrixSpec& spec) const;
  // The part made and prepared: on the device when the backend generates there
  // (Backend::MakeSyntheticWeight), else made on the host and handed to Prepare.
  absl::StatusOr<Weight> MakeSynthetic(const SyntheticMatrixSpec& spec);
  // The part in float32 rows (for Dense and quantize-at-load), made on the host over the
  // smallest part around it that falls on the format's blocks or groups.
  absl::StatusOr<std::vector<float>> SyntheticHostRows(const SyntheticMatrixSpec& spec);
  // Vector for a synthetic checkpoint: made (src/model/synthetic.h), not looked up.
  absl::StatusOr<Weight> SyntheticVector(const std::string& name, int64_t n, int64_t begin, int64_t count);

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
