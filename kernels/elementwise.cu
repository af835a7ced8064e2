// Elementwise ops, norms, embedding and rope. Each mirrors the CPU backend's scalar code
// (src/backend/cpu/cpu_backend.cc) operation for operation: norms sum squares in double like the
// CPU does, rope takes the float32 angle position * inv_freq and float32 cos/sin.
#include <cmath>

#include "kernels/common.cuh"

namespace llmrt::cuda {

const char* ErrorCodeName(int32_t code) {
  switch (code) {
    case kErrNone: return "none";
    case kErrTokenId: return "a token id outside the embedding table";
    case kErrRowIndex: return "a row index outside the source tensor";
    case kErrSlot: return "a KV slot outside the cache";
    case kErrPage: return "a page id outside the KV cache";
    case kErrSelected: return "a selected position outside the token's context";
    case kErrExpert: return "an expert id outside the expert bank";
    case kErrKernel: return "a kernel launched where its instructions or shared memory alignment are missing";
  }
  return "an unknown device error";
}

namespace {

constexpr int kThreads = 256;

__global__ void FillKernel(float* p, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = value;
  }
}

__global__ void EmbeddingKernel(WeightRef table, const int32_t* ids, MutMat out, int32_t* err) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  if (id < 0 || id >= table.rows) {
    RaiseError(err, kErrTokenId);
    return;
  }
  for (int64_t i = threadIdx.x; i < table.cols; i += blockDim.x) {
    out.data[t * out.ld + i] = LoadElem(table.data, table.type, id * table.cols + i);
  }
}

__global__ void EmbeddingShardKernel(WeightRef table, int64_t first_id, const int32_t* ids, MutMat out) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) - first_id;
  const bool held = row >= 0 && row < table.rows;
  for (int64_t i = threadIdx.x; i < table.cols; i += blockDim.x) {
    out.data[t * out.ld + i] = held ? LoadElem(table.data, table.type, row * table.cols + i) : 0.0f;
  }
}

// One block per (row, group).
__global__ void RmsNormKernel(ConstMat x, int64_t group, WeightRef w, float eps, MutMat out) {
  __shared__ double red[32];
  const int64_t groups = x.cols / group;
  const int64_t t = blockIdx.x / groups, g0 = (blockIdx.x % groups) * group;
  const float* xi = x.data + t * x.ld + g0;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += static_cast<double>(xi[i]) * xi[i];
  ss = BlockSum(ss, red);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / group) + eps);
  float* o = out.data + t * out.ld + g0;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) o[i] = LoadElem(w.data, w.type, i) * (xi[i] * inv);
}

__global__ void LayerNormKernel(ConstMat x, WeightRef w, WeightRef b, float eps, MutMat out) {
  __shared__ double red[32];
  const int64_t t = blockIdx.x, D = x.cols;
  const float* xi = x.data + t * x.ld;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) sum += xi[i];
  sum = BlockSum(sum, red);
  const double mean = sum / D;
  double var = 0;
  // (The _rn intrinsics keep nvcc from fusing a multiply and an add into one rounding: the CPU
  // rounds each, as here.)
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) var = __dadd_rn(var, __dmul_rn(xi[i] - mean, xi[i] - mean));
  var = BlockSum(var, red);
  const float inv = 1.0f / sqrtf(static_cast<float>(var / D) + eps);
  const float m = static_cast<float>(mean);
  float* o = out.data + t * out.ld;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    o[i] = __fadd_rn(__fmul_rn(__fmul_rn(xi[i] - m, inv), LoadElem(w.data, w.type, i)), LoadElem(b.data, b.type, i));
  }
}

enum class Binary { kAdd, kSiluMul };

template <Binary op>
__global__ void BinaryKernel(ConstMat a, ConstMat b, MutMat out) {
  const int64_t n = a.rows * a.cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / a.cols, i = e % a.cols;
    const float x = a.data[t * a.ld + i], y = b.data[t * b.ld + i];
    float r;
    if constexpr (op == Binary::kAdd) {
      r = x + y;
    } else {
      r = x / (1.0f + expf(-x)) * y;
    }
    out.data[t * out.ld + i] = r;
  }
}

__global__ void AddBiasKernel(MutMat x, WeightRef bias) {
  const int64_t n = x.rows * x.cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / x.cols, i = e % x.cols;
    x.data[t * x.ld + i] += LoadElem(bias.data, bias.type, i);
  }
}

__global__ void GatherRowsKernel(ConstMat x, const int32_t* rows, MutMat out, int32_t* err) {
  const int64_t s = blockIdx.x;
  const int32_t r = rows[s];
  if (r < 0 || r >= x.rows) {
    RaiseError(err, kErrRowIndex);
    return;
  }
  for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) out.data[s * out.ld + i] = x.data[r * x.ld + i];
}

