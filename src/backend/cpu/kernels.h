// CPU kernels with a scalar reference for each. The SIMD versions are compiled for every
// Highway target and chosen at run time (HWY_DYNAMIC_DISPATCH) once per call.
#ifndef LLMRT_BACKEND_CPU_KERNELS_H_
#define LLMRT_BACKEND_CPU_KERNELS_H_

#include <cstdint>

#include "src/backend/tensor.h"

namespace llmrt::cpu {

// For n in [n0, n1), t in [0, T): out[t * ldo + n] = sum_k W[n * K + k] * x[t * ldx + k].
// W is float32 or bfloat16 (wdtype), row-major [*, K]; x and out are float32.
void MatMulRows(DType wdtype, const void* w, int64_t k, const float* x, int64_t ldx, int64_t t,
                float* out, int64_t ldo, int64_t n0, int64_t n1);
// sum_i a[i] * b[i]; b is float32 or bfloat16.
float Dot(const float* a, DType bdtype, const void* b, int64_t n);
// y[i] += alpha * x[i]; x is float32 or bfloat16.
void Axpy(float alpha, DType xdtype, const void* x, float* y, int64_t n);

// Scalar references, used by the kernel tests.
void MatMulRowsScalar(DType wdtype, const void* w, int64_t k, const float* x, int64_t ldx,
                      int64_t t, float* out, int64_t ldo, int64_t n0, int64_t n1);
float DotScalar(const float* a, DType bdtype, const void* b, int64_t n);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_KERNELS_H_
