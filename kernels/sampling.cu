// Token sampling on the device (SampleTokens): the arithmetic of src/backend/sampling.h.
//
// Greedy rows: one block per row reduces (logit, index) pairs to the largest logit, the lowest
// index among equals; a NaN never wins, and a NaN at index 0 is the answer (the host's scan
// starts there and nothing compares greater than it).
//
// Rows that draw, in chunks of up to kSampleRowsPerPass: a prologue copies each row's logits as
// sort keys (NaN as -infinity, -0 as +0, so that ties are the host comparator's ties) with the
// indices as values, CUB's segmented radix sort orders every row by key, descending (stable: equal
// keys keep ascending indices, the host's tie order), and one block per row walks the sorted
// candidates: softmax in float64 over the first top_k, the top_p prefix, the min_p cut and the
// draw. Block sums and scans add in another order than the host's sequential loops, so a draw
// that falls within a few ulps of a boundary between two tokens' cumulative masses may pick the
// neighbour; otherwise the token is the host's.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/common.cuh"

namespace llmrt::cuda {
namespace {

// (A block may hold 64K registers: SampleSortedKernel takes about 108 per thread, so 1024 threads
// would not launch; every kernel here declares its block size in __launch_bounds__.)
constexpr int kSampleThreads = 256;
constexpr int kSampleItems = 4;  // consecutive candidates per thread per tile
constexpr int64_t kSampleTile = static_cast<int64_t>(kSampleThreads) * kSampleItems;

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double draw;
};

__device__ RowParams ReadParams(const int32_t* params, int64_t r) {
  const int32_t* w = params + r * kSamplingParamWords;
  RowParams p;
  p.temperature = __int_as_float(w[0]);
  p.top_k = w[1];
  p.top_p = __int_as_float(w[2]);
  p.min_p = __int_as_float(w[3]);
  const uint64_t lo = static_cast<uint32_t>(w[4]), hi = static_cast<uint32_t>(w[5]);
  p.draw = __longlong_as_double(static_cast<long long>(lo | (hi << 32)));
  return p;
}

__device__ bool Draws(const RowParams& p, int64_t vocab) { return p.temperature > 0.0f && vocab > 1; }

struct Best {
  float v;
  int64_t i;
};
struct BestOp {
  __device__ Best operator()(const Best& a, const Best& b) const {
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
  }
};

__global__ void __launch_bounds__(kSampleThreads) ArgmaxKernel(ConstMat logits, const int32_t* params, int32_t* ids) {
  const int64_t r = blockIdx.x;
  if (Draws(ReadParams(params, r), logits.cols)) return;
  const float* row = logits.data + r * logits.ld;
  using Reduce = cub::BlockReduce<Best, kSampleThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  Best b{-INFINITY, logits.cols};
  for (int64_t i = threadIdx.x; i < logits.cols; i += blockDim.x) {
    const float v = row[i];
    const Best c{isnan(v) ? -INFINITY : v, i};
    b = BestOp()(b, c);
  }
  const Best best = Reduce(tmp).Reduce(b, BestOp());
  if (threadIdx.x == 0) ids[r] = isnan(row[0]) ? 0 : static_cast<int32_t>(best.i < logits.cols ? best.i : 0);
}

// Sort input of chunk rows [0, n): keys and indices, and the segment offsets.
__global__ void SortInputKernel(ConstMat logits, const int32_t* random_rows, int64_t first, int64_t n, float* keys,
                                int32_t* vals, int64_t* offsets) {
  const int64_t V = logits.cols;
  const int64_t j = blockIdx.y;
  const float* row = logits.data + static_cast<int64_t>(random_rows[first + j]) * logits.ld;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < V;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = row[i];
    keys[j * V + i] = isnan(v) ? -INFINITY : (v == 0.0f ? 0.0f : v);
    vals[j * V + i] = static_cast<int32_t>(i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    offsets[j] = j * V;
    if (j == n - 1) offsets[n] = n * V;
  }
}

// Inclusive prefix sums of f(i) over i in [0, n), tile by tile; calls visit(i, prefix, value)
// for every i. Every thread of the block must call it.
template <typename F, typename Visit>
__device__ void ScanCandidates(int64_t n, F f, Visit visit) {
  using Scan = cub::BlockScan<double, kSampleThreads>;
  __shared__ typename Scan::TempStorage tmp;
  double carry = 0.0;
  for (int64_t base = 0; base < n; base += kSampleTile) {
    double v[kSampleItems];
    double local = 0.0;
    const int64_t at = base + static_cast<int64_t>(threadIdx.x) * kSampleItems;
    for (int k = 0; k < kSampleItems; ++k) {
      v[k] = at + k < n ? f(at + k) : 0.0;
      local += v[k];
    }
    double before = 0.0, total = 0.0;
    Scan(tmp).ExclusiveSum(local, before, total);
    double acc = carry + before;
    for (int k = 0; k < kSampleItems; ++k) {
      if (at + k >= n) break;
      acc += v[k];
      visit(at + k, acc, v[k]);
    }
    carry += total;
    __syncthreads();  // tmp is reused by the next tile
  }
}

__global__ void __launch_bounds__(kSampleThreads) SampleSortedKernel(const float* keys, const int32_t* vals, int64_t V, const int32_t* params,
                                   const int32_t* random_rows, int64_t first, int32_t* ids) {
  const int64_t j = blockIdx.x;
  const int64_t r = random_rows[first + j];
  const RowParams p = ReadParams(params, r);
  const float* key = keys + j * V;
  const int32_t* id = vals + j * V;
  const int64_t keep = p.top_k > 0 && p.top_k < V ? p.top_k : V;
  const double mx = key[0], temp = p.temperature;
  __shared__ double shared[32];
  __shared__ double sum_s;
  __shared__ unsigned long long cut_s, pick_s;
  auto e = [&](int64_t i) { return exp((static_cast<double>(key[i]) - mx) / temp); };
  double local = 0.0;
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) local += e(i);
  const double sum = BlockSum(local, shared);
  if (threadIdx.x == 0) {
    sum_s = sum;
    cut_s = static_cast<unsigned long long>(keep);
    pick_s = ~0ull;
  }
  __syncthreads();
  if (!(sum == sum)) {
    // Every probability is NaN (an infinite largest logit, or none finite): the host's loops
    // then cut nothing by top_p, min_p keeps one token, and the draw falls through to the last.
    if (threadIdx.x == 0) ids[r] = id[p.min_p > 0.0f ? 0 : keep - 1];
    return;
  }
  auto prob = [&](int64_t i) { return e(i) / sum_s; };
  if (p.top_p < 1.0f) {
    const double top_p = p.top_p;
    ScanCandidates(keep, prob, [&](int64_t i, double acc, double) {
      if (acc >= top_p) atomicMin(&cut_s, static_cast<unsigned long long>(i + 1));
    });
    __syncthreads();
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * prob(0);
    const int64_t cut = static_cast<int64_t>(cut_s);
    // Probabilities do not increase along the sorted candidates: the cut is the first below.
    for (int64_t i = 1 + threadIdx.x; i < cut; i += blockDim.x) {
      if (!(prob(i) >= floor)) atomicMin(&cut_s, static_cast<unsigned long long>(i));
    }
    __syncthreads();
  }
  const int64_t cut = static_cast<int64_t>(cut_s);
  double part = 0.0;
  for (int64_t i = threadIdx.x; i < cut; i += blockDim.x) part += prob(i);
  const double total = BlockSum(part, shared);
  const double target = p.draw * total;
  ScanCandidates(cut, prob, [&](int64_t i, double acc, double) {
    if (acc > target) atomicMin(&pick_s, static_cast<unsigned long long>(i));
  });
  __syncthreads();
  if (threadIdx.x == 0) ids[r] = id[pick_s < static_cast<unsigned long long>(cut) ? pick_s : cut - 1];
}

