// The tensor-core instructions the MMA kernels use, and the ldmatrix loads that feed them (device
// code only; tests/cuda_emulation/ computes them from the PTX ISA's fragment tables instead).
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

// Two 8x8 bfloat16 matrices transposed into a B fragment: lanes 0-15 give the addresses of rows
// k0 .. k0 + 15 (16-byte aligned), each holding the 8 columns of the fragment's n.
__device__ __forceinline__ void LdMatrixTrans2(const uint16_t* row, uint32_t* b0, uint32_t* b1) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(*b0), "=r"(*b1) : "r"(addr));
}

// Four (two) 8x8 bfloat16 matrices, not transposed: lanes 8j .. 8j+7 give the addresses of matrix
// j's rows (16-byte aligned), and lane t receives row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1 of
// each matrix.
__device__ __forceinline__ void LdMatrix4(const uint16_t* row, uint32_t (&r)[4]) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrix2(const uint16_t* row, uint32_t (&r)[2]) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_MMA_CUH_
