#include "src/backend/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/status.h"

namespace llmrt {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kI8: return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
  }
  return "?";
}

Tensor::Tensor(std::shared_ptr<Storage> storage, void* data, DType dtype,
               std::initializer_list<int64_t> shape)
    : storage_(std::move(storage)), data_(data), dtype_(dtype) {
  LLMRT_CHECK(shape.size() >= 1 && shape.size() <= kMaxRank);
  for (int64_t d : shape) shape_[rank_++] = d;
  row_stride_ = row_size();
}

Tensor::Tensor(std::shared_ptr<Storage> storage, void* data, DType dtype, const int64_t* shape,
               int rank)
    : storage_(std::move(storage)), data_(data), dtype_(dtype), rank_(rank) {
  LLMRT_CHECK(rank >= 1 && rank <= kMaxRank);
  for (int i = 0; i < rank; ++i) shape_[i] = shape[i];
  row_stride_ = row_size();
}

int64_t Tensor::numel() const {
  if (rank_ == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

int64_t Tensor::row_size() const {
  int64_t n = 1;
  for (int i = 1; i < rank_; ++i) n *= shape_[i];
  return n;
}

std::string Tensor::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape_.begin(), shape_.begin() + rank_, ", "), "]");
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  LLMRT_CHECK(rank_ >= 1 && begin >= 0 && begin <= end && end <= shape_[0]);
  Tensor t = *this;
  t.data_ = static_cast<uint8_t*>(data_) + begin * row_stride_ * DTypeSize(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::Cols(int64_t begin, int64_t end) const {
  LLMRT_CHECK(rank_ == 2 && begin >= 0 && begin <= end && end <= shape_[1]);
  Tensor t = *this;
  t.data_ = static_cast<uint8_t*>(data_) + begin * DTypeSize(dtype_);
  t.shape_[1] = end - begin;
  return t;
}

Tensor Tensor::Reshape(std::initializer_list<int64_t> shape) const {
  LLMRT_CHECK(contiguous() || shape_[0] <= 1);
  Tensor t(storage_, data_, dtype_, shape);
  LLMRT_CHECK(t.numel() == numel());
  return t;
}

}  // namespace llmrt
