#include "src/backend/backend.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace llmrt {

absl::StatusOr<Tensor> Backend::Allocate(DType dtype, std::initializer_list<int64_t> shape) {
  if (shape.size() < 1 || shape.size() > static_cast<size_t>(Tensor::kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor rank ", shape.size(), " is outside [1, ", Tensor::kMaxRank, "]"));
  }
  // The byte count must fit in int64 (overflow-checked: shapes can come from files).
  const int64_t kMax = std::numeric_limits<int64_t>::max() / 16;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative tensor dimension");
    if (d != 0 && n > kMax / d) return absl::ResourceExhaustedError("tensor size overflows");
    n *= d;
  }
  ++allocations_;
  return DoAllocate(dtype, shape.begin(), static_cast<int>(shape.size()));
}

}  // namespace llmrt
