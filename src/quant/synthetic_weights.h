// Synthetic weight matrices in a weight format, made from a counter-based hash instead of read
// (src/quant/synthetic_values.h has the values; src/model/synthetic.h decides which tensor gets
// which format). This is the host reference: backends that can generate on their device
// (Backend::MakeSyntheticWeight) produce the same bytes in their own memory.
//
// A spec names a part of the full matrix: the rows and columns one tensor-parallel rank owns.
// Only that part is made, and it equals the same part of the whole matrix bit for bit (element
// and scale indices are those of the full matrix); an FP8 part holds the scale blocks and an
// INT4 part the groups that the format's `slice` would cut from the whole.
#ifndef LLMRT_QUANT_SYNTHETIC_WEIGHTS_H_
#define LLMRT_QUANT_SYNTHETIC_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/quant/weight_format.h"

namespace llmrt {

// A synthetic matrix [rows, cols] in `format`, of which the part rows [row0, row0 + part_rows)
// x columns [col0, col0 + part_cols) is to be made.
struct SyntheticMatrixSpec {
  std::string name;  // the tensor, for messages
  uint64_t stream = 0;  // SyntheticStream(seed, name)
  WeightFormatId format = kWeightBf16;  // BF16, FP8 block-scaled or INT4 group-scaled
  WeightParams params;
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0, part_rows = 0, col0 = 0, part_cols = 0;
  bool whole() const { return row0 == 0 && col0 == 0 && part_rows == rows && part_cols == cols; }
};

// The stream of tensor `name` under `seed` (FNV-1a of the name, mixed with the seed).
uint64_t SyntheticStream(uint64_t seed, const std::string& name);

// OK when `spec` can be made: a synthetic format, a part inside the matrix, INT4 groups that
// divide the columns, and a part whose bounds fall where the format's `slice` accepts them (FP8:
// on block boundaries or the matrix's edge; INT4: columns on whole groups). Otherwise
// FailedPrecondition with the format's own wording ("columns [a, b) of n do not fall on ..."),
// or InvalidArgument / DataLoss naming the tensor.
absl::Status CheckSyntheticSpec(const SyntheticMatrixSpec& spec);

// The part of `spec` in host memory, as `format`'s `slice` would cut it from the whole matrix
// (multi-threaded for large parts). ResourceExhausted naming the tensor and its bytes when the
// host memory cannot be had; the errors of CheckSyntheticSpec.
absl::StatusOr<StoredMatrix> MakeSyntheticPart(const SyntheticMatrixSpec& spec);

// A zeroed host array for synthetic tensor `name`: ResourceExhausted naming it when it exceeds
// the machine's physical memory (refused before the first touch, which under overcommit would
// bring the out-of-memory killer instead of an error) or cannot be allocated.
absl::StatusOr<HostArray> NewSyntheticArray(const std::string& name, DType dtype, std::vector<int64_t> shape);

}  // namespace llmrt

#endif  // LLMRT_QUANT_SYNTHETIC_WEIGHTS_H_
