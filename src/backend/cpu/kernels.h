// CPU kernels with a scalar reference for each. The SIMD versions are compiled for every
// Highway target and chosen at run time (HWY_DYNAMIC_DISPATCH) once per call.
#ifndef LLMRT_BACKEND_CPU_KERNELS_H_
#define LLMRT_BACKEND_CPU_KERNELS_H_

#include <cstdint>
#include <vector>

#include "src/backend/backend.h"
#include "src/backend/cpu/cache_line_vector.h"
#include "src/backend/cpu/int8_dot.h"
#include "src/backend/tensor.h"

namespace llmrt::cpu {

// For n in [n0, n1), t in [0, T): out[t * ldo + n] = sum_k W[n * K + k] * x[t * ldx + k].
// W is float32 or bfloat16 (wdtype), row-major [*, K]; x and out are float32.
void MatMulRows(DType wdtype, const void* w, int64_t k, const float* x, int64_t ldx, int64_t t,
                float* out, int64_t ldo, int64_t n0, int64_t n1);
// sum_i a[i] * b[i]; b is float32, bfloat16 or float8 e4m3 (unscaled codes).
float Dot(const float* a, DType bdtype, const void* b, int64_t n);
// y[i] += alpha * x[i]; x is float32, bfloat16 or float8 e4m3 (unscaled codes).
void Axpy(float alpha, DType xdtype, const void* x, float* y, int64_t n);

// y[i] = scale * x[i]; x is float32, bfloat16 or float8 e4m3 (codes); scale 1 gives bf16 and f32
// values exactly.
void ToF32(float scale, DType xdtype, const void* x, float* y, int64_t n);
// out[i * ldo + c] += sum_{j < n} p[i * ldp + j] * v[j * ldv + c] for i < m, c < cols, v float32
// or bfloat16 (ldv in elements): each output takes Axpy's multiply-add per j, in increasing j,
// so the floats are those of n Axpy calls over v's rows (attention's weighted values, MLA's
// query absorption), at a fraction of the loads.
void AccumulateRows(const float* p, int64_t ldp, int64_t m, DType vdtype, const void* v, int64_t ldv, int64_t n,
                    int64_t cols, float* out, int64_t ldo);

// x = softmax(scale * x) in place (attention's weights): float32 values and exponentials, their
// sum in float64. The result does not depend on where x lies or on anything beside it.
void SoftmaxScaled(float* x, int64_t n, float scale);

// Rows [r0, r0 + n) of an FP8 block-scaled matrix (codes [*, cols], float32 scales per
// block_rows x block_cols block) dequantized into out [n, cols]: bit-identical to
// DequantizeFp8BlockRow row by row.
void Fp8BlockRowsToF32(const uint8_t* codes, const float* scales, int64_t cols, int64_t block_rows,
                       int64_t block_cols, int64_t r0, int64_t n, float* out);

// The CPU matmul of one weight format.
struct MatMulKernel {
  // Rows [n0, n1) of out = x w^T, x as `prepare` returned it.
  void (*rows)(const Weight& w, const float* x, int64_t ldx, int64_t t, float* out, int64_t ldo, int64_t n0,
               int64_t n1) = nullptr;
  // The activation layout `rows` reads (INT4: x permuted within each 32-column chunk, in
  // `scratch`); nullptr: x as it is.
  const float* (*prepare)(const Weight& w, const float* x, int64_t ldx, int64_t t, CacheLineVector<float>& scratch,
                          int64_t* ld) = nullptr;
  // Under the INT8 activation policy: rows [n0, n1) of out = x w^T over activations rounded to
  // int8 per 32 columns (int8_dot.h), for the weights `accepts_int8` admits; nullptr: the format
  // keeps the float32 path under that policy.
  void (*rows_int8)(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0,
                    int64_t n1) = nullptr;
  bool (*accepts_int8)(const Weight& w) = nullptr;
};
// The kernel of a format: the registered SIMD one, else a generic one over the format's scalar
// dequantization (any registered format runs on the CPU). nullptr for an unknown format.
const MatMulKernel* FindMatMulKernel(WeightFormatId format);
// Registers a SIMD kernel for a format (the built-in formats are registered in matmul.cc).
void RegisterMatMulKernel(WeightFormatId format, const MatMulKernel& kernel);

// The INT8-policy kernel of w (the rows_int8 of its format's kernel when it accepts w), else
// nullptr: w runs its float32 path.
const MatMulKernel* FindInt8MatMulKernel(const Weight& w);

// MatMulRows for a weight of any format, x as PrepareActivations returned it.
void MatMulWeightRows(const Weight& w, const float* x, int64_t ldx, int64_t t, float* out, int64_t ldo, int64_t n0,
                      int64_t n1);
// The activation layout w's kernel reads; sets *ld to the row stride of the returned rows.
const float* PrepareActivations(const Weight& w, const float* x, int64_t ldx, int64_t t, CacheLineVector<float>& scratch,
                                int64_t* ld);
// Row `row` of w in float32, natural column order (the format's scalar reference).
void DequantizeRow(const Weight& w, int64_t row, float* out);
// The host bytes of a CPU weight.
MatrixBytes BytesOf(const Weight& w);

// Scalar references, used by the kernel tests.
void MatMulRowsScalar(DType wdtype, const void* w, int64_t k, const float* x, int64_t ldx,
                      int64_t t, float* out, int64_t ldo, int64_t n0, int64_t n1);
float DotScalar(const float* a, DType bdtype, const void* b, int64_t n);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_KERNELS_H_
