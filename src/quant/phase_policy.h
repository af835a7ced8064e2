// The phase policy (Cloudflare's on SGLang): which weights a forward pass multiplies and how the
// KV cache stores what it computes. Prefill is compute-bound, so it keeps higher-precision
// weights; decode is bandwidth-bound, so INT4 experts (a quarter of BF16's bytes) speed it up.
// A pass in which every sequence decodes is a decode pass; prefill chunks and scoring are
// prefill passes.
#ifndef LLMRT_QUANT_PHASE_POLICY_H_
#define LLMRT_QUANT_PHASE_POLICY_H_

#include <cstdint>

#include "src/quant/kv_codec.h"
#include "src/quant/weight_format.h"

namespace llmrt {

// Storage of the routed experts for one phase: as the checkpoint stores them, or quantized at
// load to INT4 (symmetric, round to nearest, groups of 32 or 128) from BF16, FP8 or INT4.
enum class ExpertStorage { kAsStored, kInt4G32, kInt4G128 };

// The weight format and parameters an ExpertStorage quantizes to (kAsStored: none).
inline bool QuantizesAtLoad(ExpertStorage s, WeightFormatId* format, WeightParams* params) {
  if (s == ExpertStorage::kAsStored) return false;
  *format = kWeightInt4Group;
  params->group = s == ExpertStorage::kInt4G32 ? 32 : 128;
  return true;
}

struct PhasePolicy {
  ExpertStorage prefill_experts = ExpertStorage::kAsStored;
  ExpertStorage decode_experts = ExpertStorage::kAsStored;
  uint32_t kv_codec = kKvCodecBf16;  // how the cache stores every row
  // Lossy codecs: a pass attends over the positions it writes itself in BF16 (the rows it just
  // computed) and over earlier positions in the stored codec.
  bool attend_own_rows_bf16 = true;

  // Different expert storage per phase keeps two resident sets.
  bool separate_decode_experts() const { return prefill_experts != decode_experts; }
};

}  // namespace llmrt

#endif  // LLMRT_QUANT_PHASE_POLICY_H_