// Scratch layout for `rows` rows of V: keys in/out (float), values in/out (int32), offsets
// (int64, rows + 1), then CUB's temporary storage.
struct SortScratch {
  float* keys_in;
  float* keys_out;
  int32_t* vals_in;
  int32_t* vals_out;
  int64_t* offsets;
  void* temp;
  size_t temp_bytes;
};

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

size_t CubTempBytes(int64_t rows, int64_t V) {
  size_t bytes = 0;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const float*>(nullptr),
                                                      static_cast<float*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                      static_cast<int32_t*>(nullptr), rows * V, rows,
                                                      static_cast<const int64_t*>(nullptr),
                                                      static_cast<const int64_t*>(nullptr));
  return bytes;
}

SortScratch Carve(void* base, int64_t rows, int64_t V) {
  const size_t n = static_cast<size_t>(rows * V);
  char* p = static_cast<char*>(base);
  SortScratch s{};
  s.keys_in = reinterpret_cast<float*>(p);
  p += Align256(n * sizeof(float));
  s.keys_out = reinterpret_cast<float*>(p);
  p += Align256(n * sizeof(float));
  s.vals_in = reinterpret_cast<int32_t*>(p);
  p += Align256(n * sizeof(int32_t));
  s.vals_out = reinterpret_cast<int32_t*>(p);
  p += Align256(n * sizeof(int32_t));
  s.offsets = reinterpret_cast<int64_t*>(p);
  p += Align256(static_cast<size_t>(rows + 1) * sizeof(int64_t));
  s.temp = p;
  s.temp_bytes = CubTempBytes(rows, V);
  return s;
}

}  // namespace

