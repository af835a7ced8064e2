#include "src/util/bf16.h"

namespace llmrt {

void Bf16ToF32Array(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToF32(in[i]);
}

void F32ToBf16Array(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F32ToBf16(in[i]);
}

}  // namespace llmrt
