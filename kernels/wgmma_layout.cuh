// The shared-memory layout the warpgroup MMAs read (the 128-byte swizzle) and their matrix
// descriptors, for the kernel bodies that compile both for the device and in
// tests/cuda_emulation/ (whose wgmma emulation decodes the same descriptors).
#ifndef LLMRT_KERNELS_WGMMA_LAYOUT_CUH_
#define LLMRT_KERNELS_WGMMA_LAYOUT_CUH_

#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::wg {

// The byte offset of 16-byte piece `piece` (columns 8 piece .. 8 piece + 7) of row `row` in a
// [rows][64] bfloat16 block stored with the 128-byte swizzle (the block 1024-byte aligned): the
// piece's index XOR the row's index within its group of 8.
__device__ __forceinline__ uint32_t PieceOffset(int row, int piece) {
  return static_cast<uint32_t>(row * 128 + (((piece ^ row) & 7) << 4));
}

// A shared-memory matrix descriptor with the 128-byte swizzle: start address, leading and
// stride byte offsets, each in 16-byte units (bits 13:0, 29:16, 45:32), base offset 0 (every
// swizzle pattern starts 1024-byte aligned), swizzle mode 1 (128 bytes) in bits 63:62.
__device__ __forceinline__ uint64_t Descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>((lbo & 0x3ffffu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3ffffu) >> 4) << 32) | (uint64_t{1} << 62);
}

}  // namespace llmrt::cuda::wg

#endif  // LLMRT_KERNELS_WGMMA_LAYOUT_CUH_
