#include "src/model/workspace.h"

#include "absl/strings/str_cat.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<Workspace>> Workspace::Create(Backend& backend, uint64_t bytes) {
  std::unique_ptr<Workspace> ws(new Workspace());
  const int64_t n = static_cast<int64_t>((bytes + kAlign - 1) / kAlign * kAlign);
  absl::StatusOr<Tensor> t = backend.Allocate(DType::kU8, {n > 0 ? n : static_cast<int64_t>(kAlign)});
  if (!t.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the forward-pass workspace (", bytes, " bytes) does not fit: ", t.status().message()));
  }
  ws->storage_ = t->storage();
  ws->base_ = t->data_as<uint8_t>();
  ws->capacity_ = static_cast<uint64_t>(t->numel());
  ws->activation_dtype_ = backend.activation_dtype();
  return ws;
}

Workspace Workspace::Measuring(DType activation_dtype) {
  Workspace ws;
  ws.measuring_ = true;
  ws.activation_dtype_ = activation_dtype;
  return ws;
}

Tensor Workspace::Take(DType dtype, std::initializer_list<int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    LLMRT_CHECK(d >= 0);
    n *= static_cast<uint64_t>(d);
  }
  const uint64_t bytes = (n * DTypeSize(dtype) + kAlign - 1) / kAlign * kAlign;
  const uint64_t at = used_;
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  // A measuring workspace hands out placeholders (a distinct non-null address per buffer).
  uint8_t* data = measuring_ ? reinterpret_cast<uint8_t*>(kAlign) + at : base_ + at;
  LLMRT_CHECK(measuring_ || used_ <= capacity_);
  return Tensor(storage_, data, dtype, shape);
}

}  // namespace llmrt
