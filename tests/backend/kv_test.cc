// The paged KV cache ops: KvCalibrate, KvWrite (codec bytes and the phase policy's BF16 rows),
// KvExportRows and KvImportRows, for every registered codec over MLA and GQA row shapes (the
// real ones and small odd variants with partial FP8 tiles). Everything here is exact: codec
// bytes must equal the codec's own scalar EncodeRow.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/backend/harness.h"
#include "src/util/bf16.h"

namespace llmrt::conformance {
namespace {

struct ShapeCase {
  std::string name;
  KvShape shape;
  int64_t page_size;
};

std::vector<ShapeCase> ShapeCases() {
  return {{"MLA 512+64", MlaKvShape(2, 512, 64, 0), 4},
          {"GQA 2x16", GqaKvShape(2, 2, 16), 5},
          {"MLA+DSA odd 33+7+9", MlaKvShape(2, 33, 7, 9, /*tile=*/5, /*index_tile=*/4), 3},
          {"GQA 1x7", GqaKvShape(2, 1, 7), 4}};
}

class KvOps : public BackendTest {
 protected:
  std::unique_ptr<KvStore> Store(const KvCodec* codec, const KvShape& shape, int64_t page_size, int64_t num_pages,
                                 int64_t fresh_rows) {
    KvStoreOptions o;
    o.codec = codec;
    o.shape = shape;
    o.page_size = page_size;
    o.num_pages = num_pages;
    o.fresh_rows = fresh_rows;
    return Must(KvStore::Create(be(), o), "KvStore::Create");
  }

  // The cache's pages filled with random bytes (so untouched rows can be checked).
  std::vector<uint8_t> RandomizePages(const KvCacheView& v, std::mt19937& rng) {
    std::vector<uint8_t> bytes(v.pages.bytes());
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    MustOk(be().Upload(bytes.data(), bytes.size(), v.pages), "Upload");
    return bytes;
  }

