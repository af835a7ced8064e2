// INT4 symmetric with one bfloat16 scale per `group` columns: compressed-tensors pack-quantized
// (Kimi K2-Thinking and later). A checkpoint stores `<stem>weight_packed` (int32 [rows, cols/8],
// eight codes per little-endian word, each q + 8, low nibble first), `<stem>weight_scale` (bf16
// [rows, cols/group]) and optionally `<stem>weight_shape` ([rows, cols]); w = q * scale. llmrt
// reads the words as bytes [rows, cols/2]: column 2j in the low nibble of byte j, 2j+1 in the
// high one. It is also the format routed experts are quantized to at load (round to nearest).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/quant/formats/builtin.h"
#include "src/quant/weight_quant.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt::formats {
namespace {

// The [rows, cols] a weight_shape tensor holds (I32 or I64, two values; read without assuming
// alignment), or {-1, -1}.
std::pair<int64_t, int64_t> ShapeValues(const TensorInfo& t) {
  if ((t.dtype != DType::kI32 && t.dtype != DType::kI64) || t.numel() != 2) return {-1, -1};
  if (t.dtype == DType::kI32) {
    int32_t v[2];
    std::memcpy(v, t.data, sizeof(v));
    return {v[0], v[1]};
  }
  int64_t v[2];
  std::memcpy(v, t.data, sizeof(v));
  return {v[0], v[1]};
}

absl::StatusOr<std::optional<StoredMatrix>> Load(const TensorSource& src, const std::string& name, int64_t rows,
                                                 int64_t cols, std::vector<std::string>* used) {
  constexpr size_t kSuffix = 6;  // "weight"
  if (src.Find(name) != nullptr || name.size() < kSuffix || name.compare(name.size() - kSuffix, kSuffix, "weight") != 0) {
    return std::nullopt;
  }
  const std::string stem = name.substr(0, name.size() - kSuffix);
  if (src.Find(stem + "weight_packed") == nullptr) return std::nullopt;
  const QuantConfig& q = src.quant_config();
  if (q.method != QuantConfig::Method::kCompressedInt4) {
    return FormatError(absl::StrCat(src.where(), ": \"", stem, "weight_packed\" needs a compressed-tensors ",
                                    "pack-quantized quantization_config"));
  }
  if (cols % q.group_size != 0) {
    return FormatError(absl::StrCat(src.where(), ": INT4 group size ", q.group_size, " does not divide the ", cols,
                                    " columns of \"", stem, "weight\""));
  }
  if (const TensorInfo* shape = src.Find(stem + "weight_shape"); shape != nullptr) {
    if (ShapeValues(*shape) != std::pair<int64_t, int64_t>(rows, cols)) {
      return FormatError(absl::StrCat(src.where(), ": \"", stem, "weight_shape\" is not [", rows, ", ", cols, "]"));
    }
    used->push_back(stem + "weight_shape");
  }
  StoredMatrix m;
  m.format = kWeightInt4Group;
  m.rows = rows;
  m.cols = cols;
  m.params.group = q.group_size;
  LLMRT_ASSIGN_OR_RETURN(const TensorInfo* s,
                         RequireTensor(src, stem + "weight_scale", DType::kBF16, {rows, cols / q.group_size}, used));
  LLMRT_ASSIGN_OR_RETURN(const TensorInfo* p, RequireTensor(src, stem + "weight_packed", DType::kI32, {rows, cols / 8}, used));
  m.scales = ViewTensor(*s, DType::kBF16, {rows, cols / q.group_size});
  m.codes = ViewTensor(*p, DType::kU8, {rows, cols / 2});
  return m;
}

uint64_t ResidentBytes(int64_t rows, int64_t cols, const WeightParams& p) {
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols / 2) +
         static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols / p.group) * 2;
}

void Dequantize(const MatrixBytes& m, int64_t row, float* out) {
  DequantizeInt4Row(m.codes, reinterpret_cast<const uint16_t*>(m.scales), m.cols, m.params.group, row, out);
}

absl::StatusOr<StoredMatrix> Quantize(const float* w, int64_t rows, int64_t cols, const WeightParams& p) {
  if (p.group <= 0 || cols % p.group != 0 || p.group % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("INT4 group ", p.group, " does not divide ", cols, " columns"));
  }
  StoredMatrix m;
  m.format = kWeightInt4Group;
  m.rows = rows;
  m.cols = cols;
  m.params.group = p.group;
  m.codes = NewHostArray(DType::kU8, {rows, cols / 2});
  m.scales = NewHostArray(DType::kBF16, {rows, cols / p.group});
  auto* codes = const_cast<uint8_t*>(m.codes.data);
  auto* scales = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(m.scales.data));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeInt4Row(w + r * cols, cols, p.group, codes + r * (cols / 2), scales + r * (cols / p.group));
  }
  return m;
}

// Rows split freely (scales are per row); columns only on whole groups.
absl::StatusOr<StoredMatrix> Slice(const StoredMatrix& m, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  const int64_t g = m.params.group;
  if (c0 % g != 0 || nc % g != 0) {
    return absl::FailedPreconditionError(absl::StrCat("columns [", c0, ", ", c0 + nc, ") of ", m.cols,
                                                      " do not fall on INT4 groups of ", g));
  }
  StoredMatrix s = m;
  s.rows = nr;
  s.cols = nc;
  s.codes = SliceHostArray(m.codes, m.cols / 2, r0, nr, c0 / 2, nc / 2, {nr, nc / 2});
  s.scales = SliceHostArray(m.scales, m.cols / g * 2, r0, nr, c0 / g * 2, nc / g * 2, {nr, nc / g});
  return s;
}

}  // namespace

const WeightFormatTraits& Int4Group() {
  static const WeightFormatTraits t = {kWeightInt4Group, "INT4 group-scaled", true, ResidentBytes, Dequantize, Load,
                                       Quantize, Slice};
  return t;
}

}  // namespace llmrt::formats
