// std::vector storage on 64-byte boundaries, for the CPU kernels' scratch panels and
// accumulators.
#ifndef LLMRT_BACKEND_CPU_CACHE_LINE_VECTOR_H_
#define LLMRT_BACKEND_CPU_CACHE_LINE_VECTOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace llmrt::cpu {

// Storage on 64-byte boundaries: rows whose stride is a multiple of 64 bytes then never split a
// vector load or a tile row across two cache lines (each such access costs two).
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const { return false; }
};
template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_CACHE_LINE_VECTOR_H_
