#include "src/model/synthetic.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/util/bf16.h"

namespace llmrt {

WeightFormatId SyntheticFormat(const ModelConfig& c, const std::string& name, WeightParams* params) {
  *params = {};
  const bool in_layers = absl::StartsWith(name, c.prefix + "layers.");
  const bool router = absl::EndsWith(name, ".mlp.gate.weight");
  switch (c.quant.method) {
    case QuantConfig::Method::kFp8Block:
      if (!in_layers || router || absl::EndsWith(name, ".indexer.weights_proj.weight")) return kWeightBf16;
      params->block_rows = c.quant.block_rows;
      params->block_cols = c.quant.block_cols;
      return kWeightFp8Block;
    case QuantConfig::Method::kCompressedInt4:
      if (!in_layers || name.find(".mlp.experts.") == std::string::npos) return kWeightBf16;
      params->group = c.quant.group_size;
      return kWeightInt4Group;
    case QuantConfig::Method::kNone:
      break;
  }
  return kWeightBf16;
}

SyntheticMatrixSpec SyntheticSpec(const ModelConfig& c, uint64_t seed, const std::string& name, int64_t rows,
                                  int64_t cols) {
  SyntheticMatrixSpec s;
  s.name = name;
  s.stream = SyntheticStream(seed, name);
  s.format = SyntheticFormat(c, name, &s.params);
  s.rows = s.part_rows = rows;
  s.cols = s.part_cols = cols;
  return s;
}

absl::StatusOr<StoredMatrix> MakeSyntheticMatrix(const ModelConfig& c, uint64_t seed, const std::string& name,
                                                 int64_t rows, int64_t cols) {
  return MakeSyntheticPart(SyntheticSpec(c, seed, name, rows, cols));
}

absl::StatusOr<HostArray> MakeSyntheticVector(const std::string& name, int64_t n) {
  const bool f32 = absl::EndsWith(name, ".e_score_correction_bias");
  auto v = NewSyntheticArray(name, f32 ? DType::kF32 : DType::kBF16, {n});
  if (!v.ok()) return v.status();
  // NewHostArray zeroes: biases are done; norm weights become 1.
  if (absl::EndsWith(name, "norm.weight")) {
    auto* out = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(v->data));
    std::fill(out, out + n, F32ToBf16(1.0f));
  }
  return v;
}

}  // namespace llmrt
