// Memory-bandwidth baselines that llm-bench's decode table is read against, measured in the same
// run on the same number of threads.
#ifndef LLMRT_SAMPLES_BENCH_BASELINES_H_
#define LLMRT_SAMPLES_BENCH_BASELINES_H_

namespace llm_bench {

// Multi-threaded memcpy of a 1 GiB buffer, far past the LLC; GB/s counting bytes read plus bytes
// written (the STREAM "copy" convention); *read_only_gbs gets bytes read alone. Best of 4.
double MemcpyBandwidth(int threads, double* read_only_gbs);

// The decode matmul kernel itself streaming one contiguous 1 GiB BF16 matrix (rows of 4096),
// split over threads: the ceiling the engine's batch-1 decode can approach.
double KernelStreamBandwidth(int threads);

}  // namespace llm_bench

#endif  // LLMRT_SAMPLES_BENCH_BASELINES_H_
