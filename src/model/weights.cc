#include "src/model/weights.h"

#include <algorithm>
#include <cstring>
#include <optional>

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

absl::StatusOr<Weight> WeightLoader::Prepare(const StoredMatrix& m, const std::string& name) {
  const WeightFormatTraits& f = WeightFormatOf(m.format);
  if (!backend_.SupportsWeightFormat(m.format)) {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": the ", backend_.name(), " backend has no kernel for ", f.name,
                                         " weights"));
  }
  absl::StatusOr<Weight> w = backend_.PrepareWeight(m);
  if (!w.ok()) {  // a device out of memory, say: which tensor did not fit
    return absl::Status(w.status().code(), absl::StrCat("tensor \"", name, "\": ", w.status().message()));
  }
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
  if (f.slice == nullptr) {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" is stored as ", f.name,
                                         ", which cannot be split for tensor parallelism"));
  }
  absl::StatusOr<StoredMatrix> s = f.slice(m, b.r0, b.nr, b.c0, b.nc);
  if (!s.ok()) return SplitError(name, m.rows, m.cols, s.status());
  return s;
}

absl::Status WeightLoader::SplitError(const std::string& name, int64_t rows, int64_t cols,
                                      const absl::Status& cause) const {
  const ShardPlan& sp = options_.shard;
  return absl::InvalidArgumentError(absl::StrCat(ck_.dir(), ": tensor \"", name, "\" [", rows, ", ", cols,
                                                 "] cannot be split over tensor_parallel ", sp.size, ": rank ",
                                                 sp.rank, "'s ", cause.message()));
}

SyntheticMatrixSpec WeightLoader::SyntheticPart(const std::string& name, int64_t rows, int64_t cols,
                                                const MatrixSlice& part) {
  SyntheticMatrixSpec spec = SyntheticSpec(ck_.config(), ck_.seed(), name, rows, cols);
  const Bounds b = BoundsOf(part, rows, cols);
  spec.row0 = b.r0;
  spec.part_rows = b.nr;
  spec.col0 = b.c0;
  spec.part_cols = b.nc;
  // Counted as the checkpoint that stores the whole matrix would hold it, whatever part is made.
  if (counted_matrices_.insert(name).second) {
    num_parameters_ += static_cast<uint64_t>(rows * cols);
    weight_bytes_ += WeightFormatOf(spec.format).resident_bytes(rows, cols, spec.params);
  }
  return spec;
}

absl::Status WeightLoader::CheckSynthetic(const SyntheticMatrixSpec& spec) const {
  const absl::Status s = CheckSyntheticSpec(spec);
  // The format's slice rule, worded as Cut words it for a checkpoint.
  if (s.code() == absl::StatusCode::kFailedPrecondition) return SplitError(spec.name, spec.rows, spec.cols, s);
  return s;
}

absl::StatusOr<Weight> WeightLoader::MakeSynthetic(const SyntheticMatrixSpec& spec) {
  LLMRT_RETURN_IF_ERROR(CheckSynthetic(spec));
  const WeightFormatTraits& f = WeightFormatOf(spec.format);
  if (!backend_.SupportsWeightFormat(spec.format)) {
    return UnsupportedError(absl::StrCat(ck_.dir(), ": the ", backend_.name(), " backend has no kernel for ", f.name,
                                         " weights"));
  }
  // On the device when the backend generates there: no host copy of the part, no upload.
  LLMRT_ASSIGN_OR_RETURN(std::optional<Weight> w, backend_.MakeSyntheticWeight(spec));
  if (w.has_value()) {
    resident_[spec.format] += f.resident_bytes(spec.part_rows, spec.part_cols, spec.params);
    return *std::move(w);
  }
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, MakeSyntheticPart(spec));
  return Prepare(m, spec.name);
}

