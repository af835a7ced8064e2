// The Hopper warpgroup instructions (sm_90a) the wgmma kernels use (MLA decode attention, the
// routed experts' grouped GEMM), for the device;
// tests/cuda_emulation/ computes them from the PTX ISA's descriptor and fragment rules instead.
// Everything here is compiled only where the arch-specific features exist
// (__CUDA_ARCH_FEAT_SM90_ALL: the sm_90a machine code); elsewhere (the compute_90 PTX that later
// chips compile) the functions are empty and the launcher never picks the kernel.
#ifndef LLMRT_KERNELS_WGMMA_CUH_
#define LLMRT_KERNELS_WGMMA_CUH_

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMRT_WGMMA 1
#endif

namespace llmrt::cuda::wg {

// Eight float accumulators d[b] .. d[b + 7] as read-write asm operands.
#define LLMRT_WG_F8(d, b)                                                                                  \
  "+f"(d[b + 0]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), \
      "+f"(d[b + 7])

// Keeps the compiler from moving this thread's accesses to r across the asynchronous window of
// the warpgroup MMAs that read or write it (no instruction).
template <int kN>
__device__ __forceinline__ void FenceOperands(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// An instruction without operands (a compiler barrier to memory too); nothing without sm_90a.
#ifdef LLMRT_WGMMA
#define LLMRT_WG_INSTRUCTION(text) asm volatile(text ::: "memory")
#else
#define LLMRT_WG_INSTRUCTION(text)
#endif

// wgmma.fence: this thread's earlier register writes are ordered before the next warpgroup MMAs.
__device__ __forceinline__ void WgFence() { LLMRT_WG_INSTRUCTION("wgmma.fence.sync.aligned;\n"); }

// wgmma.commit_group and wgmma.wait_group N: the MMAs issued since the last commit form a group;
// wait until every group of this warpgroup but the newest kPending is complete (their results
// are in the registers, and their shared memory operands may be rewritten).
__device__ __forceinline__ void WgCommit() { LLMRT_WG_INSTRUCTION("wgmma.commit_group.sync.aligned;\n"); }
template <int kPending>
__device__ __forceinline__ void WgWait() {
#ifdef LLMRT_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
__device__ __forceinline__ void WgWaitAll() { WgWait<0>(); }

// fence.proxy.async.shared::cta: this thread's ordinary writes to shared memory become visible
// to the asynchronous proxy, which the warpgroup MMAs read their shared operands through (a
// barrier then orders them for the other threads).
__device__ __forceinline__ void FenceProxyAsync() { LLMRT_WG_INSTRUCTION("fence.proxy.async.shared::cta;\n"); }

#undef LLMRT_WG_INSTRUCTION

// d (+)= A B for the warpgroup, wgmma.mma_async.m64n32k16.f32.bf16.bf16: A [64 x 16] and B
// [16 x 32] both K-major in shared memory (descriptors), accumulate 0: d = A B.
__device__ __forceinline__ void MmaM64N32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate) {
#ifdef LLMRT_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : LLMRT_WG_F8(d, 0),
        LLMRT_WG_F8(d, 8)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#endif
}

// d (+)= A B for the warpgroup, wgmma.mma_async.m64n128k16.f32.bf16.bf16: A [64 x 16] and B
// [16 x 128] both K-major in shared memory (B as 128 rows of 16: a weight's rows), accumulate 0:
// d = A B.
__device__ __forceinline__ void MmaM64N128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
#ifdef LLMRT_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : LLMRT_WG_F8(d, 0),
        LLMRT_WG_F8(d, 8),
        LLMRT_WG_F8(d, 16),
        LLMRT_WG_F8(d, 24),
        LLMRT_WG_F8(d, 32),
        LLMRT_WG_F8(d, 40),
        LLMRT_WG_F8(d, 48),
        LLMRT_WG_F8(d, 56)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#endif
}

// d (+)= A B for the warpgroup, wgmma.mma_async.m64n256k16.f32.bf16.bf16: A [64 x 16] K-major and
// B [16 x 256] N-major (transposed: the 256 columns contiguous) in shared memory.
__device__ __forceinline__ void MmaM64N256(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
#ifdef LLMRT_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : LLMRT_WG_F8(d, 0),
        LLMRT_WG_F8(d, 8),
        LLMRT_WG_F8(d, 16),
        LLMRT_WG_F8(d, 24),
        LLMRT_WG_F8(d, 32),
        LLMRT_WG_F8(d, 40),
        LLMRT_WG_F8(d, 48),
        LLMRT_WG_F8(d, 56),
        LLMRT_WG_F8(d, 64),
        LLMRT_WG_F8(d, 72),
        LLMRT_WG_F8(d, 80),
        LLMRT_WG_F8(d, 88),
        LLMRT_WG_F8(d, 96),
        LLMRT_WG_F8(d, 104),
        LLMRT_WG_F8(d, 112),
        LLMRT_WG_F8(d, 120)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#endif
}

#undef LLMRT_WG_F8

// Whether the instructions above exist in this compilation (the sm_90a machine code); a kernel
// body that finds them missing reports it rather than computing nothing.
#ifdef LLMRT_WGMMA
inline constexpr bool kHaveWgmma = true;
#else
inline constexpr bool kHaveWgmma = false;
#endif

// The block's dynamic shared memory, declared 1024-byte aligned (the swizzle's pattern), and a
// pointer's address in the block's shared window (what descriptors hold).
__device__ __forceinline__ uint8_t* WgShared() {
  extern __shared__ __align__(1024) uint8_t llmrt_wg_shared[];
  return llmrt_wg_shared;
}
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace llmrt::cuda::wg

#endif  // LLMRT_KERNELS_WGMMA_CUH_
