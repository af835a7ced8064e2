#include "src/backend/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/status.h"

namespace llmrt {

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
