#include "src/model/weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <cstring>

#include "src/quant/weight_quant.h"
#include "src/util/bf16.h"
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

void WeightLoader::Count(const std::string& name, const TensorInfo& info, uint64_t params) {
  if (loaded_.insert(name).second) {
    num_parameters_ += params;
    weight_bytes_ += info.bytes;
  }
}

absl::StatusOr<Tensor> WeightLoader::Companion(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                               DType import_as, const std::vector<int64_t>& import_shape) {
  const TensorInfo* info = ck_.Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(ck_.dir(), ": missing tensor \"", name, "\""));
  if (info->dtype != dtype || info->shape != shape) {
    return FormatError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" is ", info->dtype_name, " [",
                                    absl::StrJoin(info->shape, ", "), "], expected ", DTypeName(dtype), " [",
                                    absl::StrJoin(shape, ", "), "]"));
  }
  Count(name, *info, 0);
  return backend_.ImportHost(info->file, info->data, import_as, import_shape.data(),
                             static_cast<int>(import_shape.size()));
}

absl::StatusOr<Weight> WeightLoader::LoadFp8(const std::string& name, const TensorInfo& info, int64_t rows,
                                             int64_t cols) {
  const QuantConfig& q = ck_.config().quant;
  if (q.method != QuantConfig::Method::kFp8Block) {
    return FormatError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" is F8_E4M3 but config.json has no fp8 "
                                    "quantization_config with weight_block_size"));
  }
  if (info.shape != std::vector<int64_t>{rows, cols}) {
    return FormatError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" has shape [", absl::StrJoin(info.shape, ", "),
                                    "], expected [", rows, ", ", cols, "]"));
  }
  Weight w;
  w.format = WeightFormat::kFp8Block;
  w.rows = rows;
  w.cols = cols;
  w.block_rows = q.block_rows;
  w.block_cols = q.block_cols;
  const std::vector<int64_t> sshape = {(rows + q.block_rows - 1) / q.block_rows, (cols + q.block_cols - 1) / q.block_cols};
  LLMRT_ASSIGN_OR_RETURN(w.scales, Companion(name + "_scale_inv", DType::kF32, sshape, DType::kF32, sshape));
  const int64_t shape[2] = {rows, cols};
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.ImportHost(info.file, info.data, DType::kF8E4M3, shape, 2));
  Count(name, info, static_cast<uint64_t>(rows * cols));
  return w;
}

absl::StatusOr<Weight> WeightLoader::LoadInt4(const std::string& stem, int64_t rows, int64_t cols) {
  const QuantConfig& q = ck_.config().quant;
  if (q.method != QuantConfig::Method::kCompressedInt4) {
    return FormatError(absl::StrCat(ck_.dir(), ": \"", stem, "weight_packed\" needs a compressed-tensors "
                                    "pack-quantized quantization_config"));
  }
  if (cols % q.group_size != 0) {
    return FormatError(absl::StrCat(ck_.dir(), ": INT4 group size ", q.group_size, " does not divide the ", cols,
                                    " columns of \"", stem, "weight\""));
  }
  if (const TensorInfo* shape = ck_.Find(stem + "weight_shape"); shape != nullptr) {
    const bool ok = (shape->dtype == DType::kI32 || shape->dtype == DType::kI64) && shape->numel() == 2;
    int64_t r = -1, c = -1;
    if (ok && shape->dtype == DType::kI32) {
      r = reinterpret_cast<const int32_t*>(shape->data)[0];
      c = reinterpret_cast<const int32_t*>(shape->data)[1];
    } else if (ok) {
      r = reinterpret_cast<const int64_t*>(shape->data)[0];
      c = reinterpret_cast<const int64_t*>(shape->data)[1];
    }
    if (r != rows || c != cols) {
      return FormatError(absl::StrCat(ck_.dir(), ": \"", stem, "weight_shape\" is not [", rows, ", ", cols, "]"));
    }
    Count(stem + "weight_shape", *shape, 0);
  }
  Weight w;
  w.format = WeightFormat::kInt4Group;
  w.rows = rows;
  w.cols = cols;
  w.group = q.group_size;
  LLMRT_ASSIGN_OR_RETURN(w.scales, Companion(stem + "weight_scale", DType::kBF16, {rows, cols / q.group_size},
                                             DType::kBF16, {rows, cols / q.group_size}));
  // Eight codes per little-endian int32: read as bytes, two codes each.
  LLMRT_ASSIGN_OR_RETURN(w.data, Companion(stem + "weight_packed", DType::kI32, {rows, cols / 8}, DType::kU8,
                                           {rows, cols / 2}));
  num_parameters_ += static_cast<uint64_t>(rows * cols);
  return w;
}

Weight WeightLoader::Resident(Weight w) {
  uint64_t bytes = w.data.bytes();
  if (w.quantized()) bytes += w.scales.bytes();
  resident_[static_cast<size_t>(w.format)] += bytes;
  return w;
}

absl::StatusOr<Weight> WeightLoader::LoadMatrix(const std::string& name, int64_t rows, int64_t cols) {
  const TensorInfo* info = ck_.Find(name);
  if (info != nullptr && info->dtype == DType::kF8E4M3) return LoadFp8(name, *info, rows, cols);
  if (info == nullptr && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) {
    const std::string stem = name.substr(0, name.size() - 6);
    if (ck_.Find(stem + "weight_packed") != nullptr) return LoadInt4(stem, rows, cols);
  }
  return Load(name, {rows, cols});
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols) {
  LLMRT_ASSIGN_OR_RETURN(Weight w, LoadMatrix(name, rows, cols));
  return Resident(std::move(w));
}

