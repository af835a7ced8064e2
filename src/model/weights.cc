#include "src/model/weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {

// The checkpoint as the weight formats' loaders see it.
class WeightLoader::Source final : public TensorSource {
 public:
  explicit Source(const Checkpoint& ck) : ck_(ck) {}
  const TensorInfo* Find(const std::string& name) const override { return ck_.Find(name); }
  const QuantConfig& quant_config() const override { return ck_.config().quant; }
  const std::string& where() const override { return ck_.dir(); }

 private:
  const Checkpoint& ck_;
};

WeightLoader::WeightLoader(const Checkpoint& ck, Backend& backend, const LoadOptions& options)
    : ck_(ck), backend_(backend), options_(options), source_(std::make_unique<Source>(ck)) {}

WeightLoader::~WeightLoader() = default;

absl::StatusOr<StoredMatrix> WeightLoader::Find(const std::string& name, int64_t rows, int64_t cols) {
  for (const WeightFormatTraits* f : WeightFormats()) {
    std::vector<std::string> used;
    LLMRT_ASSIGN_OR_RETURN(std::optional<StoredMatrix> m, f->load(*source_, name, rows, cols, &used));
    if (!m) continue;
    for (const std::string& t : used) {
      if (counted_tensors_.insert(t).second) weight_bytes_ += ck_.Find(t)->bytes;
    }
    if (counted_matrices_.insert(name).second) num_parameters_ += static_cast<uint64_t>(rows * cols);
    return *std::move(m);
  }
  const TensorInfo* info = ck_.Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(ck_.dir(), ": missing tensor \"", name, "\""));
  return UnsupportedError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" has dtype ", info->dtype_name,
                                       ", which is not supported for this tensor (BF16, F32)"));
}

absl::StatusOr<Weight> WeightLoader::Prepare(const StoredMatrix& m) {
  const WeightFormatTraits& f = WeightFormatOf(m.format);
  if (!backend_.SupportsWeightFormat(m.format)) {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": the ", backend_.name(), " backend has no kernel for ", f.name,
                                         " weights"));
  }
  LLMRT_ASSIGN_OR_RETURN(Weight w, backend_.PrepareWeight(m));
  resident_[m.format] += f.resident_bytes(m.rows, m.cols, m.params);
  return w;
}

std::vector<float> WeightLoader::HostRows(const StoredMatrix& m) {
  std::vector<float> host(static_cast<size_t>(m.rows * m.cols));
  const MatrixBytes bytes{m.codes.data, m.scales.data, m.rows, m.cols, m.params};
  const WeightFormatTraits& f = WeightFormatOf(m.format);
  for (int64_t r = 0; r < m.rows; ++r) f.dequantize_row(bytes, r, host.data() + r * m.cols);
  return host;
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols) {
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  return Prepare(m);
}

absl::StatusOr<Weight> WeightLoader::Dense(const std::string& name, int64_t rows, int64_t cols) {
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  if (!WeightFormatOf(m.format).quantized) return Prepare(m);
  // Dequantized on the host from the mapped checkpoint bytes, then handed to the backend.
  const std::vector<float> host = HostRows(m);
  StoredMatrix dense;
  dense.format = kWeightF32;
  dense.rows = rows;
  dense.cols = cols;
  dense.codes = NewHostArray(DType::kF32, {rows, cols});
  std::memcpy(const_cast<uint8_t*>(dense.codes.data), host.data(), host.size() * sizeof(float));
  return Prepare(dense);
}

absl::StatusOr<Weight> WeightLoader::Quantized(const std::string& name, int64_t rows, int64_t cols,
                                               WeightFormatId format, const WeightParams& params) {
  const WeightFormatTraits& f = WeightFormatOf(format);
  if (params.group > 0 && cols % params.group != 0) {
    return FormatError(absl::StrCat(ck_.dir(), ": INT4 group size ", params.group, " does not divide the ", cols,
                                    " columns of \"", name, "\""));
  }
  // Validates the stored tensor (presence, dtype, shape, scales) and counts its parameters.
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  if (m.format == format && m.params.group == params.group && m.params.block_rows == params.block_rows &&
      m.params.block_cols == params.block_cols) {
    return Prepare(m);
  }
  if (f.quantize == nullptr) {
    return UnsupportedError(absl::StrCat(f.name, " weights cannot be made at load (\"", name, "\")"));
  }
  const std::vector<float> host = HostRows(m);
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix q, f.quantize(host.data(), rows, cols, params));
  return Prepare(q);
}

absl::StatusOr<Weight> WeightLoader::Stored(const std::string& name, int64_t rows, int64_t cols, ExpertStorage s) {
  WeightFormatId format = 0;
  WeightParams params;
  if (!QuantizesAtLoad(s, &format, &params)) return Matrix(name, rows, cols);
  return Quantized(name, rows, cols, format, params);
}

absl::StatusOr<Weight> WeightLoader::Vector(const std::string& name, int64_t n) {
  const TensorInfo* info = ck_.Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(ck_.dir(), ": missing tensor \"", name, "\""));
  if (info->shape != std::vector<int64_t>{n}) {
    return FormatError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" has shape [", absl::StrJoin(info->shape, ", "),
                                    "], expected [", n, "]"));
  }
  if (info->dtype != DType::kBF16 && info->dtype != DType::kF32) {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" has dtype ", info->dtype_name,
                                         ", which is not supported for this tensor (BF16, F32)"));
  }
  Weight w;
  w.format = info->dtype == DType::kBF16 ? kWeightBf16 : kWeightF32;
  w.rows = n;
  w.cols = 1;
  const int64_t shape[1] = {n};
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.ImportHost(info->file, info->data, *info->dtype, shape, 1));
  if (counted_tensors_.insert(name).second) {
    weight_bytes_ += info->bytes;
    num_parameters_ += static_cast<uint64_t>(n);
  }
  resident_[w.format] += WeightFormatOf(w.format).resident_bytes(n, 1, {});
  return w;
}

}  // namespace llmrt
