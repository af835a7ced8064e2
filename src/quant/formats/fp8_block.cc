// FP8 e4m3 with block scales: the DeepSeek-V3 / Kimi K2 / GLM FP8 releases. Codes [rows, cols]
// (float8_e4m3fn) and float32 scales [ceil(rows / block_rows), ceil(cols / block_cols)] named
// `<name>_scale_inv` (despite the name they multiply: w = fp8(q) * scale), block sizes from
// quantization_config.weight_block_size.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/quant/formats/builtin.h"
#include "src/quant/weight_quant.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt::formats {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::StatusOr<std::optional<StoredMatrix>> Load(const TensorSource& src, const std::string& name, int64_t rows,
                                                 int64_t cols, std::vector<std::string>* used) {
  const TensorInfo* info = src.Find(name);
  if (info == nullptr || info->dtype != DType::kF8E4M3) return std::nullopt;
  const QuantConfig& q = src.quant_config();
  if (q.method != QuantConfig::Method::kFp8Block) {
    return FormatError(absl::StrCat(src.where(), ": tensor \"", name, "\" is F8_E4M3 but config.json has no fp8 ",
                                    "quantization_config with weight_block_size"));
  }
  if (info->shape != std::vector<int64_t>{rows, cols}) {
    return FormatError(absl::StrCat(src.where(), ": tensor \"", name, "\" has shape [", absl::StrJoin(info->shape, ", "),
                                    "], expected [", rows, ", ", cols, "]"));
  }
  StoredMatrix m;
  m.format = kWeightFp8Block;
  m.rows = rows;
  m.cols = cols;
  m.params.block_rows = q.block_rows;
  m.params.block_cols = q.block_cols;
  const std::vector<int64_t> sshape = {CeilDiv(rows, q.block_rows), CeilDiv(cols, q.block_cols)};
  LLMRT_ASSIGN_OR_RETURN(const TensorInfo* s, RequireTensor(src, name + "_scale_inv", DType::kF32, sshape, used));
  used->push_back(name);
  m.scales = ViewTensor(*s, DType::kF32, sshape);
  m.codes = ViewTensor(*info, DType::kF8E4M3, {rows, cols});
  return m;
}

uint64_t ResidentBytes(int64_t rows, int64_t cols, const WeightParams& p) {
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) +
         static_cast<uint64_t>(CeilDiv(rows, p.block_rows) * CeilDiv(cols, p.block_cols)) * 4;
}

void Dequantize(const MatrixBytes& m, int64_t row, float* out) {
  DequantizeFp8BlockRow(m.codes, reinterpret_cast<const float*>(m.scales), m.cols, m.params.block_rows,
                        m.params.block_cols, row, out);
}

}  // namespace

const WeightFormatTraits& Fp8Block() {
  static const WeightFormatTraits t = {kWeightFp8Block, "FP8 e4m3 block-scaled", true, ResidentBytes, Dequantize, Load,
                                       nullptr};
  return t;
}

}  // namespace llmrt::formats
