// Token sampling on the device (SampleTokens): the arithmetic of src/backend/sampling.h, with the
// kernel bodies in sampling_kernels.cuh.
//
// Greedy rows: one block per row reduces (logit, index) pairs to the largest logit, the lowest
// index among equals.
//
// Rows that draw, in chunks of up to kSampleRowsPerPass rows:
//  1. SampleFastKernel, one block of 1,024 threads per row: a radix select finds the row's best
//     min(keep, 2,048) candidates (keep: top_k, or the whole vocabulary), a bitonic network sorts
//     them in shared memory by (logit descending, index ascending: the host's order), and the
//     walk (float64 softmax with the sum over every kept candidate, the top_p prefix, the min_p
//     cut, the draw) runs over them. That samples every row with top_k <= 2,048, and any other row
//     whose top_p prefix, min_p cut and draw all fall among its best 2,048 candidates, which is
//     most rows of a trained model. A row that needs more is handed on:
//  2. CUB's segmented radix sort orders the rows handed on (each a segment; the others' segments
//     are empty), descending and stable, so equal keys keep ascending indices;
//  3. SampleSortedKernel walks each of them over its whole sorted vocabulary.
// Block sums and scans add in another order than the host's sequential loops, so a draw that
// falls within a few ulps of a boundary between two tokens' cumulative masses may pick the
// neighbour; otherwise the token is the host's.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/sampling_kernels.cuh"

namespace llmrt::cuda {
namespace {

// Scratch layout for `rows` rows of V: keys in/out (float), values in/out (int32), segment
// begins and ends (int64, rows each), then CUB's temporary storage.
struct SortScratch {
  float* keys_in;
  float* keys_out;
  int32_t* vals_in;
  int32_t* vals_out;
  int64_t* begin;
  int64_t* end;
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

size_t ScratchBytes(int64_t rows, int64_t V) {
  const size_t n = static_cast<size_t>(rows * V);
  return 2 * Align256(n * sizeof(float)) + 2 * Align256(n * sizeof(int32_t)) +
         2 * Align256(static_cast<size_t>(rows) * sizeof(int64_t)) + CubTempBytes(rows, V);
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
  s.begin = reinterpret_cast<int64_t*>(p);
  p += Align256(static_cast<size_t>(rows) * sizeof(int64_t));
  s.end = reinterpret_cast<int64_t*>(p);
  p += Align256(static_cast<size_t>(rows) * sizeof(int64_t));
  s.temp = p;
  s.temp_bytes = CubTempBytes(rows, V);
  return s;
}

}  // namespace

size_t SamplingScratchBytes(int64_t random_rows, int64_t vocab) {
  const int64_t rows = random_rows < kSampleRowsPerPass ? random_rows : kSampleRowsPerPass;
  return rows <= 0 ? 0 : ScratchBytes(rows, vocab);
}

cudaError_t LaunchSampleTokens(const SampleArgs& a, void* scratch, cudaStream_t s) {
  const int64_t R = a.logits.rows, V = a.logits.cols;
  if (R == 0) return cudaSuccess;
  smp::ArgmaxKernel<<<static_cast<unsigned>(R), smp::kArgmaxThreads, 0, s>>>(a.logits, a.params, a.ids);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || a.num_random == 0) return e;
  for (int64_t first = 0; first < a.num_random; first += kSampleRowsPerPass) {
    const int64_t n = a.num_random - first < kSampleRowsPerPass ? a.num_random - first : kSampleRowsPerPass;
    const SortScratch sc = Carve(scratch, n, V);
    const unsigned blocks = static_cast<unsigned>(n);
    smp::SampleFastKernel<<<blocks, smp::kFastThreads, 0, s>>>(a.logits, a.params, a.random_rows, first, sc.keys_in,
                                                               sc.vals_in, sc.begin, sc.end, a.ids);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    size_t temp_bytes = sc.temp_bytes;
    e = cub::DeviceSegmentedRadixSort::SortPairsDescending(sc.temp, temp_bytes, sc.keys_in, sc.keys_out, sc.vals_in,
                                                            sc.vals_out, n * V, n, sc.begin, sc.end, 0,
                                                            static_cast<int>(sizeof(float) * 8), s);
    if (e != cudaSuccess) return e;
    smp::SampleSortedKernel<<<blocks, smp::kSortedThreads, 0, s>>>(sc.keys_out, sc.vals_out, V, a.params,
                                                                   a.random_rows, first, sc.begin, sc.end, a.ids);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace llmrt::cuda
