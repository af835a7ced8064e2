// Host stand-in for <cuda_runtime.h> in the kernel emulation tests: the CUDA keywords as nothing,
// and the built-ins the emulated kernels use, for blocks whose threads are host threads
// (cuda_emulation.h runs them).
#ifndef LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_
#define LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_

#include "tests/cuda_emulation/cuda_emulation.h"

#endif  // LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_
