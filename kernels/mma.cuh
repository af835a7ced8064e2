// The tensor-core instructions the MMA kernels use (device code only; tests/cuda_emulation/
// computes them from the PTX ISA's fragment tables instead).
#ifndef LLMRT_KERNELS_MMA_CUH_
#define LLMRT_KERNELS_MMA_CUH_

#include <cstdint>

namespace llmrt::cuda {

// d += a b: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (A 16x16 in four registers of
// bfloat16 pairs, B 16x8 in two, float32 accumulators).
__device__ __forceinline__ void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_MMA_CUH_
