#include "src/model/weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/model/synthetic.h"
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
  if (ck_.synthetic()) {
    // Made, not looked up; counted as the checkpoint that stores it so would hold it.
    LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, MakeSyntheticMatrix(ck_.config(), ck_.seed(), name, rows, cols));
    if (counted_matrices_.insert(name).second) {
      num_parameters_ += static_cast<uint64_t>(rows * cols);
      weight_bytes_ += m.codes.bytes + m.scales.bytes;
    }
    return m;
  }
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

namespace {

// The part's bounds within a [rows, cols] matrix.
struct Bounds {
  int64_t r0, nr, c0, nc;
  bool whole(int64_t rows, int64_t cols) const { return r0 == 0 && nr == rows && c0 == 0 && nc == cols; }
};
Bounds BoundsOf(const MatrixSlice& p, int64_t rows, int64_t cols) {
  return {p.row0, p.rows < 0 ? rows : p.rows, p.col0, p.cols < 0 ? cols : p.cols};
}

}  // namespace

std::vector<float> WeightLoader::HostRows(const StoredMatrix& m, const MatrixSlice& part) {
  const Bounds b = BoundsOf(part, m.rows, m.cols);
  std::vector<float> host(static_cast<size_t>(b.nr * b.nc));
  std::vector<float> row(b.whole(m.rows, m.cols) ? 0 : static_cast<size_t>(m.cols));
  const MatrixBytes bytes{m.codes.data, m.scales.data, m.rows, m.cols, m.params};
  const WeightFormatTraits& f = WeightFormatOf(m.format);
  for (int64_t r = 0; r < b.nr; ++r) {
    if (row.empty()) {
      f.dequantize_row(bytes, r, host.data() + r * m.cols);
    } else {
      f.dequantize_row(bytes, b.r0 + r, row.data());
      std::memcpy(host.data() + r * b.nc, row.data() + b.c0, static_cast<size_t>(b.nc) * sizeof(float));
    }
  }
  return host;
}

absl::StatusOr<StoredMatrix> WeightLoader::Cut(const std::string& name, const StoredMatrix& m, const MatrixSlice& part) {
  const Bounds b = BoundsOf(part, m.rows, m.cols);
  if (b.whole(m.rows, m.cols)) return m;
  const WeightFormatTraits& f = WeightFormatOf(m.format);
  const ShardPlan& sp = options_.shard;
  if (f.slice == nullptr) {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" is stored as ", f.name,
                                         ", which cannot be split for tensor parallelism"));
  }
  absl::StatusOr<StoredMatrix> s = f.slice(m, b.r0, b.nr, b.c0, b.nc);
  if (s.ok() && ck_.synthetic()) {
    // A row range is a view that would keep the whole made matrix alive for as long as the
    // backend holds the part (a checkpoint's views cost nothing: they are its mapping).
    for (HostArray* a : {&s->codes, &s->scales}) {
      if (a->bytes == 0 || (a->keepalive != m.codes.keepalive && a->keepalive != m.scales.keepalive)) continue;
      HostArray copy = NewHostArray(a->dtype, a->shape);
      std::memcpy(const_cast<uint8_t*>(copy.data), a->data, a->bytes);
      *a = std::move(copy);
    }
  }
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" [", m.rows, ", ", m.cols,
                                                   "] cannot be split over tensor_parallel ", sp.size, ": rank ",
                                                   sp.rank, "'s ", s.status().message()));
  }
  return s;
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols,
                                            const MatrixSlice& part) {
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix p, Cut(name, m, part));
  return Prepare(p);
}

absl::StatusOr<Weight> WeightLoader::Dense(const std::string& name, int64_t rows, int64_t cols,
                                           const MatrixSlice& part) {
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  if (!WeightFormatOf(m.format).quantized) {
    LLMRT_ASSIGN_OR_RETURN(StoredMatrix p, Cut(name, m, part));
    return Prepare(p);
  }
  // Dequantized on the host from the mapped checkpoint bytes (only the part's rows), then handed
  // to the backend.
  const Bounds b = BoundsOf(part, rows, cols);
  const std::vector<float> host = HostRows(m, part);
  StoredMatrix dense;
  dense.format = kWeightF32;
  dense.rows = b.nr;
  dense.cols = b.nc;
  dense.codes = NewHostArray(DType::kF32, {b.nr, b.nc});
  std::memcpy(const_cast<uint8_t*>(dense.codes.data), host.data(), host.size() * sizeof(float));
  return Prepare(dense);
}

