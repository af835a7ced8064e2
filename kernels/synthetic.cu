// Synthetic weights made on the device (llm_runtime_create_synthetic on the CUDA backend): each
// thread evaluates src/quant/synthetic_values.h, the very functions the host generator runs, at
// the full matrix's indices of one output element, byte or scale, so the device holds exactly
// the bytes the host would have made and uploaded. Memory-bound and run once at load: plain
// grid-stride loops.
#include "kernels/common.cuh"
#include "src/quant/synthetic_values.h"

namespace llmrt::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

__device__ __forceinline__ int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ __forceinline__ int64_t First() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }

// Index in the full matrix of element i of the part (row-major over the part).
__device__ __forceinline__ uint64_t FullIndex(const SyntheticPartRef& p, int64_t i) {
  const int64_t r = i / p.nc, c = i - r * p.nc;
  return static_cast<uint64_t>((p.r0 + r) * p.cols + p.c0 + c);
}

__global__ void Bf16Kernel(SyntheticPartRef p, uint16_t* codes) {
  const int64_t n = p.nr * p.nc;
  for (int64_t i = First(); i < n; i += Stride()) codes[i] = synthetic::Bf16Element(p.stream, FullIndex(p, i));
}

__global__ void Fp8CodesKernel(SyntheticPartRef p, uint8_t* codes) {
  const int64_t n = p.nr * p.nc;
  for (int64_t i = First(); i < n; i += Stride()) codes[i] = synthetic::Fp8Code(p.stream, FullIndex(p, i));
}

// Scale (i, j) of the part's [snb, sncb] grid is block (sb0 + i, scb0 + j) of the full grid of
// nbc block columns.
__global__ void Fp8ScalesKernel(uint64_t scale_stream, int64_t sb0, int64_t snb, int64_t scb0, int64_t sncb,
                                int64_t nbc, float* scales) {
  const int64_t n = snb * sncb;
  for (int64_t k = First(); k < n; k += Stride()) {
    const int64_t i = k / sncb, j = k - i * sncb;
    scales[k] = synthetic::Fp8Scale(scale_stream, static_cast<uint64_t>((sb0 + i) * nbc + scb0 + j));
  }
}

// Byte k of the part's packed [nr, nc / 2] codes holds elements 2j and 2j + 1 of its row.
__global__ void Int4CodesKernel(SyntheticPartRef p, uint8_t* codes) {
  const int64_t half = p.nc / 2, n = p.nr * half;
  for (int64_t k = First(); k < n; k += Stride()) {
    const int64_t r = k / half, j = k - r * half;
    codes[k] = synthetic::Int4Byte(p.stream, static_cast<uint64_t>((p.r0 + r) * p.cols + p.c0 + 2 * j));
  }
}

// Scale (r, j) of the part's [nr, nc / group] grid is group c0 / group + j of row r0 + r.
__global__ void Int4ScalesKernel(SyntheticPartRef p, uint64_t scale_stream, int64_t group, uint16_t* scales) {
  const int64_t per_row = p.nc / group, full_per_row = p.cols / group, n = p.nr * per_row;
  for (int64_t k = First(); k < n; k += Stride()) {
    const int64_t r = k / per_row, j = k - r * per_row;
    scales[k] = synthetic::Int4Scale(scale_stream, static_cast<uint64_t>((p.r0 + r) * full_per_row + p.c0 / group + j));
  }
}

}  // namespace

cudaError_t LaunchSyntheticBf16(SyntheticPartRef p, uint16_t* codes, cudaStream_t s) {
  const int64_t n = p.nr * p.nc;
  if (n == 0) return cudaSuccess;
  Bf16Kernel<<<GridFor(n), kThreads, 0, s>>>(p, codes);
  return cudaGetLastError();
}

cudaError_t LaunchSyntheticFp8(SyntheticPartRef p, int64_t block_rows, int64_t block_cols, uint8_t* codes,
                               float* scales, cudaStream_t s) {
  const int64_t n = p.nr * p.nc;
  if (n == 0) return cudaSuccess;
  const int64_t br = block_rows, bc = block_cols, nbc = (p.cols + bc - 1) / bc;
  const int64_t sb0 = p.r0 / br, snb = (p.r0 + p.nr + br - 1) / br - sb0;
  const int64_t scb0 = p.c0 / bc, sncb = (p.c0 + p.nc + bc - 1) / bc - scb0;
  Fp8CodesKernel<<<GridFor(n), kThreads, 0, s>>>(p, codes);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  Fp8ScalesKernel<<<GridFor(snb * sncb), kThreads, 0, s>>>(synthetic::ScaleStream(p.stream), sb0, snb, scb0, sncb,
                                                           nbc, scales);
  return cudaGetLastError();
}

cudaError_t LaunchSyntheticInt4(SyntheticPartRef p, int64_t group, uint8_t* codes, uint16_t* scales, cudaStream_t s) {
  const int64_t n = p.nr * (p.nc / 2);
  if (n == 0) return cudaSuccess;
  Int4CodesKernel<<<GridFor(n), kThreads, 0, s>>>(p, codes);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  Int4ScalesKernel<<<GridFor(p.nr * (p.nc / group)), kThreads, 0, s>>>(p, synthetic::ScaleStream(p.stream), group,
                                                                       scales);
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
