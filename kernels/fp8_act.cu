// The FP8 activation policy's quantization: each activation row, per block of the weight's
// columns, to e4m3 codes under one float32 scale, with the arithmetic of the CPU's
// cpu::QuantizeActivationsFp8 (src/backend/cpu/fp8_bf16_dot.h) operation for operation, so both
// backends feed their matmuls the same codes and scales:
//
//   amax  = the largest magnitude of the block's values (a NaN wins);
//   scale = amax / 448, replaced by 1 where it is zero, a float32 denormal or NaN;
//   code  = FloatToFp8(x * (1 / scale)) (nearest even, saturating at 448).
//
// One block of threads per (column block, row): the threads stride over the block's columns,
// reduce the maximum through shuffles and shared memory, then write their codes.
#include <cfloat>

#include "kernels/common.cuh"

namespace llmrt::cuda {
namespace {

constexpr int kThreads = 128;

// The maximum of two magnitudes where a NaN wins: the CPU's `if (isnan(a) || a > amax) amax = a`
// folded in any order gives the same result (NaN if any value is NaN, else the maximum).
__device__ __forceinline__ float MaxNan(float a, float b) { return (isnan(a) || a > b) ? a : b; }

__global__ void __launch_bounds__(kThreads) QuantizeFp8ActKernel(ConstMat x, int64_t block_cols, Fp8ActOut o) {
  __shared__ float partial[kThreads / 32];
  const int64_t b = blockIdx.x, K = x.cols;
  const int64_t c0 = b * block_cols, c1 = c0 + block_cols < K ? c0 + block_cols : K;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t t = blockIdx.y; t < x.rows; t += gridDim.y) {
    const float* xr = x.data + t * x.ld;
    float amax = 0.0f;
    for (int64_t c = c0 + threadIdx.x; c < c1; c += kThreads) amax = MaxNan(fabsf(xr[c]), amax);
    for (int off = 16; off > 0; off >>= 1) amax = MaxNan(__shfl_xor_sync(0xffffffffu, amax, off), amax);
    __syncthreads();  // the previous row's maxima have been read
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    amax = partial[0];
    for (int w = 1; w < kThreads / 32; ++w) amax = MaxNan(partial[w], amax);
    float scale = amax / 448.0f;
    if (!(scale >= FLT_MIN)) scale = 1.0f;
    const float inv = 1.0f / scale;
    if (threadIdx.x == 0) o.scales[b * o.scales_ld + t] = scale;
    for (int64_t c = c0 + threadIdx.x; c < c1; c += kThreads) {
      const uint8_t code = FloatToFp8(xr[c] * inv);
      const int64_t i = t * K + c;
      if (o.codes != nullptr) o.codes[i] = code;
      if (o.values != nullptr) o.values[i] = Fp8ToFloat(code);
      if (o.dequantized != nullptr) o.dequantized[i] = Fp8ToFloat(code) * scale;
    }
  }
}

}  // namespace

cudaError_t LaunchQuantizeFp8Act(ConstMat x, int64_t block_cols, Fp8ActOut out, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return cudaSuccess;
  if (block_cols <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((x.cols + block_cols - 1) / block_cols),
                  static_cast<unsigned>(x.rows < 65535 ? x.rows : 65535));
  QuantizeFp8ActKernel<<<grid, kThreads, 0, s>>>(x, block_cols, out);
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
