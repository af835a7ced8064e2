// The workspace of a forward pass: one backend allocation made when the runtime is created,
// carved into the activation and scratch buffers of each pass (gemma.cpp's Activations, as a
// bump allocator). A pass allocates nothing, and every buffer has the same address in every pass
// of the same shape, as a captured device graph needs.
//
// Each block takes its buffers in one function used twice: on a measuring workspace at load (to
// size the real one for the largest pass) and on the real workspace in every pass, so the size
// and the use cannot disagree.
#ifndef LLMRT_MODEL_WORKSPACE_H_
#define LLMRT_MODEL_WORKSPACE_H_

#include <cstdint>
#include <initializer_list>
#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"

namespace llmrt {

class Workspace {
 public:
  // Buffers start on multiples of this many bytes (a device's widest vector load).
  static constexpr uint64_t kAlign = 256;

  // A workspace of `bytes` in backend memory, for activations of the backend's activation dtype.
  static absl::StatusOr<std::unique_ptr<Workspace>> Create(Backend& backend, uint64_t bytes);
  // A workspace that only counts: Take returns tensors that must not be used. For sizing.
  static Workspace Measuring(DType activation_dtype);

  // A [shape] buffer of `dtype`, valid until Reset to a mark taken before it. Contents are
  // whatever the previous user left.
  Tensor Take(DType dtype, std::initializer_list<int64_t> shape);
  // An activation buffer: Take with the backend's activation dtype (float32 on the CPU).
  Tensor Activation(std::initializer_list<int64_t> shape) { return Take(activation_dtype_, shape); }
  uint64_t mark() const { return used_; }
  void Reset(uint64_t mark = 0) { used_ = mark; }
  uint64_t capacity() const { return capacity_; }
  // The most bytes in use at once since creation.
  uint64_t high_water() const { return high_water_; }

 private:
  Workspace() = default;
  std::shared_ptr<Storage> storage_;
  uint8_t* base_ = nullptr;
  uint64_t capacity_ = 0;  // 0 with base_ null: measuring
  bool measuring_ = false;
  DType activation_dtype_ = DType::kF32;
  uint64_t used_ = 0;
  uint64_t high_water_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_MODEL_WORKSPACE_H_
