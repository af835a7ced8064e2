#include "src/kv/kv_store.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<KvStore>> KvStore::Create(Backend& be, const KvStoreOptions& o) {
  if (o.codec == nullptr || o.shape.num_layers <= 0 || o.shape.width() <= 0 || o.page_size <= 0 || o.num_pages <= 0) {
    return absl::InvalidArgumentError("KV store: codec, shape, page size and page count must be set");
  }
  if (!be.SupportsKvCodec(*o.codec)) {
    return UnsupportedError(absl::StrCat("the ", be.name(), " backend has no kernels for the KV codec ", o.codec->name()));
  }
  std::unique_ptr<KvStore> s(new KvStore(be, o));
  s->layout_ = o.codec->Layout(o.shape);
  const int64_t L = o.shape.num_layers;
  KvCacheView& v = s->view_;
  v.codec = o.codec;
  v.layout = &s->layout_;
  v.num_pages = o.num_pages + 1;  // the spare page
  v.num_layers = L;
  v.page_size = o.page_size;
  v.width = s->layout_.width;
  v.row_bytes = s->layout_.row_bytes;
  auto fit = [&](const absl::StatusOr<Tensor>& t, const char* what) -> absl::Status {
    if (t.ok()) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat("the KV cache's ", what, " do not fit: ", t.status().message()));
  };
  absl::StatusOr<Tensor> pages = be.Allocate(DType::kU8, {v.num_pages, L, o.page_size, v.row_bytes});
  LLMRT_RETURN_IF_ERROR(fit(pages, "pages"));
  v.pages = *pages;
  if (o.codec->scale_kind() == KvScaleKind::kPerLayer) {
    absl::StatusOr<Tensor> scales = be.Allocate(DType::kF32, {L});
    LLMRT_RETURN_IF_ERROR(fit(scales, "scales"));
    v.scales = *scales;
    be.Fill(v.scales, 0.0f);
    s->scale_set_.assign(static_cast<size_t>(L), 0);
    v.scale_set = s->scale_set_.data();
  }
  if (o.codec->lossy() && o.fresh_rows > 0) {
    absl::StatusOr<Tensor> fresh = be.Allocate(DType::kBF16, {o.fresh_rows, v.width});
    LLMRT_RETURN_IF_ERROR(fit(fresh, "BF16 rows of the phase policy"));
    v.fresh = *fresh;
    v.fresh_rows = o.fresh_rows;
  }
  LLMRT_RETURN_IF_ERROR(be.Synchronize());
  return s;
}

uint64_t KvStore::bytes_per_token() const {
  return static_cast<uint64_t>(options_.shape.num_layers) * static_cast<uint64_t>(layout_.row_bytes);
}

bool KvStore::all_scales_set() const {
  for (uint8_t f : scale_set_) {
    if (f == 0) return false;
  }
  return true;
}

void KvStore::RestoreScaleFlags(const std::vector<uint8_t>& flags) {
  LLMRT_CHECK(flags.size() == scale_set_.size());
  std::copy(flags.begin(), flags.end(), scale_set_.begin());  // the view's pointer stays valid
}

absl::Status KvStore::SetScale(int64_t layer, float scale) {
  if (scale_set_.empty()) return absl::InvalidArgumentError("the KV codec has no per-layer scales");
  if (layer < 0 || layer >= options_.shape.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("no KV layer ", layer));
  }
  if (!std::isfinite(scale) || scale < kMinKvScale || scale > kMaxKvScale) {
    return absl::InvalidArgumentError(absl::StrCat("KV scale ", scale, " of layer ", layer, " is outside [",
                                                   kMinKvScale, ", ", kMaxKvScale, "]"));
  }
  LLMRT_RETURN_IF_ERROR(backend_.Upload(&scale, sizeof(scale), view_.scales.Rows(layer, layer + 1)));
  scale_set_[layer] = 1;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> KvStore::Scales() const {
  std::vector<float> scales(static_cast<size_t>(options_.shape.num_layers), 0.0f);
  if (scale_set_.empty()) return scales;
  LLMRT_RETURN_IF_ERROR(backend_.Download(view_.scales, scales.data(), scales.size() * sizeof(float)));
  return scales;
}

}  // namespace llmrt
