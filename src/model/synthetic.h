// Synthetic weights: the tensors a checkpoint of a config.json would hold, made at load instead
// of read (llm_runtime_create_synthetic). They exist so that real layer shapes (Kimi K2's 7168
// hidden width, GLM-5's indexer, GLM-4.5's GQA) can be benchmarked and sized without writing or
// downloading a multi-GB checkpoint; their tokens mean nothing.
//
// What is made, per tensor the architecture asks WeightLoader for:
//  - the storage the released checkpoints use for that tensor under the config's
//    quantization_config: "fp8" (DeepSeek-V3 / Kimi K2 / GLM FP8 releases): every decoder-layer
//    linear is FP8 e4m3 with float32 block scales, except the MoE router (`mlp.gate.weight`) and
//    the DSA indexer's `weights_proj`, which stay BF16, as do the embedding and lm_head;
//    "compressed-tensors" pack-quantized INT4 (Kimi K2-Thinking): the routed experts
//    (`.mlp.experts.`) are INT4 with bfloat16 group scales, everything else BF16; no
//    quantization_config: BF16.
//  - values like an initialized model: matrices uniform with standard deviation 0.02 (FP8 codes
//    span the e4m3 range under a per-block scale, never NaN; INT4 codes uniform in [-7, 7] under
//    positive per-group scales), norm weights 1, biases 0, the router's e_score_correction_bias
//    0 (float32, as DeepSeek-V3 stores it). Activations stay finite through any number of layers
//    (RMSNorm before every block).
//  - deterministic: element i of tensor `name` depends only on (seed, name, i), through a
//    counter-based hash (src/quant/synthetic_values.h), so two runtimes with the same seed hold
//    identical weights whatever the thread count or the backend, and a part equals the same part
//    of the whole.
//  - made where they are used, and only the part that is used: a tensor-parallel rank makes only
//    its slice (src/quant/synthetic_weights.h); a backend that generates on its device
//    (Backend::MakeSyntheticWeight: the CUDA backend) makes it there, with no host buffer and no
//    upload; otherwise the part is made in host memory and handed to Backend::PrepareWeight.
#ifndef LLMRT_MODEL_SYNTHETIC_H_
#define LLMRT_MODEL_SYNTHETIC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/model/config.h"
#include "src/quant/synthetic_values.h"
#include "src/quant/synthetic_weights.h"
#include "src/quant/weight_format.h"

namespace llmrt {

// Standard deviation of synthetic matrix entries (the usual initializer_range of these models).
inline constexpr float kSyntheticStd = synthetic::kStd;

// The format and layout constants a released checkpoint of config `c` stores matrix `name` in
// ("<stem>weight"), by the rules above.
WeightFormatId SyntheticFormat(const ModelConfig& c, const std::string& name, WeightParams* params);

// The whole of matrix `name` [rows, cols] under `seed`, in SyntheticFormat (narrow the part
// fields to make a slice).
SyntheticMatrixSpec SyntheticSpec(const ModelConfig& c, uint64_t seed, const std::string& name, int64_t rows,
                                  int64_t cols);

// Matrix `name` [rows, cols] in SyntheticFormat, whole, made in host memory (multi-threaded for
// large matrices). ResourceExhausted naming the tensor and its bytes when the host memory cannot
// be had.
absl::StatusOr<StoredMatrix> MakeSyntheticMatrix(const ModelConfig& c, uint64_t seed, const std::string& name,
                                                 int64_t rows, int64_t cols);

// Vector `name` [n]: norm weights ("...norm.weight") are 1 in BF16, the router's
// e_score_correction_bias 0 in F32, other vectors (biases) 0 in BF16.
absl::StatusOr<HostArray> MakeSyntheticVector(const std::string& name, int64_t n);

}  // namespace llmrt

#endif  // LLMRT_MODEL_SYNTHETIC_H_
