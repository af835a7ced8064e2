#include "src/model/weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<Weight> WeightLoader::Load(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* info = ck_.Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(ck_.dir(), ": missing tensor \"", name, "\""));
  }
  if (info->shape != shape) {
    return FormatError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" has shape [",
                                    absl::StrJoin(info->shape, ", "), "], expected [",
                                    absl::StrJoin(shape, ", "), "]"));
  }
  Weight w;
  if (info->dtype == DType::kBF16) {
    w.format = WeightFormat::kBF16;
  } else if (info->dtype == DType::kF32) {
    w.format = WeightFormat::kF32;
  } else {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" has dtype ", info->dtype_name,
                                         ", which is not supported for this tensor (BF16, F32)"));
  }
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.ImportHost(info->file, info->data, *info->dtype,
                                                     shape.data(), static_cast<int>(shape.size())));
  w.rows = shape[0];
  w.cols = shape.size() > 1 ? shape[1] : 1;
  if (loaded_.insert(name).second) {
    num_parameters_ += static_cast<uint64_t>(info->numel());
    weight_bytes_ += info->bytes;
  }
  return w;
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols) {
  return Load(name, {rows, cols});
}

absl::StatusOr<Weight> WeightLoader::Vector(const std::string& name, int64_t n) {
  return Load(name, {n});
}

}  // namespace llmrt