absl::StatusOr<std::vector<float>> WeightLoader::SyntheticHostRows(const SyntheticMatrixSpec& spec) {
  // The part need not fall on the format's blocks or groups here (it is dequantized): the
  // smallest part around it that does is made, and the rows are read out of that.
  SyntheticMatrixSpec cover = spec;
  int64_t rb = 1, cb = 1;
  if (spec.format == kWeightFp8Block) {
    rb = std::max<int64_t>(1, spec.params.block_rows);
    cb = std::max<int64_t>(1, spec.params.block_cols);
  } else if (spec.format == kWeightInt4Group) {
    cb = std::max<int64_t>(1, spec.params.group);
  }
  const auto widen = [](int64_t begin, int64_t n, int64_t total, int64_t block, int64_t* b0, int64_t* bn) {
    *b0 = begin / block * block;
    *bn = std::min(total, (begin + n + block - 1) / block * block) - *b0;
  };
  widen(spec.row0, spec.part_rows, spec.rows, rb, &cover.row0, &cover.part_rows);
  widen(spec.col0, spec.part_cols, spec.cols, cb, &cover.col0, &cover.part_cols);
  LLMRT_RETURN_IF_ERROR(CheckSynthetic(cover));
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, MakeSyntheticPart(cover));
  return HostRows(m, MatrixSlice{spec.row0 - cover.row0, spec.part_rows, spec.col0 - cover.col0, spec.part_cols});
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols,
                                            const MatrixSlice& part) {
  if (ck_.synthetic()) return MakeSynthetic(SyntheticPart(name, rows, cols, part));
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix p, Cut(name, m, part));
  return Prepare(p, name);
}

absl::StatusOr<Weight> WeightLoader::Dense(const std::string& name, int64_t rows, int64_t cols,
                                           const MatrixSlice& part) {
  const Bounds b = BoundsOf(part, rows, cols);
  std::vector<float> host;
  if (ck_.synthetic()) {
    const SyntheticMatrixSpec spec = SyntheticPart(name, rows, cols, part);
    if (!WeightFormatOf(spec.format).quantized) return MakeSynthetic(spec);
    LLMRT_ASSIGN_OR_RETURN(host, SyntheticHostRows(spec));
  } else {
    LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
    if (!WeightFormatOf(m.format).quantized) {
      LLMRT_ASSIGN_OR_RETURN(StoredMatrix p, Cut(name, m, part));
      return Prepare(p, name);
    }
    // Dequantized on the host from the mapped checkpoint bytes (only the part's rows), then
    // handed to the backend.
    host = HostRows(m, part);
  }
  StoredMatrix dense;
  dense.format = kWeightF32;
  dense.rows = b.nr;
  dense.cols = b.nc;
  dense.codes = NewHostArray(DType::kF32, {b.nr, b.nc});
  std::memcpy(const_cast<uint8_t*>(dense.codes.data), host.data(), host.size() * sizeof(float));
  return Prepare(dense, name);
}

absl::StatusOr<Weight> WeightLoader::MlaKvB(const std::string& name, int64_t rows, int64_t cols,
                                            const MatrixSlice& part) {
  if (ck_.synthetic()) {
    const SyntheticMatrixSpec spec = SyntheticPart(name, rows, cols, part);
    if (WeightFormatOf(spec.format).quantized && backend_.ReadsQuantizedMlaKvB(spec.format)) {
      return MakeSynthetic(spec);
    }
    return Dense(name, rows, cols, part);
  }
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
  if (WeightFormatOf(m.format).quantized && backend_.ReadsQuantizedMlaKvB(m.format)) {
    // A slice the format cannot cut (blocks across the ranks' rows) is dequantized instead.
    absl::StatusOr<StoredMatrix> p = Cut(name, m, part);
    if (p.ok()) return Prepare(*p, name);
  }
  return Dense(name, rows, cols, part);
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
  const auto same_layout = [&](WeightFormatId stored, const WeightParams& p) {
    return stored == format && p.group == params.group && p.block_rows == params.block_rows &&
           p.block_cols == params.block_cols;
  };
  std::vector<float> host;
  if (ck_.synthetic()) {
    const SyntheticMatrixSpec spec = SyntheticPart(name, rows, cols, part);
    if (same_layout(spec.format, spec.params)) return MakeSynthetic(spec);
    if (f.quantize == nullptr) {
      return UnsupportedError(absl::StrCat(f.name, " weights cannot be made at load (\"", name, "\")"));
    }
    LLMRT_ASSIGN_OR_RETURN(host, SyntheticHostRows(spec));
  } else {
    // Validates the stored tensor (presence, dtype, shape, scales) and counts its parameters.
    LLMRT_ASSIGN_OR_RETURN(StoredMatrix m, Find(name, rows, cols));
    if (same_layout(m.format, m.params)) {
      LLMRT_ASSIGN_OR_RETURN(StoredMatrix p, Cut(name, m, part));
      return Prepare(p, name);
    }
    if (f.quantize == nullptr) {
      return UnsupportedError(absl::StrCat(f.name, " weights cannot be made at load (\"", name, "\")"));
    }
    host = HostRows(m, part);
  }
  LLMRT_ASSIGN_OR_RETURN(StoredMatrix q, f.quantize(host.data(), b.nr, b.nc, params));
  return Prepare(q, name);
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
