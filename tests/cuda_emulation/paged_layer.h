// A paged KV layer for the emulated attention kernels: layer 1 of a two-layer cache of random
// rows encoded by a codec's scalar reference on shuffled pages, the batch of (cached history, new
// tokens) sequences that attends over it, and the values each position reads as (the codec's
// DecodeRow; under `fresh` the pass's own positions from BF16 fresh rows), as the device
// kernels see them (KvRef and BatchRef as CudaBackend builds them).
#ifndef LLMRT_TESTS_CUDA_EMULATION_PAGED_LAYER_H_
#define LLMRT_TESTS_CUDA_EMULATION_PAGED_LAYER_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "src/quant/kv_codec.h"
#include "src/util/bf16.h"

namespace llmrt::cuda {

struct PagedLayer {
  static constexpr int64_t kLayers = 2, kLayer = 1;
  KvRowLayout layout;
  std::vector<int32_t> token_seq, token_ctx, seq_page_start{0}, seq_first, page_ids;
  std::vector<uint8_t> pages;
  std::vector<float> layer_scales = {1.0f, 0.37f};
  std::vector<uint16_t> fresh;
  std::vector<std::vector<std::vector<float>>> read;  // [seq][position] -> the row's values as read
  int64_t T = 0, max_ctx = 0;
  KvRef kv{};
  BatchRef batch{};

  PagedLayer() = default;
  PagedLayer(const PagedLayer&) = delete;  // kv and batch point into the vectors
  PagedLayer& operator=(const PagedLayer&) = delete;

  // `spare_pages` pages past the sequences' are in the cache but no sequence's.
  void Build(const KvCodec& codec, const KvShape& shape, int64_t page_size,
             const std::vector<std::pair<int64_t, int64_t>>& seqs, bool with_fresh, int64_t spare_pages,
             std::mt19937& rng) {
    std::normal_distribution<float> normal;
    const int64_t ps = page_size;
    layout = codec.Layout(shape);
    const int64_t W = layout.width, row_bytes = layout.row_bytes;
    int64_t pages_used = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      seq_first.push_back(static_cast<int32_t>(token_seq.size()));
      for (int64_t i = 0; i < seqs[s].second; ++i) {
        token_seq.push_back(static_cast<int32_t>(s));
        token_ctx.push_back(static_cast<int32_t>(seqs[s].first + i + 1));
      }
      max_ctx = std::max(max_ctx, seqs[s].first + seqs[s].second);
      pages_used += (seqs[s].first + seqs[s].second + ps - 1) / ps;
      seq_page_start.push_back(static_cast<int32_t>(pages_used));
    }
    const int64_t num_pages = pages_used + spare_pages;
    T = static_cast<int64_t>(token_seq.size());
    page_ids.resize(static_cast<size_t>(num_pages));
    std::iota(page_ids.begin(), page_ids.end(), 0);
    std::shuffle(page_ids.begin(), page_ids.end(), rng);
    page_ids.resize(static_cast<size_t>(pages_used));
    pages.assign(static_cast<size_t>(num_pages * kLayers * ps * row_bytes), 0xff);
    fresh.assign(static_cast<size_t>(std::max<int64_t>(T, 1) * W), 0);
    read.assign(seqs.size(), {});
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t len = seqs[s].first + seqs[s].second;
      for (int64_t p = 0; p < len; ++p) {
        const int64_t page = page_ids[seq_page_start[s] + p / ps];
        uint8_t* row = pages.data() + ((page * kLayers + kLayer) * ps + p % ps) * row_bytes;
        std::vector<float> x(static_cast<size_t>(W)), v(static_cast<size_t>(W));
        for (float& e : x) e = normal(rng);
        codec.EncodeRow(layout, x.data(), layer_scales[kLayer], row);
        codec.DecodeRow(layout, row, layer_scales[kLayer], v.data());
        if (with_fresh && p >= seqs[s].first) {
          for (int64_t i = 0; i < W; ++i) {
            fresh[(seq_first[s] + p - seqs[s].first) * W + i] = F32ToBf16(x[i]);
            v[i] = Bf16ToF32(F32ToBf16(x[i]));
          }
        }
        read[s].push_back(std::move(v));
      }
    }
    kv.pages = pages.data();
    kv.type = codec.id() == kKvCodecBf16 ? kElemBf16 : codec.id() == kKvCodecF32 ? kElemF32 : kElemFp8E4M3;
    kv.num_pages = num_pages;
    kv.num_layers = kLayers;
    kv.page_size = ps;
    kv.row_bytes = row_bytes;
    kv.width = W;
    kv.row.type = kv.type;
    kv.row.row_bytes = row_bytes;
    kv.row.width = W;
    kv.row.scale_offset = layout.scale_offset;
    kv.row.nseg = static_cast<int32_t>(layout.segments.size());  // as CudaBackend's RowRefOf
    for (size_t i = 0; i < layout.segments.size(); ++i) {
      const KvSegment& sg = layout.segments[i];
      kv.row.seg[i] = {sg.start, sg.count, sg.tile, sg.byte_offset, sg.first_scale, sg.bf16 ? 1 : 0};
    }
    if (codec.id() == kKvCodecFp8) kv.layer_scales = layer_scales.data();
    if (with_fresh) {
      kv.fresh = fresh.data();
      kv.fresh_rows = T;
    }
    batch = BatchRef{token_seq.data(), token_ctx.data(), seq_page_start.data(), page_ids.data(), nullptr, T, max_ctx};
    batch.seq_first_token = seq_first.data();
  }
};

}  // namespace llmrt::cuda

#endif  // LLMRT_TESTS_CUDA_EMULATION_PAGED_LAYER_H_
