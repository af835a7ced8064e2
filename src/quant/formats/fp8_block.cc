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

// Blocks must not straddle two ranks' slices: each bound is a multiple of the block size, or the
// matrix's edge.
absl::Status CheckBlockBounds(const char* dim, int64_t begin, int64_t n, int64_t total, int64_t block) {
  const int64_t end = begin + n;
  if (begin % block != 0 || (end % block != 0 && end != total)) {
    return absl::FailedPreconditionError(absl::StrCat(dim, " [", begin, ", ", end, ") of ", total,
                                                      " do not fall on FP8 blocks of ", block));
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredMatrix> Slice(const StoredMatrix& m, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  const int64_t br = m.params.block_rows, bc = m.params.block_cols;
  LLMRT_RETURN_IF_ERROR(CheckBlockBounds("rows", r0, nr, m.rows, br));
  LLMRT_RETURN_IF_ERROR(CheckBlockBounds("columns", c0, nc, m.cols, bc));
  StoredMatrix s = m;
  s.rows = nr;
  s.cols = nc;
  s.codes = SliceHostArray(m.codes, m.cols, r0, nr, c0, nc, {nr, nc});
  const int64_t sb0 = r0 / br, snb = CeilDiv(r0 + nr, br) - sb0, scb0 = c0 / bc, sncb = CeilDiv(c0 + nc, bc) - scb0;
  s.scales = SliceHostArray(m.scales, CeilDiv(m.cols, bc) * 4, sb0, snb, scb0 * 4, sncb * 4, {snb, sncb});
  return s;
}

}  // namespace

const WeightFormatTraits& Fp8Block() {
  static const WeightFormatTraits t = {kWeightFp8Block, "FP8 e4m3 block-scaled", true, ResidentBytes, Dequantize, Load,
                                       nullptr, Slice};
  return t;
}

}  // namespace llmrt::formats
