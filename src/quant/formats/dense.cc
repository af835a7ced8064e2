// The unquantized formats: float32 and bfloat16 matrices, stored row-major as the checkpoint
// has them (weight = the value).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/quant/formats/builtin.h"
#include "src/util/bf16.h"
#include "src/util/errors.h"

namespace llmrt::formats {

absl::StatusOr<const TensorInfo*> RequireTensor(const TensorSource& src, const std::string& name, DType dtype,
                                                const std::vector<int64_t>& shape, std::vector<std::string>* used) {
  const TensorInfo* info = src.Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(src.where(), ": missing tensor \"", name, "\""));
  if (info->dtype != dtype || info->shape != shape) {
    return FormatError(absl::StrCat(src.where(), ": tensor \"", name, "\" is ", info->dtype_name, " [",
                                    absl::StrJoin(info->shape, ", "), "], expected ", DTypeName(dtype), " [",
                                    absl::StrJoin(shape, ", "), "]"));
  }
  used->push_back(name);
  return info;
}

HostArray ViewTensor(const TensorInfo& t, DType dtype, std::vector<int64_t> shape) {
  HostArray a;
  a.data = t.data;
  a.bytes = t.bytes;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.keepalive = t.file;
  return a;
}

namespace {

template <DType kDType>
absl::StatusOr<std::optional<StoredMatrix>> LoadDense(const TensorSource& src, const std::string& name, int64_t rows,
                                                      int64_t cols, std::vector<std::string>* used) {
  const TensorInfo* info = src.Find(name);
  if (info == nullptr || info->dtype != kDType) return std::nullopt;
  if (info->shape != std::vector<int64_t>{rows, cols}) {
    return FormatError(absl::StrCat(src.where(), ": tensor \"", name, "\" has shape [", absl::StrJoin(info->shape, ", "),
                                    "], expected [", rows, ", ", cols, "]"));
  }
  used->push_back(name);
  StoredMatrix m;
  m.format = kDType == DType::kF32 ? kWeightF32 : kWeightBf16;
  m.rows = rows;
  m.cols = cols;
  m.codes = ViewTensor(*info, kDType, {rows, cols});
  return m;
}

uint64_t DenseBytesF32(int64_t rows, int64_t cols, const WeightParams&) {
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * 4;
}
uint64_t DenseBytesBf16(int64_t rows, int64_t cols, const WeightParams&) {
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * 2;
}
void DequantizeF32(const MatrixBytes& m, int64_t row, float* out) {
  std::memcpy(out, m.codes + static_cast<size_t>(row * m.cols) * 4, static_cast<size_t>(m.cols) * 4);
}
void DequantizeBf16(const MatrixBytes& m, int64_t row, float* out) {
  Bf16ToF32Array(reinterpret_cast<const uint16_t*>(m.codes) + row * m.cols, out, static_cast<size_t>(m.cols));
}

template <size_t kBytes>
absl::StatusOr<StoredMatrix> SliceDense(const StoredMatrix& m, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  StoredMatrix s = m;
  s.rows = nr;
  s.cols = nc;
  s.codes = SliceHostArray(m.codes, m.cols * kBytes, r0, nr, c0 * kBytes, nc * kBytes, {nr, nc});
  return s;
}

}  // namespace

const WeightFormatTraits& F32() {
  static const WeightFormatTraits t = {kWeightF32, "F32", false, DenseBytesF32, DequantizeF32, LoadDense<DType::kF32>,
                                       nullptr, SliceDense<4>};
  return t;
}

const WeightFormatTraits& Bf16() {
  static const WeightFormatTraits t = {kWeightBf16, "BF16", false, DenseBytesBf16, DequantizeBf16,
                                       LoadDense<DType::kBF16>, nullptr, SliceDense<2>};
  return t;
}

}  // namespace llmrt::formats