absl::StatusOr<Weight> WeightLoader::Stored(const std::string& name, int64_t rows, int64_t cols, ExpertStorage s) {
  switch (s) {
    case ExpertStorage::kAsStored: return Matrix(name, rows, cols);
    case ExpertStorage::kInt4G32: return Int4(name, rows, cols, 32);
    case ExpertStorage::kInt4G128: return Int4(name, rows, cols, 128);
  }
  return absl::InternalError("unknown expert storage");
}

absl::Status WeightLoader::HostRows(const std::string& name, int64_t rows, int64_t cols, std::vector<float>* out) {
  out->resize(static_cast<size_t>(rows * cols));
  const TensorInfo* info = ck_.Find(name);
  const std::string stem = name.substr(0, name.size() - 6);
  if (info == nullptr) {
    const TensorInfo* packed = ck_.Find(stem + "weight_packed");
    const TensorInfo* scale = ck_.Find(stem + "weight_scale");
    const QuantConfig& q = ck_.config().quant;
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeInt4Row(packed->data, reinterpret_cast<const uint16_t*>(scale->data), cols, q.group_size, r,
                        out->data() + r * cols);
    }
  } else if (info->dtype == DType::kF8E4M3) {
    const TensorInfo* scale = ck_.Find(name + "_scale_inv");
    const QuantConfig& q = ck_.config().quant;
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeFp8BlockRow(info->data, reinterpret_cast<const float*>(scale->data), cols, q.block_rows, q.block_cols,
                            r, out->data() + r * cols);
    }
  } else if (info->dtype == DType::kBF16) {
    Bf16ToF32Array(reinterpret_cast<const uint16_t*>(info->data), out->data(), rows * cols);
  } else {
    std::memcpy(out->data(), info->data, static_cast<size_t>(rows * cols) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::StatusOr<Weight> WeightLoader::Int4(const std::string& name, int64_t rows, int64_t cols, int64_t group) {
  if (cols % group != 0) {
    return FormatError(absl::StrCat(ck_.dir(), ": INT4 group size ", group, " does not divide the ", cols,
                                    " columns of \"", name, "\""));
  }
  // Validates the stored tensor (presence, dtype, shape, scales) and counts its parameters.
  LLMRT_ASSIGN_OR_RETURN(Weight stored, LoadMatrix(name, rows, cols));
  if (stored.format == WeightFormat::kInt4Group && stored.group == group) return Resident(std::move(stored));
  std::vector<float> host;
  LLMRT_RETURN_IF_ERROR(HostRows(name, rows, cols, &host));
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2), 0);
  std::vector<uint16_t> scales(static_cast<size_t>(rows * (cols / group)));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeInt4Row(host.data() + r * cols, cols, group, packed.data() + r * (cols / 2),
                    scales.data() + r * (cols / group));
  }
  Weight w;
  w.format = WeightFormat::kInt4Group;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.Allocate(DType::kU8, {rows, cols / 2}));
  backend_.Upload(packed.data(), packed.size(), w.data);
  LLMRT_ASSIGN_OR_RETURN(w.scales, backend_.Allocate(DType::kBF16, {rows, cols / group}));
  backend_.Upload(scales.data(), scales.size() * sizeof(uint16_t), w.scales);
  return Resident(std::move(w));
}

absl::StatusOr<Weight> WeightLoader::Dense(const std::string& name, int64_t rows, int64_t cols) {
  LLMRT_ASSIGN_OR_RETURN(Weight q, LoadMatrix(name, rows, cols));
  if (!q.quantized()) return Resident(std::move(q));
  // Dequantized on the host from the mapped checkpoint bytes, then handed to the backend.
  std::vector<float> host(static_cast<size_t>(rows * cols));
  const TensorInfo* scale = nullptr;
  if (q.format == WeightFormat::kFp8Block) {
    const TensorInfo* data = ck_.Find(name);
    scale = ck_.Find(name + "_scale_inv");
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeFp8BlockRow(data->data, reinterpret_cast<const float*>(scale->data), cols, q.block_rows, q.block_cols,
                            r, host.data() + r * cols);
    }
  } else {
    const std::string stem = name.substr(0, name.size() - 6);
    const TensorInfo* packed = ck_.Find(stem + "weight_packed");
    scale = ck_.Find(stem + "weight_scale");
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeInt4Row(packed->data, reinterpret_cast<const uint16_t*>(scale->data), cols, q.group, r,
                        host.data() + r * cols);
    }
  }
  Weight w;
  w.format = WeightFormat::kF32;
  w.rows = rows;
  w.cols = cols;
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.Allocate(DType::kF32, {rows, cols}));
  backend_.Upload(host.data(), host.size() * sizeof(float), w.data);
  return Resident(std::move(w));
}

absl::StatusOr<Weight> WeightLoader::Vector(const std::string& name, int64_t n) {
  LLMRT_ASSIGN_OR_RETURN(Weight w, Load(name, {n}));
  return Resident(std::move(w));
}

}  // namespace llmrt
