// Memory-bandwidth baselines that llm-bench's decode table is read against, measured in the same
// run on the same number of threads. Self-contained: no engine code.
#ifndef LLMRT_SAMPLES_BENCH_BASELINES_H_
#define LLMRT_SAMPLES_BENCH_BASELINES_H_

namespace llm_bench {

// Every buffer below is page-aligned anonymous memory; with huge_pages, 2 MiB-aligned and advised
// for transparent huge pages (MADV_HUGEPAGE), as the engine's weights under
// LLM_WEIGHT_MEMORY_HUGE_PAGES.

// Multi-threaded memcpy of a 1 GiB buffer, far past the LLC; GB/s counting bytes read plus bytes
// written (the STREAM "copy" convention); *read_only_gbs gets bytes read alone. Best of 4.
double MemcpyBandwidth(int threads, bool huge_pages, double* read_only_gbs);

// Read-only streaming bandwidth: `threads` threads each sum their share of one 1 GiB buffer of
// 64-bit words as four streams at once, the quarters of the share (compiler-vectorized,
// AVX-512 / AVX2 / SSE2 picked at load), best of 4, in GB/s
// of bytes read. Decode at batch 1 only reads its weights, so this is its ceiling on this
// machine; memcpy's read half is not (its writes compete for the same bandwidth). 0 if the
// sum comes out wrong.
double ReadStreamBandwidth(int threads, bool huge_pages);

// GB/s of BF16 weights a plain dot-product loop streams: one contiguous 1 GiB BF16 matrix (rows
// of 4096) times a float vector, rows split over `threads`, best of 4. The loop is written in
// llm-bench (four rows at a time, bf16 widened to f32 by a shift, independent accumulators,
// compiler-vectorized for the CPU's widest of AVX-512 / AVX2 / SSE2); it is not the engine's
// kernel, which llm-bench cannot reach through the public header. It stands for
// what reading a matrix from memory in the engine's decode layout costs when the arithmetic
// keeps up: the ceiling batch-1 decode can approach. Where the loop is compute-bound (no AVX2)
// the engine's kernels can exceed it.
double Bf16DotStreamBandwidth(int threads, bool huge_pages);

}  // namespace llm_bench

#endif  // LLMRT_SAMPLES_BENCH_BASELINES_H_
