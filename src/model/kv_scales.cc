#include "src/model/kv_scales.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/quant/kv_codec.h"
#include "src/util/bf16.h"
#include "src/util/errors.h"

namespace llmrt {

absl::StatusOr<std::vector<float>> CheckpointKvScales(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  std::vector<float> scales;
  int64_t found = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    float s = 0.0f;
    for (const char* which : {"k_scale", "v_scale"}) {
      const std::string name = absl::StrCat(c.prefix, "layers.", i, ".self_attn.", which);
      const TensorInfo* t = ck.Find(name);
      if (t == nullptr) continue;
      float v = 0.0f;
      if (t->numel() != 1 || (t->dtype != DType::kF32 && t->dtype != DType::kBF16)) {
        return FormatError(absl::StrCat(ck.dir(), ": \"", name, "\" must be one F32 or BF16 value"));
      }
      if (t->dtype == DType::kF32) {
        std::memcpy(&v, t->data, sizeof(float));
      } else {
        uint16_t b = 0;
        std::memcpy(&b, t->data, sizeof(b));
        v = Bf16ToF32(b);
      }
      if (!(v > 0.0f) || !std::isfinite(v)) {
        return FormatError(absl::StrCat(ck.dir(), ": \"", name, "\" is ", v, ", not a positive finite scale"));
      }
      if (v < kMinKvScale || v > kMaxKvScale) {
        return FormatError(absl::StrCat(ck.dir(), ": \"", name, "\" is ", v, ", outside [", kMinKvScale, ", ",
                                        kMaxKvScale, "]"));
      }
      s = std::max(s, v);
    }
    if (s > 0.0f) ++found;
    scales.push_back(s);
  }
  if (found == 0) return std::vector<float>();
  if (found != c.num_layers) {
    return FormatError(absl::StrCat(ck.dir(), ": ", found, " of ", c.num_layers,
                                    " layers carry self_attn.k_scale; FP8 KV scales need all or none"));
  }
  return scales;
}

}  // namespace llmrt