  // The row parts of `values` [T, width] as the model passes them: column views of one padded
  // activation, the last part (when there are several) a tensor of its own.
  std::vector<Tensor> Parts(const KvShape& shape, const std::vector<float>& values, int64_t T) {
    const int64_t W = shape.width(), n = static_cast<int64_t>(shape.parts.size());
    Tensor parent;
    F32View(values, T, W, /*pad_cols=*/2, &parent);
    std::vector<Tensor> parts;
    int64_t start = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = shape.parts[i].count;
      if (i == n - 1 && n > 1) {
        std::vector<float> last(static_cast<size_t>(T * c));
        for (int64_t t = 0; t < T; ++t) std::copy_n(values.data() + t * W + start, c, last.data() + t * c);
        parts.push_back(F32(last, {T, c}));
      } else {
        parts.push_back(parent.Cols(1 + start, 1 + start + c));
      }
      start += c;
    }
    return parts;
  }
};

// Per-layer codecs: the layer's scale becomes codec.CalibratedScale(largest magnitude of the
// parts' values), exactly; the other layer keeps its (unset, zero) scale.
TEST_P(KvOps, KvCalibrate) {
  std::mt19937 rng(40);
  int64_t checked = 0;
  for (const KvCodec* codec : KvCodecs()) {
    if (codec->scale_kind() != KvScaleKind::kPerLayer) continue;
    for (const ShapeCase& sc : ShapeCases()) {
      for (bool zeros : {false, true}) {
        const int64_t T = 5, W = sc.shape.width();
        std::vector<float> values = RandomNormal(static_cast<size_t>(T * W), rng);
        if (zeros) std::fill(values.begin(), values.end(), 0.0f);
        else values[(T - 1) * W + W - 1] = -9.25f;  // the largest magnitude, negative, in the last part
        float amax = 0.0f;
        for (float x : values) amax = std::max(amax, std::fabs(x));
        auto store = Store(codec, sc.shape, sc.page_size, 4, 0);
        KvCalibrateParts(be(), store->view(), /*layer=*/1, Parts(sc.shape, values, T));
        MustOk(be().Synchronize(), "KvCalibrate");
        const std::vector<float> scales = Must(store->Scales(), "Scales");
        EXPECT_EQ(scales[0], 0.0f) << codec->name() << " " << sc.name;
        EXPECT_EQ(scales[1], codec->CalibratedScale(amax)) << codec->name() << " " << sc.name << " zeros=" << zeros;
        ++checked;
      }
    }
  }
  RecordProperty("calibrations", static_cast<int>(checked));
}

// Each token's row = the codec's EncodeRow of its parts side by side, at slot_mapping[t] of the
// layer; nothing else in the pages changes. With fresh rows (lossy codecs under the phase policy),
// fresh row t = the BF16 of token t's values. Several sequences, several pages each, partial last
// pages; FP8 per-layer at a scale with headroom and at one that saturates.
TEST_P(KvOps, KvWrite) {
  std::mt19937 rng(41);
  for (const KvCodec* codec : KvCodecs()) {
    for (const ShapeCase& sc : ShapeCases()) {
      for (bool fresh : {false, true}) {
        if (fresh && !codec->lossy()) continue;
        for (float scale_factor : {1.0f, 0.25f}) {
          if (scale_factor != 1.0f && codec->scale_kind() != KvScaleKind::kPerLayer) continue;
          const int64_t ps = sc.page_size, W = sc.shape.width(), layer = 1;
          const HostBatch hb = MakeHostBatch({{0, 3}, {ps + 1, 1}, {2 * ps - 1, ps + 2}}, ps, /*num_pages=*/12, rng);
          const int64_t T = hb.num_tokens();
          auto store = Store(codec, sc.shape, ps, 12, fresh ? T + 2 : 0);
          const KvCacheView& v = store->view();
          const std::vector<float> values = RandomNormal(static_cast<size_t>(T * W), rng, 2.0f);
          float scale = 1.0f;
          if (codec->scale_kind() == KvScaleKind::kPerLayer) {
            float amax = 0.0f;
            for (float x : values) amax = std::max(amax, std::fabs(x));
            scale = codec->CalibratedScale(amax) * scale_factor;
            MustOk(store->SetScale(layer, scale), "SetScale");
          }
          std::vector<uint8_t> want = RandomizePages(v, rng);
          KvWriteParts(be(), v, layer, Parts(sc.shape, values, T), UploadBatch(hb));
          for (int64_t t = 0; t < T; ++t) {
            codec->EncodeRow(*v.layout, values.data() + t * W, scale, want.data() + KvRowOffset(v, hb.slot_mapping[t], layer));
          }
          const std::string what = std::string(codec->name()) + " " + sc.name + " fresh=" + std::to_string(fresh) +
                                   " scale=" + std::to_string(scale);
          EXPECT_TRUE(AllEqual(ReadBytes(v.pages), want)) << what;
          ASSERT_EQ(v.fresh_rows > 0, fresh) << what;
          if (fresh) {
            std::vector<uint8_t> raw = ReadBytes(v.fresh);
            std::vector<uint16_t> got(static_cast<size_t>(T * W)), bf(got.size());
            for (int64_t t = 0; t < T; ++t) {
              std::memcpy(got.data() + t * W, raw.data() + t * W * 2, static_cast<size_t>(W) * 2);
              for (int64_t i = 0; i < W; ++i) bf[t * W + i] = F32ToBf16(values[t * W + i]);
            }
            EXPECT_TRUE(AllEqual(got, bf)) << what << ": fresh rows";
          }
        }
      }
    }
  }
}

// dst row i = the bytes of cache row slots[i] of the layer (any slots, repeated ones too).
TEST_P(KvOps, KvExportRows) {
  std::mt19937 rng(42);
  for (const KvCodec* codec : KvCodecs()) {
    for (const ShapeCase& sc : ShapeCases()) {
      auto store = Store(codec, sc.shape, sc.page_size, 6, 0);
      const KvCacheView& v = store->view();
      const std::vector<uint8_t> pages = RandomizePages(v, rng);
      const int64_t last = 6 * sc.page_size - 1;
      const std::vector<int32_t> slots = {static_cast<int32_t>(last), 0, 5, 5, static_cast<int32_t>(sc.page_size), 2};
      const int64_t n = static_cast<int64_t>(slots.size());
      for (int64_t layer : {0, 1}) {
        Tensor dst = NewTensor(DType::kU8, {n, v.row_bytes});
        be().KvExportRows(v, layer, I32(slots), dst);
        std::vector<uint8_t> want;
        for (int32_t s : slots) {
          const size_t o = KvRowOffset(v, s, layer);
          want.insert(want.end(), pages.begin() + o, pages.begin() + o + v.row_bytes);
        }
        EXPECT_TRUE(AllEqual(ReadBytes(dst), want)) << codec->name() << " " << sc.name << " layer " << layer;
      }
    }
  }
}

// Rows encoded by any codec (at its scale) imported into a cache of any codec: the cache row is
// the target codec's EncodeRow (at the layer's scale) of the source codec's DecodeRow; the same
// codec at the same scale keeps the bytes. Exporting the rows again gives those bytes back.
TEST_P(KvOps, KvImportRowsConvertsAndRoundTrips) {
  std::mt19937 rng(43);
  for (const ShapeCase& sc : ShapeCases()) {
    for (const KvCodec* src : KvCodecs()) {
      for (const KvCodec* dst : KvCodecs()) {
        for (bool same_scale : {false, true}) {
          const bool both_per_layer = src->scale_kind() == KvScaleKind::kPerLayer && dst->scale_kind() == KvScaleKind::kPerLayer;
          if (same_scale && !both_per_layer) continue;
          const int64_t W = sc.shape.width(), layer = 1, n = 5;
          const KvRowLayout src_layout = src->Layout(sc.shape);
          const std::vector<float> values = RandomNormal(static_cast<size_t>(n * W), rng, 3.0f);
          float amax = 0.0f;
          for (float x : values) amax = std::max(amax, std::fabs(x));
          const float src_scale = src->scale_kind() == KvScaleKind::kPerLayer ? src->CalibratedScale(amax) : 0.0f;
          std::vector<uint8_t> rows(static_cast<size_t>(n * src_layout.row_bytes));
          for (int64_t i = 0; i < n; ++i) {
            src->EncodeRow(src_layout, values.data() + i * W, src_scale, rows.data() + i * src_layout.row_bytes);
          }
          auto store = Store(dst, sc.shape, sc.page_size, 5, 0);
          const KvCacheView& v = store->view();
          float dst_scale = 1.0f;
          if (dst->scale_kind() == KvScaleKind::kPerLayer) {
            dst_scale = same_scale ? src_scale : dst->CalibratedScale(amax * 0.75f);
            MustOk(store->SetScale(layer, dst_scale), "SetScale");
          }
          std::vector<uint8_t> want = RandomizePages(v, rng);
          const std::vector<int32_t> slots = {7, 0, static_cast<int32_t>(5 * sc.page_size - 1), 3, 11};
          Tensor src_rows = NewTensor(DType::kU8, {n, src_layout.row_bytes});
          MustOk(be().Upload(rows.data(), rows.size(), src_rows), "Upload");
          const Tensor slot_t = I32(slots);
          be().KvImportRows(v, layer, slot_t, src_rows, *src, src_layout, src_scale);
          const bool keep = src->id() == dst->id() && (dst->scale_kind() != KvScaleKind::kPerLayer || same_scale);
          std::vector<uint8_t> exported;
          std::vector<float> decoded(static_cast<size_t>(W));
          for (int64_t i = 0; i < n; ++i) {
            uint8_t* row = want.data() + KvRowOffset(v, slots[i], layer);
            const uint8_t* in = rows.data() + i * src_layout.row_bytes;
            if (keep) {
              std::memcpy(row, in, static_cast<size_t>(v.row_bytes));
            } else {
              src->DecodeRow(src_layout, in, src_scale, decoded.data());
              dst->EncodeRow(*v.layout, decoded.data(), dst_scale, row);
            }
            exported.insert(exported.end(), row, row + v.row_bytes);
          }
          const std::string what = std::string(src->name()) + " -> " + dst->name() + " " + sc.name +
                                   " same_scale=" + std::to_string(same_scale);
          EXPECT_TRUE(AllEqual(ReadBytes(v.pages), want)) << what;
          Tensor back = NewTensor(DType::kU8, {n, v.row_bytes});
          be().KvExportRows(v, layer, slot_t, back);
          EXPECT_TRUE(AllEqual(ReadBytes(back), exported)) << what << ": export after import";
        }
      }
    }
  }
}

LLMRT_BACKEND_SUITE(KvOps);

}  // namespace
}  // namespace llmrt::conformance
