// Tensors are views of memory that a backend owns (host memory for the CPU backend, device
// memory for CUDA). Model code creates views (rows, columns, reshapes) and passes them to
// backend ops; it never dereferences data(). Only backends read and write through data().
#ifndef LLMRT_BACKEND_TENSOR_H_
#define LLMRT_BACKEND_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "src/util/dtype.h"

namespace llmrt {

// A strided view: rank 1 to 4, contiguous in its last dimension; the first dimension may have
// a row stride larger than the product of the others (column slices of a matrix).
class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, void* data, DType dtype,
         std::initializer_list<int64_t> shape);
  Tensor(std::shared_ptr<Storage> storage, void* data, DType dtype, const int64_t* shape, int rank);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const;
  // Elements between the starts of consecutive first-dimension rows.
  int64_t row_stride() const { return row_stride_; }
  // Elements per first-dimension row (product of the other dims).
  int64_t row_size() const;
  bool contiguous() const { return row_stride_ == row_size(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  std::string ShapeString() const;

  // Rows [begin, end) of the first dimension.
  Tensor Rows(int64_t begin, int64_t end) const;
  // Columns [begin, end) of a rank-2 tensor (a strided view).
  Tensor Cols(int64_t begin, int64_t end) const;
  // Same elements, new shape; REQUIRES contiguous().
  Tensor Reshape(std::initializer_list<int64_t> shape) const;

  // Backend use only.
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  std::array<int64_t, kMaxRank> shape_{};
  int rank_ = 0;
  int64_t row_stride_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_BACKEND_TENSOR_H_
