// Element types of tensors in checkpoints, caches and backends, and the base class of whatever
// keeps a tensor's memory alive (an mmap, aligned host memory, device memory).
#ifndef LLMRT_UTIL_DTYPE_H_
#define LLMRT_UTIL_DTYPE_H_

#include <cstddef>
#include <cstdint>

namespace llmrt {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kI32, kI64, kU8, kI8 };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);

// Keeps memory alive; subclasses free it (aligned host memory, an mmap, device memory).
class Storage {
 public:
  virtual ~Storage() = default;
};

}  // namespace llmrt

#endif  // LLMRT_UTIL_DTYPE_H_
