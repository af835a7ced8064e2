// cp.async for the device (tests/cuda_emulation/ lands the copies itself): 16-byte copies from
// global to shared memory that bypass L1 and the registers.
#ifndef LLMRT_KERNELS_ASYNC_COPY_CUH_
#define LLMRT_KERNELS_ASYNC_COPY_CUH_

#include <cstdint>

namespace llmrt::cuda {

// cp.async.cg.shared.global of 16 bytes (both addresses 16-byte aligned).
__device__ __forceinline__ void CpAsync16(void* shared_dst, const void* global_src) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(global_src) : "memory");
}

// cp.async.wait_all: this thread's copies have landed (a barrier then publishes them).
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// cp.async.commit_group: this thread's copies since the last commit form a group.
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// cp.async.wait_group N: all but this thread's N most recently committed groups have landed
// (copies not yet committed are not waited for).
template <int kPending>
__device__ __forceinline__ void CpAsyncWaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_ASYNC_COPY_CUH_
