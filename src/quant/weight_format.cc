#include "src/quant/weight_format.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "src/quant/formats/builtin.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// Lookups by id take no lock (kernels look formats up on hot paths): a registered format's
// traits are never moved or changed, and `present` publishes them.
struct Registry {
  std::mutex mu;  // registration and the order list
  std::array<WeightFormatTraits, kMaxWeightFormats> by_id{};
  std::array<std::atomic<bool>, kMaxWeightFormats> present{};
  std::vector<WeightFormatId> order;
};

absl::Status Add(Registry& r, const WeightFormatTraits& t) {
  if (t.id >= kMaxWeightFormats) return absl::InvalidArgumentError(absl::StrCat("weight format id ", t.id, " is out of range"));
  if (r.present[t.id]) return absl::InvalidArgumentError(absl::StrCat("weight format id ", t.id, " is taken"));
  if (t.resident_bytes == nullptr || t.dequantize_row == nullptr || t.load == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("weight format \"", t.name, "\" lacks resident_bytes, dequantize_row or load"));
  }
  r.by_id[t.id] = t;
  r.present[t.id].store(true, std::memory_order_release);
  r.order.push_back(t.id);
  return absl::OkStatus();
}

Registry& Get() {
  static Registry* r = [] {
    auto* reg = new Registry();
    // The built-in formats, in the order their loaders are tried.
    for (const WeightFormatTraits* t : {&formats::F32(), &formats::Bf16(), &formats::Fp8Block(), &formats::Int4Group()}) {
      LLMRT_CHECK(Add(*reg, *t).ok());
    }
    return reg;
  }();
  return *r;
}

}  // namespace

HostArray NewHostArray(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto buf = std::make_shared<HostBuffer>(static_cast<size_t>(n) * DTypeSize(dtype));
  HostArray a;
  a.data = buf->data();
  a.bytes = buf->size();
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.keepalive = std::move(buf);
  return a;
}

HostArray SliceHostArray(const HostArray& a, int64_t row_bytes, int64_t r0, int64_t nr, int64_t b0, int64_t nb,
                         std::vector<int64_t> shape) {
  if (b0 == 0 && nb == row_bytes) {
    HostArray v = a;
    v.data = a.data + r0 * row_bytes;
    v.bytes = static_cast<size_t>(nr * row_bytes);
    v.shape = std::move(shape);
    return v;
  }
  HostArray c = NewHostArray(DType::kU8, {nr * nb});
  uint8_t* dst = const_cast<uint8_t*>(c.data);
  for (int64_t r = 0; r < nr; ++r) std::memcpy(dst + r * nb, a.data + (r0 + r) * row_bytes + b0, static_cast<size_t>(nb));
  c.dtype = a.dtype;
  c.shape = std::move(shape);
  return c;
}

const WeightFormatTraits* FindWeightFormat(WeightFormatId id) {
  Registry& r = Get();
  return id < kMaxWeightFormats && r.present[id].load(std::memory_order_acquire) ? &r.by_id[id] : nullptr;
}

const WeightFormatTraits& WeightFormatOf(WeightFormatId id) {
  const WeightFormatTraits* t = FindWeightFormat(id);
  LLMRT_CHECK(t != nullptr);
  return *t;
}

std::vector<const WeightFormatTraits*> WeightFormats() {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const WeightFormatTraits*> out;
  for (WeightFormatId id : r.order) out.push_back(&r.by_id[id]);
  return out;
}

absl::Status RegisterWeightFormat(const WeightFormatTraits& traits) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  return Add(r, traits);
}

void DequantizeRowReference(WeightFormatId format, const MatrixBytes& m, int64_t row, float* out) {
  WeightFormatOf(format).dequantize_row(m, row, out);
}

}  // namespace llmrt