// One thread per (token, head, pair).
__global__ void RopeKernel(MutMat x, int64_t heads, int64_t head_dim, int64_t offset, const float* inv_freq,
                           int64_t half, float af, bool interleaved, const int32_t* positions) {
  const int64_t n = x.rows * heads * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % half, h = (e / half) % heads, t = e / (half * heads);
    const float angle = static_cast<float>(positions[t]) * inv_freq[i];
    const float c = cosf(angle) * af, s = sinf(angle) * af;
    float* v = x.data + t * x.ld + h * head_dim + offset;
    float* a = interleaved ? v + 2 * i : v + i;
    float* b = interleaved ? v + 2 * i + 1 : v + i + half;
    const float x1 = *a, x2 = *b;
    *a = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));  // unfused, as the CPU rounds them
    *b = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

// The BF16 activation policy's rounding (round to nearest even, ToBf16Bits): bf16 codes into a
// contiguous [rows, cols] buffer, the operand of the cuBLASLt GEMM.
__global__ void RoundToBf16Kernel(ConstMat x, uint16_t* out) {
  const int64_t n = x.rows * x.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / x.cols, c = i % x.cols;
    out[i] = ToBf16Bits(x.data[r * x.ld + c]);
  }
}

// The same rounding kept as float32 values (exactly representable in bfloat16), for the kernels
// that read float32 activations. `out` may be `x` itself.
__global__ void RoundToBf16ValuesKernel(ConstMat x, MutMat out) {
  const int64_t n = x.rows * x.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / x.cols, c = i % x.cols;
    out.data[r * out.ld + c] = Bf16Bits(ToBf16Bits(x.data[r * x.ld + c]));
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

}  // namespace

cudaError_t LaunchFill(float* p, int64_t n, float value, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<GridFor(n), kThreads, 0, s>>>(p, n, value);
  return cudaGetLastError();
}

cudaError_t LaunchEmbedding(WeightRef table, const int32_t* ids, int64_t T, MutMat out, int32_t* err, cudaStream_t s) {
  if (T == 0) return cudaSuccess;
  EmbeddingKernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(table, ids, out, err);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingShard(WeightRef table, int64_t first_id, const int32_t* ids, int64_t T, MutMat out,
                                 cudaStream_t s) {
  if (T == 0) return cudaSuccess;
  EmbeddingShardKernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(table, first_id, ids, out);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNorm(ConstMat x, int64_t group, WeightRef w, float eps, MutMat out, cudaStream_t s) {
  const int64_t blocks = x.rows * (x.cols / group);
  if (blocks == 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, group, w, eps, out);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNorm(ConstMat x, WeightRef w, WeightRef b, float eps, MutMat out, cudaStream_t s) {
  if (x.rows == 0) return cudaSuccess;
  LayerNormKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, s>>>(x, w, b, eps, out);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(ConstMat a, ConstMat b, MutMat out, cudaStream_t s) {
  const int64_t n = a.rows * a.cols;
  if (n == 0) return cudaSuccess;
  BinaryKernel<Binary::kAdd><<<GridFor(n), kThreads, 0, s>>>(a, b, out);
  return cudaGetLastError();
}

cudaError_t LaunchSiluMul(ConstMat gate, ConstMat up, MutMat out, cudaStream_t s) {
  const int64_t n = gate.rows * gate.cols;
  if (n == 0) return cudaSuccess;
  BinaryKernel<Binary::kSiluMul><<<GridFor(n), kThreads, 0, s>>>(gate, up, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(MutMat x, WeightRef bias, cudaStream_t s) {
  const int64_t n = x.rows * x.cols;
  if (n == 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(n), kThreads, 0, s>>>(x, bias);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(ConstMat x, const int32_t* rows, int64_t n, MutMat out, int32_t* err, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  GatherRowsKernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(x, rows, out, err);
  return cudaGetLastError();
}

cudaError_t LaunchRoundToBf16(ConstMat x, uint16_t* out, cudaStream_t s) {
  const int64_t n = x.rows * x.cols;
  if (n == 0) return cudaSuccess;
  RoundToBf16Kernel<<<GridFor(n), kThreads, 0, s>>>(x, out);
  return cudaGetLastError();
}

cudaError_t LaunchRoundToBf16Values(ConstMat x, MutMat out, cudaStream_t s) {
  const int64_t n = x.rows * x.cols;
  if (n == 0) return cudaSuccess;
  RoundToBf16ValuesKernel<<<GridFor(n), kThreads, 0, s>>>(x, out);
  return cudaGetLastError();
}

cudaError_t LaunchRope(MutMat x, int64_t heads, int64_t head_dim, int64_t offset, const float* inv_freq, int64_t half,
                       float attention_factor, bool interleaved, const int32_t* positions, cudaStream_t s) {
  const int64_t n = x.rows * heads * half;
  if (n == 0) return cudaSuccess;
  RopeKernel<<<GridFor(n), kThreads, 0, s>>>(x, heads, head_dim, offset, inv_freq, half, attention_factor, interleaved,
                                             positions);
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
