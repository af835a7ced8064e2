// The built-in weight formats (one file each), registered by src/quant/weight_format.cc.
#ifndef LLMRT_QUANT_FORMATS_BUILTIN_H_
#define LLMRT_QUANT_FORMATS_BUILTIN_H_

#include <string>
#include <vector>

#include "src/quant/weight_format.h"

namespace llmrt::formats {

const WeightFormatTraits& F32();        // float32 [rows, cols]
const WeightFormatTraits& Bf16();       // bfloat16 [rows, cols]
const WeightFormatTraits& Fp8Block();   // e4m3 + float32 block scales (DeepSeek / Kimi / GLM FP8)
const WeightFormatTraits& Int4Group();  // compressed-tensors pack-quantized (Kimi K2-Thinking)

// Shared by the loaders: a checkpoint tensor `name` that must be `dtype` of `shape`, recorded in
// *used. NotFound when absent, FormatError when its dtype or shape differ.
absl::StatusOr<const TensorInfo*> RequireTensor(const TensorSource& src, const std::string& name, DType dtype,
                                                const std::vector<int64_t>& shape, std::vector<std::string>* used);
// A HostArray viewing a checkpoint tensor's bytes as `dtype` of `shape`.
HostArray ViewTensor(const TensorInfo& t, DType dtype, std::vector<int64_t> shape);

}  // namespace llmrt::formats

#endif  // LLMRT_QUANT_FORMATS_BUILTIN_H_