size_t SamplingScratchBytes(int64_t random_rows, int64_t vocab) {
  const int64_t rows = random_rows < kSampleRowsPerPass ? random_rows : kSampleRowsPerPass;
  if (rows <= 0) return 0;
  const size_t n = static_cast<size_t>(rows * vocab);
  return 2 * Align256(n * sizeof(float)) + 2 * Align256(n * sizeof(int32_t)) +
         Align256(static_cast<size_t>(rows + 1) * sizeof(int64_t)) + CubTempBytes(rows, vocab);
}

cudaError_t LaunchSampleTokens(const SampleArgs& a, void* scratch, cudaStream_t s) {
  const int64_t R = a.logits.rows, V = a.logits.cols;
  if (R == 0) return cudaSuccess;
  ArgmaxKernel<<<static_cast<unsigned>(R), kSampleThreads, 0, s>>>(a.logits, a.params, a.ids);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || a.num_random == 0) return e;
  for (int64_t first = 0; first < a.num_random; first += kSampleRowsPerPass) {
    const int64_t n = a.num_random - first < kSampleRowsPerPass ? a.num_random - first : kSampleRowsPerPass;
    const SortScratch sc = Carve(scratch, n, V);
    const dim3 grid(BlocksFor(V, 256) < 64 ? BlocksFor(V, 256) : 64, static_cast<unsigned>(n));
    SortInputKernel<<<grid, 256, 0, s>>>(a.logits, a.random_rows, first, n, sc.keys_in, sc.vals_in, sc.offsets);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    size_t temp_bytes = sc.temp_bytes;
    e = cub::DeviceSegmentedRadixSort::SortPairsDescending(sc.temp, temp_bytes, sc.keys_in, sc.keys_out, sc.vals_in,
                                                            sc.vals_out, n * V, n, sc.offsets, sc.offsets + 1, 0,
                                                            static_cast<int>(sizeof(float) * 8), s);
    if (e != cudaSuccess) return e;
    SampleSortedKernel<<<static_cast<unsigned>(n), kSampleThreads, 0, s>>>(sc.keys_out, sc.vals_out, V, a.params,
                                                                          a.random_rows, first, a.ids);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace llmrt::cuda