absl::StatusOr<Weight> WeightLoader::Quantized(const std::string& name, int64_t rows, int64_t cols,
                                               WeightFormatId format, const WeightParams& params,
                                               const MatrixSlice& part) {
  const WeightFormatTraits& f = WeightFormatOf(format);
  const Bounds b = BoundsOf(part, rows, cols);
  if (params.group > 0 && cols % params.group != 0) {
    return FormatError(absl::StrCat(ck_.dir(), ": INT4 group size ", params.group, " does not divide the ", cols,
                                    " columns of \"", name, "\""));
  }
  if (params.group > 0 && b.nc % params.group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(ck_.dir(), ": INT4 group size ", params.group, " does not divide the ",
                                                   b.nc, " columns of \"", name, "\" each of tensor_parallel ",
                                                   options_.shard.size, " ranks holds"));
  }
  // Validates the stored tensor (presence, dtype, shape, scales) and counts its parameters.
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  if (m.format == format && m.params.group == params.group && m.params.block_rows == params.block_rows &&
      m.params.block_cols == params.block_cols) {
    LLMRT_ASSIGN_OR_RETURN(StoredMatrix p, Cut(name, m, part));
    return Prepare(p);
  }
  if (f.quantize == nullptr) {
    return UnsupportedError(absl::StrCat(f.name, " weights cannot be made at load (\"", name, "\")"));
  }
  const std::vector<float> host = HostRows(m, part);
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix q, f.quantize(host.data(), b.nr, b.nc, params));
  return Prepare(q);
}

absl::StatusOr<Weight> WeightLoader::Stored(const std::string& name, int64_t rows, int64_t cols, ExpertStorage s,
                                            const MatrixSlice& part) {
  WeightFormatId format = 0;
  WeightParams params;
  if (!QuantizesAtLoad(s, &format, &params)) return Matrix(name, rows, cols, part);
  return Quantized(name, rows, cols, format, params, part);
}

absl::StatusOr<Weight> WeightLoader::Vector(const std::string& name, int64_t n, int64_t begin, int64_t count) {
  if (ck_.synthetic()) return SyntheticVector(name, n, begin, count);
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
  const int64_t m = count < 0 ? n : count;
  w.rows = m;
  w.cols = 1;
  const int64_t shape[1] = {m};
  const uint8_t* at = static_cast<const uint8_t*>(info->data) + begin * static_cast<int64_t>(DTypeSize(*info->dtype));
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.ImportHost(info->file, at, *info->dtype, shape, 1));
  if (counted_tensors_.insert(name).second) {
    weight_bytes_ += info->bytes;
    num_parameters_ += static_cast<uint64_t>(n);
  }
  resident_[w.format] += WeightFormatOf(w.format).resident_bytes(m, 1, {});
  return w;
}

absl::StatusOr<Weight> WeightLoader::SyntheticVector(const std::string& name, int64_t n, int64_t begin,
                                                     int64_t count) {
  LLMRT_ASSIGN_OR_RETURN(HostArray v, MakeSyntheticVector(name, n));
  Weight w;
  w.format = v.dtype == DType::kBF16 ? kWeightBf16 : kWeightF32;
  const int64_t m = count < 0 ? n : count;
  w.rows = m;
  w.cols = 1;
  const int64_t shape[1] = {m};
  const uint8_t* at = v.data + begin * static_cast<int64_t>(DTypeSize(v.dtype));
  LLMRT_ASSIGN_OR_RETURN(w.data, backend_.ImportHost(v.keepalive, at, v.dtype, shape, 1));
  if (counted_tensors_.insert(name).second) {
    weight_bytes_ += v.bytes;
    num_parameters_ += static_cast<uint64_t>(n);
  }
  resident_[w.format] += WeightFormatOf(w.format).resident_bytes(m, 1, {});
  return w;
}

}  // namespace llmrt
