// The per-layer FP8 KV scales a checkpoint carries (self_attn.k_scale, and v_scale for GQA, as
// vLLM / compressed-tensors kv_cache_scheme write them: stored = x / scale).
#ifndef LLMRT_MODEL_KV_SCALES_H_
#define LLMRT_MODEL_KV_SCALES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "src/model/checkpoint.h"

namespace llmrt {

// One scale per layer (a cache row has one scale, so a GQA layer uses the larger of its two).
// Empty when the checkpoint has none; an error when only some layers have them or one is not a
// positive finite scalar within the codec's bounds.
absl::StatusOr<std::vector<float>> CheckpointKvScales(const Checkpoint& ck);

}  // namespace llmrt

#endif  // LLMRT_MODEL_KV_SCALES_H_
