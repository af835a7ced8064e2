// KvStore: the memory of the paged KV cache. It owns the page memory (in backend memory), the
// codec and its row layout, the per-layer scales of per-layer codecs, the BF16 rows of the
// phase policy, and one spare page that padded batch rows write to. It knows nothing of models:
// a KvShape says what a row holds. Page ownership (who holds which page) is the allocator's.
#ifndef LLMRT_KV_KV_STORE_H_
#define LLMRT_KV_KV_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/quant/kv_codec.h"

namespace llmrt {

struct KvStoreOptions {
  const KvCodec* codec = nullptr;
  KvShape shape;
  int64_t page_size = 16;
  int64_t num_pages = 0;   // pages the allocator hands out (the spare page comes on top)
  int64_t fresh_rows = 0;  // lossy codecs attending over their own rows in BF16: the most tokens of one pass
};

class KvStore {
 public:
  static absl::StatusOr<std::unique_ptr<KvStore>> Create(Backend& backend, const KvStoreOptions& options);

  const KvCacheView& view() const { return view_; }
  const KvCodec& codec() const { return *options_.codec; }
  const KvRowLayout& layout() const { return layout_; }
  const KvShape& shape() const { return options_.shape; }
  int64_t page_size() const { return options_.page_size; }
  int64_t num_pages() const { return options_.num_pages; }
  // A page outside the allocator's range: rows of padded (bucketed) batches write there.
  int32_t spare_page() const { return static_cast<int32_t>(options_.num_pages); }
  uint64_t bytes_per_token() const;

  // Per-layer codecs. Whether the layer has a scale (from the checkpoint, an explicit
  // calibration, or a trusted import).
  bool has_scale(int64_t layer) const { return scale_set_[layer] != 0; }
  bool all_scales_set() const;
  // The per-layer flags as they stand (empty for codecs without per-layer scales), and their
  // restoration: a pass marks a layer as it enqueues the layer's calibration (WriteKv), so a pass
  // that fails, which may have skipped the calibration, takes its marks back and the pass that
  // reruns it calibrates again.
  const std::vector<uint8_t>& scale_flags() const { return scale_set_; }
  void RestoreScaleFlags(const std::vector<uint8_t>& flags);
  // Sets layer scales (the checkpoint's k_scale, or a trusted import's). InvalidArgument for a
  // scale outside [kMinKvScale, kMaxKvScale] or not finite.
  absl::Status SetScale(int64_t layer, float scale);
  // Every layer's scale (0 where none), read back from backend memory.
  absl::StatusOr<std::vector<float>> Scales() const;

 private:
  KvStore(Backend& backend, const KvStoreOptions& options) : backend_(backend), options_(options) {}

  Backend& backend_;
  KvStoreOptions options_;
  KvRowLayout layout_;
  std::vector<uint8_t> scale_set_;  // [num_layers]; the view points at it
  KvCacheView view_;
};

}  // namespace llmrt

#endif  // LLMRT_KV_KV_STORE_H_
