// The CUDA backend's KV cache kernels (kernels/kv_kernels.cuh) run on the host
// (cuda_emulation.h): rows written, exported and imported must be the CPU codecs' bytes exactly
// (the device encoder is EncodeRow operation for operation), the phase policy's fresh rows the
// values' bfloat16, and a layer's calibrated FP8 scale the codec's CalibratedScale.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/quant/kv_codec.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "tests/cuda_emulation/fragment_emulation.h"
#include "kernels/kv_kernels.cuh"

namespace llmrt::cuda::dsa {
inline void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emulation::Mma16816Bf16(d, a, b0, b1); }
using emulation::LdMatrix4;
}  // namespace llmrt::cuda::dsa

#include "kernels/dsa_mma_kernels.cuh"

namespace llmrt::cuda {
namespace {

// MLA-like rows: a latent in tiles of 32 (the tiled codec's scales), a BF16 rope key, an
// indexer key of `index_width` (12: in tiles of 5, a partial last tile; wider: tiles of 64).
KvShape Shape(int64_t index_width = 12) {
  KvShape s;
  s.num_layers = 2;
  s.parts = {{64, 32, false}, {16, 128, true}, {index_width, index_width > 12 ? 64 : 5, false}};
  return s;
}

KvRowRef RowRefOf(const KvCodec& c, const KvRowLayout& l) {  // as CudaBackend's
  KvRowRef r{};
  r.type = c.id() == kKvCodecBf16 ? kElemBf16 : c.id() == kKvCodecF32 ? kElemF32 : kElemFp8E4M3;
  r.row_bytes = l.row_bytes;
  r.width = l.width;
  r.scale_offset = l.scale_offset;
  r.nseg = static_cast<int32_t>(l.segments.size());
  for (size_t i = 0; i < l.segments.size(); ++i) {
    const KvSegment& s = l.segments[i];
    r.seg[i] = {s.start, s.count, s.tile, s.byte_offset, s.first_scale, s.bf16 ? 1 : 0};
  }
  return r;
}

struct Cache {
  const KvCodec* codec;
  KvRowLayout layout;
  std::vector<uint8_t> pages;
  std::vector<float> layer_scales = {1.0f, 0.0f};
  std::vector<uint16_t> fresh;
  KvRef ref{};
  Cache(uint32_t id, int64_t num_pages, int64_t page_size, int64_t fresh_rows, int64_t index_width = 12)
      : Cache(id, num_pages, page_size, fresh_rows, Shape(index_width)) {}
  Cache(uint32_t id, int64_t num_pages, int64_t page_size, int64_t fresh_rows, const KvShape& shape)
      : codec(FindKvCodec(id)) {
    layout = codec->Layout(shape);
    pages.assign(static_cast<size_t>(num_pages * 2 * page_size * layout.row_bytes), 0xee);
    fresh.assign(static_cast<size_t>(std::max<int64_t>(fresh_rows, 1) * layout.width), 0);
    ref.pages = pages.data();
    ref.type = RowRefOf(*codec, layout).type;
    ref.num_pages = num_pages;
    ref.num_layers = 2;
    ref.page_size = page_size;
    ref.row_bytes = layout.row_bytes;
    ref.width = layout.width;
    ref.row = RowRefOf(*codec, layout);
    if (codec->scale_kind() == KvScaleKind::kPerLayer) ref.layer_scales = layer_scales.data();
    if (fresh_rows > 0) {
      ref.fresh = fresh.data();
      ref.fresh_rows = fresh_rows;
    }
  }
  const uint8_t* Row(int64_t layer, int32_t slot) const {
    return pages.data() + (((slot / ref.page_size) * 2 + layer) * ref.page_size + slot % ref.page_size) * ref.row_bytes;
  }
};

TEST(KvKernelsEmulated, WriteCalibrateExportImportAreTheCodecsBytes) {
  std::mt19937 rng(101);
  std::normal_distribution<float> normal;
  const int64_t T = 5, page_size = 4, num_pages = 4, layer = 1;
  const std::vector<int32_t> slots = {13, 2, 7, 0, 9};
  for (uint32_t id : {kKvCodecF32, kKvCodecBf16, kKvCodecFp8, kKvCodecFp8Tiled}) {
    for (bool fresh : {false, true}) {
      Cache cache(id, num_pages, page_size, fresh ? T : 0);
      if (fresh && !cache.codec->lossy()) continue;
      SCOPED_TRACE(::testing::Message() << cache.codec->name() << (fresh ? " fresh" : ""));
      const int64_t W = cache.layout.width;
      // The parts side by side: latent, rope, indexer key (one value past the indexer key is 0).
      std::vector<float> latent(T * 64), rope(T * 16), index(T * 11);
      for (float& v : latent) v = normal(rng);
      for (float& v : rope) v = normal(rng);
      for (float& v : index) v = 4.0f * normal(rng);
      KvParts parts{};
      parts.part[0] = ConstMat{latent.data(), T, 64, 64};
      parts.part[1] = ConstMat{rope.data(), T, 16, 16};
      parts.part[2] = ConstMat{index.data(), T, 11, 11};  // 11 of the 12 values: the last one 0
      parts.count = 3;
      std::vector<int32_t> token_seq(T, 0), token_ctx(T, 1), page_start = {0, num_pages}, page_ids = {0, 1, 2, 3};
      BatchRef batch{token_seq.data(), token_ctx.data(), page_start.data(), page_ids.data(), slots.data(), T, 1};
      if (cache.codec->scale_kind() == KvScaleKind::kPerLayer) {
        emulation::RunGrid({1, 1, 1}, kvk::kCalibrateThreads, 0, [&] { kvk::KvCalibrateKernel(cache.ref, layer, parts); });
        float amax = 0.0f;
        for (const auto* v : {&latent, &rope, &index}) {
          for (float x : *v) amax = std::max(amax, std::fabs(x));
        }
        EXPECT_EQ(cache.layer_scales[layer], cache.codec->CalibratedScale(amax));
      }
      int32_t err = 0;
      emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 128, W * sizeof(float),
                         [&] { kvk::KvWriteKernel(cache.ref, layer, parts, batch, &err); });
      EXPECT_EQ(err, 0);
      std::vector<std::vector<float>> rows(T, std::vector<float>(W, 0.0f));
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(latent.data() + t * 64, 64, rows[t].data());
        std::copy_n(rope.data() + t * 16, 16, rows[t].data() + 64);
        std::copy_n(index.data() + t * 11, 11, rows[t].data() + 80);
        std::vector<uint8_t> want(cache.layout.row_bytes);
        cache.codec->EncodeRow(cache.layout, rows[t].data(), cache.layer_scales[layer], want.data());
        const uint8_t* got = cache.Row(layer, slots[t]);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got)) << "token " << t;
        if (fresh) {
          for (int64_t i = 0; i < W; ++i) EXPECT_EQ(cache.fresh[t * W + i], F32ToBf16(rows[t][i])) << t << " " << i;
        }
      }

      // Export: the rows as they are.
      std::vector<uint8_t> exported(T * cache.layout.row_bytes);
      emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 128, 0,
                         [&] { kvk::KvExportKernel(cache.ref, layer, slots.data(), exported.data(), &err); });
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_TRUE(std::equal(exported.begin() + t * cache.layout.row_bytes,
                               exported.begin() + (t + 1) * cache.layout.row_bytes, cache.Row(layer, slots[t])));
      }

      // Import rows of FP8 with a layer scale: decoded, then encoded by this cache's codec.
      const KvCodec& fp8 = *FindKvCodec(kKvCodecFp8);
      const KvRowLayout src_layout = fp8.Layout(Shape());
      const float src_scale = 0.03f;
      std::vector<uint8_t> src(T * src_layout.row_bytes);
      for (int64_t t = 0; t < T; ++t) fp8.EncodeRow(src_layout, rows[t].data(), src_scale, src.data() + t * src_layout.row_bytes);
      const std::vector<int32_t> import_slots = {1, 3, 5, 8, 15};
      const bool same = id == kKvCodecFp8;
      emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 128, W * sizeof(float), [&] {
        kvk::KvImportKernel(cache.ref, layer, import_slots.data(), src.data(), RowRefOf(fp8, src_layout), src_scale,
                            same, &err);
      });
      EXPECT_EQ(err, 0);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> decoded(W);
        fp8.DecodeRow(src_layout, src.data() + t * src_layout.row_bytes, src_scale, decoded.data());
        std::vector<uint8_t> want(cache.layout.row_bytes);
        cache.codec->EncodeRow(cache.layout, decoded.data(), cache.layer_scales[layer], want.data());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), cache.Row(layer, import_slots[t]))) << "imported row " << t;
      }

      // A slot outside the cache is reported, and nothing is written.
      std::vector<int32_t> bad_slots = slots;
      bad_slots[2] = static_cast<int32_t>(num_pages * page_size);
      batch.slot_mapping = bad_slots.data();
      err = 0;
      emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 128, W * sizeof(float),
                         [&] { kvk::KvWriteKernel(cache.ref, layer, parts, batch, &err); });
      EXPECT_EQ(err, kErrSlot);
    }
  }
}

// The write and import kernels at the row shapes the shipped architectures give (the test above
// uses narrow rows): Kimi K2's latent of 512 in tiles of 128 and its BF16 rope key of 64, GLM-5's
// with its indexer key of 128 besides, and GLM-4.5's keys and values of 8 heads of 128 (a tile a
// head). A segment's tiles outnumber the block's warps there and a tile's values the lanes, so
// every loop of the encoder takes more than one turn; each row must be the CPU codec's bytes.
TEST(KvKernelsEmulated, WriteAndImportAtTheShippedRowShapes) {
  std::mt19937 rng(102);
  std::normal_distribution<float> normal;
  struct Model {
    const char* name;
    std::vector<KvPart> parts;
  };
  const Model models[] = {
      {"kimi-k2", {{512, 128, false}, {64, 128, true}}},
      {"glm-5", {{512, 128, false}, {64, 128, true}, {128, 128, false}}},
      {"glm-4.5", {{1024, 128, false}, {1024, 128, false}}},
  };
  const int64_t T = 3, page_size = 2, num_pages = 3, layer = 0;
  const std::vector<int32_t> slots = {5, 0, 3}, import_slots = {1, 4, 2};
  for (const Model& m : models) {
    KvShape shape;
    shape.num_layers = 2;
    shape.parts = m.parts;
    for (uint32_t id : {kKvCodecF32, kKvCodecBf16, kKvCodecFp8, kKvCodecFp8Tiled}) {
      for (bool fresh : {false, true}) {
        Cache cache(id, num_pages, page_size, fresh ? T : 0, shape);
        if (fresh && !cache.codec->lossy()) continue;
        SCOPED_TRACE(::testing::Message() << m.name << " " << cache.codec->name() << (fresh ? " fresh" : ""));
        const int64_t W = cache.layout.width;
        ASSERT_EQ(W, shape.width());
        std::vector<std::vector<float>> values(m.parts.size());
        KvParts parts{};
        for (size_t p = 0; p < m.parts.size(); ++p) {
          const int64_t n = m.parts[p].count;
          values[p].resize(static_cast<size_t>(T * n));
          // Magnitudes spread over a few binades, so that each tile's scale differs.
          for (float& v : values[p]) v = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 7) - 3);
          parts.part[p] = ConstMat{values[p].data(), T, n, n};
        }
        parts.count = static_cast<int>(m.parts.size());
        cache.layer_scales[layer] = 0.0625f;
        std::vector<int32_t> token_seq(T, 0), token_ctx(T, 1), page_start = {0, num_pages}, page_ids = {0, 1, 2};
        BatchRef batch{token_seq.data(), token_ctx.data(), page_start.data(), page_ids.data(), slots.data(), T, 1};
        int32_t err = 0;
        emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 128, W * sizeof(float),
                           [&] { kvk::KvWriteKernel(cache.ref, layer, parts, batch, &err); });
        EXPECT_EQ(err, 0);
        std::vector<std::vector<float>> rows(T, std::vector<float>(W));
        for (int64_t t = 0; t < T; ++t) {
          for (size_t p = 0, c = 0; p < m.parts.size(); c += m.parts[p].count, ++p) {
            std::copy_n(values[p].data() + t * m.parts[p].count, m.parts[p].count, rows[t].data() + c);
          }
          std::vector<uint8_t> want(cache.layout.row_bytes);
          cache.codec->EncodeRow(cache.layout, rows[t].data(), cache.layer_scales[layer], want.data());
          EXPECT_TRUE(std::equal(want.begin(), want.end(), cache.Row(layer, slots[t]))) << "token " << t;
          if (fresh) {
            int64_t wrong = 0;
            for (int64_t i = 0; i < W; ++i) wrong += cache.fresh[t * W + i] != F32ToBf16(rows[t][i]);
            EXPECT_EQ(wrong, 0) << "token " << t;
          }
        }
        // Import rows of the tiled FP8 codec (decoded, then encoded by this cache's codec; the
        // tiled cache itself copies them).
        const KvCodec& tiled = *FindKvCodec(kKvCodecFp8Tiled);
        const KvRowLayout src_layout = tiled.Layout(shape);
        std::vector<uint8_t> src(T * src_layout.row_bytes);
        for (int64_t t = 0; t < T; ++t) tiled.EncodeRow(src_layout, rows[t].data(), 1.0f, src.data() + t * src_layout.row_bytes);
        emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, 128, W * sizeof(float), [&] {
          kvk::KvImportKernel(cache.ref, layer, import_slots.data(), src.data(), RowRefOf(tiled, src_layout), 1.0f,
                              id == kKvCodecFp8Tiled, &err);
        });
        EXPECT_EQ(err, 0);
        for (int64_t t = 0; t < T; ++t) {
          std::vector<float> decoded(W);
          tiled.DecodeRow(src_layout, src.data() + t * src_layout.row_bytes, 1.0f, decoded.data());
          std::vector<uint8_t> want(cache.layout.row_bytes);
          cache.codec->EncodeRow(cache.layout, decoded.data(), cache.layer_scales[layer], want.data());
          EXPECT_TRUE(std::equal(want.begin(), want.end(), cache.Row(layer, import_slots[t]))) << "imported row " << t;
        }
      }
    }
  }
}

// The tensor-core kernel's score of one position (DsaScoreMmaKernel's arithmetic written out):
// the query's three bfloat16 parts; the key's bfloat16 values (the row's BF16 values or FP8
// codes; fresh: the fresh row's values) with each group's scale (fresh rows: 1); per head, per
// group, one fma chain over 16-column steps, each step part 0, 1, 2 over its columns in order (the
// MMAs' order in the emulation), folded as acc = fma(sum, scale, acc); then per lane g (heads
// 16 mi + g + 8 hi in order) the rounded w * dot sums, and the butterfly over the 8 lanes.
float MmaScore(const Cache& cache, const dsa::KeyGroups& groups, const uint8_t* row, const float* fresh_key,
               float layer_scale, const float* q, const float* w, int64_t heads, int64_t hd, float key_scale) {
  const int tiles = dsa::DsaMmaTiles(heads), M = 16 * tiles;
  const int64_t kp = dsa::DsaMmaKp(hd);
  std::vector<float> key(static_cast<size_t>(kp), 0.0f), scale(static_cast<size_t>(groups.count), 1.0f);
  for (int gi = 0, c = 0; gi < groups.count; ++gi) {
    if (fresh_key == nullptr && groups.scale[gi] >= -1) {
      scale[gi] = groups.scale[gi] == -1 ? layer_scale
                                         : reinterpret_cast<const float*>(row + cache.layout.scale_offset)[groups.scale[gi]];
    }
    for (; c < groups.end[gi]; ++c) {
      const int64_t j = c - (gi > 0 ? groups.end[gi - 1] : 0);
      if (fresh_key != nullptr) {
        key[c] = fresh_key[c];
      } else if (groups.bf16[gi]) {
        uint16_t v;
        std::memcpy(&v, row + groups.offset[gi] + 2 * j, 2);
        key[c] = Bf16ToF32(v);
      } else {
        key[c] = Fp8E4M3::ToFloat(row[groups.offset[gi] + j]);
      }
    }
  }
  std::vector<float> acc(static_cast<size_t>(M), 0.0f);
  for (int h = 0; h < M; ++h) {
    float parts[3][dsa::kMaxMmaHeadDim] = {};
    for (int64_t c = 0; c < hd; ++c) {
      const float v = h < heads ? q[h * hd + c] : 0.0f;
      parts[0][c] = Bf16ToF32(F32ToBf16(v));
      const float r1 = v - parts[0][c];
      parts[1][c] = Bf16ToF32(F32ToBf16(r1));
      parts[2][c] = Bf16ToF32(F32ToBf16(r1 - parts[1][c]));
    }
    for (int gi = 0, k0 = 0; gi < groups.count; ++gi) {
      float part = 0.0f;
      for (; k0 < dsa::DsaMmaKp(groups.end[gi]); k0 += 16) {
        for (int pi = 0; pi < 3; ++pi) {
          for (int k = k0; k < k0 + 16; ++k) part = std::fma(parts[pi][k], key[k], part);
        }
      }
      acc[h] = std::fma(part, scale[gi], acc[h]);
    }
  }
  float v[8];
  for (int g = 0; g < 8; ++g) {
    float s = 0.0f;
    for (int mi = 0; mi < tiles; ++mi) {
      for (int hi = 0; hi < 2; ++hi) {
        const int h = 16 * mi + g + 8 * hi;
        const float dot = acc[h] * key_scale;
        if (dot > 0.0f) s += (h < heads ? w[h] : 0.0f) * dot;
      }
    }
    v[g] = s;
  }
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// The DSA indexer's scores over each codec's rows: I(t, p) = sum over heads of w * relu(q . k_p *
// key_scale) as one fmaf chain per head over the columns in order, heads in order, the product
// w * dot and the sum each rounded: equal to that reference bit for bit (the CPU backend's SIMD
// dot products sum in another order); tokens whose context fits top_k are left alone (dense).
// Every kernel: one thread per position reading global memory, the staged one (rows decoded into
// shared memory, four columns a load where head_dim allows) and the tiled one (accumulators in
// registers: DsaScoreTiledKernel's instances), over one block of positions and
// several, head_dim 12 and 7 (a tail of single columns), and a page out of range (its positions
// score 0 and raise the page error; the others are unchanged). With `fresh`, each sequence's
// last position is the pass's own row, read as bfloat16 from the fresh rows (the phase policy).
// key_scale is GLM-5's 1 / sqrt(128) rounded, not a power of two.
void CheckDsaScores(DsaScores form, int64_t heads, int64_t hd, int64_t len0, int64_t len1, bool bad_page,
                    std::mt19937& rng, bool fresh = false, bool few_blocks = false, int mma_tiles_per_block = 1,
                    int64_t key_offset = 80) {
  const char* name = form == DsaScores::kTiled          ? "tiled"
                     : form == DsaScores::kStaged       ? "staged"
                     : form == DsaScores::kTensorCores ? "tensor cores"
                                                        : "per-thread";
  SCOPED_TRACE(std::string(name) + " heads " + std::to_string(heads) + " head_dim " +
               std::to_string(hd) + " contexts " + std::to_string(len0) + ", " + std::to_string(len1) +
               (bad_page ? " bad page" : "") + (fresh ? " fresh rows" : "") +
               (few_blocks ? " one position a thread" : "") +
               (mma_tiles_per_block > 1 ? " tiles a block " + std::to_string(mma_tiles_per_block) : "") +
               " key from column " + std::to_string(key_offset));
  const float key_scale = 0.0883883f;
  std::normal_distribution<float> normal;
  const int64_t page_size = 4, layer = 1, top_k = 5;
  const int64_t pages0 = (len0 + page_size - 1) / page_size, pages1 = (len1 + page_size - 1) / page_size;
  const int64_t num_pages = pages0 + pages1 + 1;
  // Tokens: sequence 0 at contexts len0 and 4 (dense: no scores), sequence 1 at len1.
  const std::vector<int32_t> token_seq = {0, 0, 1}, token_ctx = {static_cast<int32_t>(len0), 4, static_cast<int32_t>(len1)};
  const std::vector<int32_t> page_start = {0, static_cast<int32_t>(pages0), static_cast<int32_t>(pages0 + pages1)};
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  page_ids.resize(static_cast<size_t>(pages0 + pages1));
  const int64_t T = 3, max_ctx = std::max(len0, len1), bad_index = pages0 + pages1 / 2;
  for (uint32_t id : {kKvCodecF32, kKvCodecBf16, kKvCodecFp8, kKvCodecFp8Tiled}) {
    if (id == kKvCodecF32 && form == DsaScores::kTensorCores) continue;  // (F32 rows take the tiled kernel)
    // The index key from column 80.
    Cache cache(id, num_pages, page_size, fresh ? T : 0, std::max<int64_t>(hd, 12));
    SCOPED_TRACE(cache.codec->name());
    cache.layer_scales[layer] = 0.05f;
    const int64_t W = cache.layout.width;
    std::vector<std::vector<std::vector<float>>> read(2);
    for (int64_t sq = 0; sq < 2; ++sq) {
      for (int64_t p = 0; p < (sq == 0 ? len0 : len1); ++p) {
        std::vector<float> x(W), v(W);
        for (float& e : x) e = normal(rng);
        const int32_t slot = page_ids[page_start[sq] + p / page_size] * page_size + p % page_size;
        uint8_t* row = const_cast<uint8_t*>(cache.Row(layer, slot));
        cache.codec->EncodeRow(cache.layout, x.data(), cache.layer_scales[layer], row);
        cache.codec->DecodeRow(cache.layout, row, cache.layer_scales[layer], v.data());
        read[sq].push_back(v);
      }
    }
    // Fresh rows: the pass's token t writes row t; a sequence's positions from its first token's
    // context - 1 read them.
    const std::vector<int32_t> seq_first = {0, 2};
    const auto fresh_row = [&](int64_t sq, int64_t p) -> int64_t {
      const int64_t from = token_ctx[seq_first[sq]] - 1;
      return fresh && p >= from ? seq_first[sq] + (p - from) : -1;
    };
    if (fresh) {
      for (uint16_t& e : cache.fresh) e = F32ToBf16(normal(rng));
    }
    std::vector<int32_t> ids = page_ids;
    if (bad_page) ids[bad_index] = static_cast<int32_t>(num_pages);
    std::vector<float> q(T * heads * hd), w(T * heads), scores(T * max_ctx, -3.0f);
    for (float& e : q) e = normal(rng);
    for (float& e : w) e = std::fabs(normal(rng));
    BatchRef batch{token_seq.data(), token_ctx.data(), page_start.data(), ids.data(), nullptr, T, max_ctx,
                   fresh ? seq_first.data() : nullptr};
    int32_t err = 0;
    const ConstMat qm{q.data(), T, heads * hd, heads * hd}, wm{w.data(), T, heads, heads};
    dsa::KeyGroups groups;
    if (form == DsaScores::kTensorCores) {
      ASSERT_TRUE(dsa::MakeKeyGroups(cache.ref.row, key_offset, hd, &groups));
      const int tiles = dsa::DsaMmaTiles(heads);
      const auto run = [&](auto kernel) {
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, dsa::kMmaPositions * mma_tiles_per_block), 1},
                           dsa::kMmaThreads, static_cast<size_t>(dsa::DsaMmaBytes(tiles, hd)), [&] {
                             kernel(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, key_scale, top_k, groups,
                                    mma_tiles_per_block, scores.data(), &err);
                           });
      };
      if (tiles == 1) run(dsa::DsaScoreMmaKernel<1>);
      if (tiles == 2) run(dsa::DsaScoreMmaKernel<2>);
      if (tiles == 4) run(dsa::DsaScoreMmaKernel<4>);
    } else if (form == DsaScores::kTiled) {
      const int tile = kvk::DsaTileHeads(heads);
      ASSERT_NE(tile, 0);
      const auto run = [&](auto kernel, int per) {
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, kvk::DsaTilePositions(tile, per)), 1},
                           kvk::kDsaTileThreads, static_cast<size_t>(kvk::DsaTiledBytes(tile, per)), [&] {
                             kernel(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, key_scale, top_k,
                                    scores.data(), &err);
                           });
      };
      // The instance of the usual tiles, or (few_blocks) one position a thread.
      if (tile == 16) few_blocks ? run(kvk::DsaScoreTiledKernel<16, 1>, 1) : run(kvk::DsaScoreTiledKernel<16>, 4);
      if (tile == 32) few_blocks ? run(kvk::DsaScoreTiledKernel<32, 1>, 1) : run(kvk::DsaScoreTiledKernel<32>, 2);
      if (tile == 64) run(kvk::DsaScoreTiledKernel<64>, 1);
    } else if (form == DsaScores::kStaged) {
      emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, kvk::kDsaPositions), 1}, kvk::kDsaPositions,
                         static_cast<size_t>(kvk::DsaStagedBytes(heads, hd)), [&] {
                           kvk::DsaScoreStagedKernel(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, key_scale,
                                                     top_k, scores.data(), &err);
                         });
    } else {
      emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, 128), 1}, 128, 0, [&] {
        kvk::DsaScoreKernel(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, key_scale, top_k, scores.data(),
                            &err);
      });
    }
    EXPECT_EQ(err, bad_page ? static_cast<int32_t>(kErrPage) : 0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t p = 0; p < max_ctx; ++p) {
        if (token_ctx[t] <= top_k || p >= token_ctx[t]) {
          EXPECT_EQ(scores[t * max_ctx + p], -3.0f) << "token " << t << " position " << p << " written";
          continue;
        }
        const int64_t sq = token_seq[t];
        if (bad_page && sq == 1 && page_start[1] + p / page_size == bad_index) {
          EXPECT_EQ(scores[t * max_ctx + p], 0.0f) << "token " << t << " position " << p << " (page out of range)";
          continue;
        }
        std::vector<float> k(read[sq][p].begin() + key_offset, read[sq][p].begin() + key_offset + hd);
        if (const int64_t fr = fresh_row(sq, p); fr >= 0) {
          for (int64_t i = 0; i < hd; ++i) k[i] = Bf16ToF32(cache.fresh[fr * W + key_offset + i]);
        }
        float want = 0.0f;
        if (form == DsaScores::kTensorCores) {
          const int32_t slot = ids[page_start[sq] + p / page_size] * page_size + p % page_size;
          want = MmaScore(cache, groups, cache.Row(layer, slot), fresh_row(sq, p) >= 0 ? k.data() : nullptr,
                          cache.layer_scales[layer], q.data() + t * heads * hd, w.data() + t * heads, heads, hd,
                          key_scale);
        } else {
          for (int64_t h = 0; h < heads; ++h) {
            float d = 0.0f;
            for (int64_t i = 0; i < hd; ++i) d = std::fma(q[(t * heads + h) * hd + i], k[i], d);
            const float dot = d * key_scale;
            if (dot > 0.0f) want += w[t * heads + h] * dot;
          }
        }
        EXPECT_EQ(scores[t * max_ctx + p], want == 0.0f ? 0.0f : want) << "token " << t << " position " << p;
      }
    }
  }
}

// The DSA top-k: the positions of the top_k scores, ties to the earlier position, ascending; a
// context within top_k takes every position (padded with -1); one past the scores' bound raises
// the page error and selects nothing. The CPU's rule (larger score first, equal scores by
// position) over scores drawn at random, with many ties (every score one of a few values: the
// threshold key is shared by positions across thread ranges), with many zeros (the score kernel
// writes +0 for -0, so a zero is one score), and with infinities; and with NaN, for which the
// CPU's comparison gives no order, the device's own rule (by the bits: above +infinity with the
// sign clear, below -infinity with it set), over contexts from one block of positions to many.
TEST(KvKernelsEmulated, DsaTopKIsTheTopScoresTiesToTheEarlierPosition) {
  std::mt19937 rng(103);
  std::normal_distribution<float> normal;
  const auto order_key = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  };
  enum Kind { kRandom, kFewValues, kZeros, kSpecials };
  for (const Kind kind : {kRandom, kFewValues, kZeros, kSpecials}) {
    for (const int64_t top_k : {int64_t{5}, int64_t{64}, int64_t{700}}) {
      const std::vector<int32_t> token_ctx = {3, 5, 6, 100, 1500, 3333, 4000};
      const int64_t T = static_cast<int64_t>(token_ctx.size()), max_ctx = 3500;  // 4000: past the bound
      SCOPED_TRACE(::testing::Message() << "kind " << kind << " top_k " << top_k);
      std::vector<float> scores(static_cast<size_t>(T * max_ctx));
      for (float& s : scores) {
        switch (kind) {
          case kRandom: s = normal(rng); break;
          case kFewValues: s = static_cast<float>(static_cast<int>(rng() % 4)) * 0.5f; break;
          case kZeros: s = rng() % 3 == 0 ? std::fabs(normal(rng)) : 0.0f; break;
          case kSpecials: {
            const uint32_t r = rng() % 16;
            s = r == 0 ? (rng() % 2 ? NAN : -NAN) : r == 1 ? INFINITY : r == 2 ? -INFINITY : normal(rng);
            break;
          }
        }
      }
      // Past each token's context its row holds +NaN with every payload bit (the largest key):
      // a read past the context would select it.
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t p = token_ctx[t]; p < max_ctx; ++p) {
          const uint32_t largest = 0x7fffffffu;
          std::memcpy(&scores[t * max_ctx + p], &largest, 4);
        }
      }
      std::vector<int32_t> selected(static_cast<size_t>(T * top_k), -5);
      const std::vector<int32_t> token_seq(static_cast<size_t>(T), 0);
      BatchRef batch{token_seq.data(), token_ctx.data(), nullptr, nullptr, nullptr, T, max_ctx};
      int32_t err = 0;
      emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, sel::kSelectThreads, 0, [&] {
        kvk::DsaTopKKernel(batch, top_k, scores.data(), selected.data(), top_k, &err);
      });
      EXPECT_EQ(err, static_cast<int32_t>(kErrPage));  // the context of 4000
      // The two stages (each chunk's top_k, then the token's among them) select the same
      // positions (blocks of 1,024 fibers are slow to emulate: random scores at top_k 64 in
      // chunks of 256, the winners spread over them; ties and special values at top_k 5 in
      // chunks of 1,000 and at top_k 700 in chunks of exactly 700).
      const bool random64 = kind == kRandom && top_k == 64;  // chunks of 4 x top_k: winners in each
      if (random64 || ((kind == kFewValues || kind == kSpecials) && top_k != 64)) {
        const int64_t chunk = random64 ? 256 : top_k == 700 ? 700 : 1000;
        SCOPED_TRACE(::testing::Message() << "two stages, chunks of " << chunk);
        const int64_t ld = kvk::DsaCandidates(max_ctx, top_k, chunk);
        std::vector<uint32_t> keys(static_cast<size_t>(T * ld), 0xdeadbeefu);
        std::vector<int32_t> pos(static_cast<size_t>(T * ld), -7), two(static_cast<size_t>(T * top_k), -5);
        int32_t err2 = 0;
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, static_cast<int>(chunk)), 1},
                           sel::kSelectThreads, 0, [&] {
                             kvk::DsaTopKChunkKernel(batch, top_k, chunk, scores.data(), keys.data(), pos.data(), ld);
                           });
        emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, sel::kSelectThreads, 0, [&] {
          kvk::DsaTopKMergeKernel(batch, top_k, chunk, keys.data(), pos.data(), ld, two.data(), top_k, &err2);
        });
        EXPECT_EQ(err2, static_cast<int32_t>(kErrPage));
        EXPECT_EQ(two, selected);
      }
      for (int64_t t = 0; t < T; ++t) {
        const int64_t ctx = token_ctx[t];
        std::vector<int32_t> want;
        if (ctx > max_ctx) {
          want.assign(static_cast<size_t>(top_k), -1);
        } else if (ctx <= top_k) {
          for (int64_t i = 0; i < top_k; ++i) want.push_back(i < ctx ? static_cast<int32_t>(i) : -1);
        } else {
          std::vector<int32_t> pos(static_cast<size_t>(ctx));
          std::iota(pos.begin(), pos.end(), 0);
          const float* sc = scores.data() + t * max_ctx;
          std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) { return order_key(sc[a]) > order_key(sc[b]); });
          pos.resize(static_cast<size_t>(top_k));
          std::sort(pos.begin(), pos.end());
          want = pos;
        }
        const std::vector<int32_t> got(selected.begin() + t * top_k, selected.begin() + (t + 1) * top_k);
        EXPECT_EQ(got, want) << "token " << t << " context " << ctx;
      }
    }
  }
}

// The top-k at GLM-5's shape: top_k 2,048 (twice the block's threads, so a thread takes several
// of the selected slots) over contexts past 32K positions, in one stage and in the two the
// backend runs there (chunks of kDsaTopKChunk, as LaunchDsaSelect takes them: 5 chunks, the last
// partial). Random scores, and scores of few values (ties across the threshold in every chunk).
TEST(KvKernelsEmulated, DsaTopKAtGlm5Shapes) {
  std::mt19937 rng(104);
  std::normal_distribution<float> normal;
  const int64_t top_k = 2048, chunk = kDsaTopKChunk;
  const std::vector<int32_t> token_ctx = {4 * 8192 + 1, 4 * 8192 + 3000};
  const int64_t T = static_cast<int64_t>(token_ctx.size()), max_ctx = token_ctx.back();
  ASSERT_TRUE(chunk >= 2 * top_k && max_ctx >= 4 * chunk) << "the shapes DsaTopKCandidateBytes takes in two stages";
  for (const bool ties : {false, true}) {
    SCOPED_TRACE(ties ? "few values" : "random");
    std::vector<float> scores(static_cast<size_t>(T * max_ctx));
    for (float& s : scores) s = ties ? static_cast<float>(static_cast<int>(rng() % 64)) : normal(rng);
    const std::vector<int32_t> token_seq(static_cast<size_t>(T), 0);
    BatchRef batch{token_seq.data(), token_ctx.data(), nullptr, nullptr, nullptr, T, max_ctx};
    std::vector<int32_t> one(static_cast<size_t>(T * top_k), -5), two(one);
    int32_t err = 0;
    emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, sel::kSelectThreads, 0,
                       [&] { kvk::DsaTopKKernel(batch, top_k, scores.data(), one.data(), top_k, &err); });
    const int64_t ld = kvk::DsaCandidates(max_ctx, top_k, chunk);
    std::vector<uint32_t> keys(static_cast<size_t>(T * ld), 0xdeadbeefu);
    std::vector<int32_t> pos(static_cast<size_t>(T * ld), -7);
    emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, static_cast<int>(chunk)), 1}, sel::kSelectThreads,
                       0, [&] { kvk::DsaTopKChunkKernel(batch, top_k, chunk, scores.data(), keys.data(), pos.data(), ld); });
    emulation::RunGrid({static_cast<unsigned>(T), 1, 1}, sel::kSelectThreads, 0, [&] {
      kvk::DsaTopKMergeKernel(batch, top_k, chunk, keys.data(), pos.data(), ld, two.data(), top_k, &err);
    });
    EXPECT_EQ(err, 0);
    for (int64_t t = 0; t < T; ++t) {
      const float* sc = scores.data() + t * max_ctx;
      std::vector<int32_t> want(static_cast<size_t>(token_ctx[t]));
      std::iota(want.begin(), want.end(), 0);
      std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return sc[a] > sc[b]; });
      want.resize(static_cast<size_t>(top_k));
      std::sort(want.begin(), want.end());
      EXPECT_EQ(std::vector<int32_t>(one.begin() + t * top_k, one.begin() + (t + 1) * top_k), want) << "token " << t;
      EXPECT_EQ(std::vector<int32_t>(two.begin() + t * top_k, two.begin() + (t + 1) * top_k), want) << "token " << t;
    }
  }
}

TEST(KvKernelsEmulated, DsaScoresAreOneFmaChainPerHead) {
  std::mt19937 rng(102);
  for (const DsaScores form : {DsaScores::kThread, DsaScores::kStaged, DsaScores::kTiled}) {
    CheckDsaScores(form, 3, 12, 9, 13, false, rng);
    CheckDsaScores(form, 5, 7, 9, 13, false, rng);
    CheckDsaScores(form, 3, 12, 150, 270, false, rng);  // several blocks of positions
    CheckDsaScores(form, 2, 7, 40, 140, true, rng);
  }
  // The tiled kernel's shapes: GLM-5's 32 heads of 128 (two positions a thread, four chunks of
  // columns, several blocks of 256 positions), 64 heads (one position a thread), heads that leave
  // part of a tile unused (17 of 32), a head dimension with a partial chunk (40), 16 heads over
  // several blocks of 512 positions, and a page out of range within a tile.
  CheckDsaScores(DsaScores::kTiled, 32, 128, 300, 517, false, rng);
  CheckDsaScores(DsaScores::kTiled, 64, 40, 100, 270, false, rng);
  CheckDsaScores(DsaScores::kTiled, 17, 40, 9, 300, true, rng);
  CheckDsaScores(DsaScores::kTiled, 16, 33, 513, 1100, true, rng);
  // A key from column 64: the BF16 rope segment's 16 columns, then the index key's FP8 tiles (a
  // warp's lanes over both segments), with fresh rows too.
  CheckDsaScores(DsaScores::kTiled, 32, 80, 150, 300, false, rng, false, false, 1, 64);
  CheckDsaScores(DsaScores::kTiled, 17, 80, 40, 140, true, rng, /*fresh=*/true, false, 1, 64);
  for (const DsaScores form : {DsaScores::kThread, DsaScores::kStaged, DsaScores::kTiled}) {
    CheckDsaScores(form, 32, 40, 300, 517, false, rng, /*fresh=*/true);
  }
  // One position a thread (a pass of few blocks): 32 and 16 heads, several blocks of 128
  // positions, a partial chunk, fresh rows and a page out of range.
  CheckDsaScores(DsaScores::kTiled, 32, 40, 300, 517, false, rng, /*fresh=*/true, /*few_blocks=*/true);
  CheckDsaScores(DsaScores::kTiled, 32, 128, 100, 270, true, rng, /*fresh=*/false, /*few_blocks=*/true);
  CheckDsaScores(DsaScores::kTiled, 12, 33, 9, 300, true, rng, /*fresh=*/false, /*few_blocks=*/true);
}

// The tensor-core scores (DsaScoreMmaKernel) over each codec's rows, bit for bit against their
// arithmetic written out (MmaScore): GLM-5's 32 heads of 128 (the tiled codec's index key in two
// tiles of 64: two scale groups), 64 heads over a partial 16-column step (40), heads that leave
// part of an m16 tile unused (17, 12) with a page out of range, an odd head dimension (33: a
// pair of columns half past it), and the phase policy's fresh rows.
TEST(KvKernelsEmulated, DsaScoresOnTheTensorCores) {
  std::mt19937 rng(104);
  // Blocks of several tiles of positions: 3 over 5 tiles (the second block's last tile past the
  // context), 2, 4 (one block for every tile).
  CheckDsaScores(DsaScores::kTensorCores, 32, 128, 300, 517, false, rng, false, false, 3);
  CheckDsaScores(DsaScores::kTensorCores, 64, 40, 100, 270, false, rng, false, false, 2);
  CheckDsaScores(DsaScores::kTensorCores, 17, 40, 9, 300, true, rng);
  CheckDsaScores(DsaScores::kTensorCores, 12, 33, 150, 140, true, rng, false, false, 4);
  CheckDsaScores(DsaScores::kTensorCores, 32, 40, 300, 517, false, rng, /*fresh=*/true, false, 3);
  // A key from column 64: a BF16 group (the rope segment) before the FP8 tiles; heads of 48 (kp
  // 48: two heads' columns over the threads at a time) and of 80.
  CheckDsaScores(DsaScores::kTensorCores, 32, 48, 150, 300, false, rng, false, false, 2, 64);
  CheckDsaScores(DsaScores::kTensorCores, 20, 80, 40, 140, true, rng, /*fresh=*/true, false, 1, 64);
  // A head dimension past the block's threads (kp 144: a head's columns over them in turns).
  CheckDsaScores(DsaScores::kTensorCores, 16, 144, 40, 140, false, rng);
}

// A token whose context runs past the scores' bound (max_ctx; the top-k then reports the page
// error) is scored up to the bound and no further: every score kernel leaves the next token's
// row, and the memory past the last row, alone.
TEST(KvKernelsEmulated, DsaScoresStopAtTheBound) {
  std::mt19937 rng(106);
  std::normal_distribution<float> normal;
  const int64_t page_size = 16, layer = 1, heads = 32, hd = 16, key_offset = 80, top_k = 4, max_ctx = 200;
  const int64_t num_pages = 20;
  Cache cache(kKvCodecBf16, num_pages, page_size, 0, hd);
  for (int64_t p = 0; p < num_pages * page_size; ++p) {
    std::vector<float> x(static_cast<size_t>(cache.layout.width));
    for (float& e : x) e = normal(rng);
    cache.codec->EncodeRow(cache.layout, x.data(), 1.0f, const_cast<uint8_t*>(cache.Row(layer, static_cast<int32_t>(p))));
  }
  // Token 0 past the bound (260 positions), token 1 within top_k (not scored), token 2 past it
  // again (the last row).
  const std::vector<int32_t> token_seq = {0, 0, 0}, token_ctx = {260, 3, 300}, page_start = {0, num_pages};
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  const int64_t T = 3;
  std::vector<float> q(static_cast<size_t>(T * heads * hd)), w(static_cast<size_t>(T * heads));
  for (float& e : q) e = normal(rng);
  for (float& e : w) e = std::fabs(normal(rng));
  const BatchRef batch{token_seq.data(), token_ctx.data(), page_start.data(), page_ids.data(), nullptr, T, max_ctx};
  const ConstMat qm{q.data(), T, heads * hd, heads * hd}, wm{w.data(), T, heads, heads};
  dsa::KeyGroups groups;
  ASSERT_TRUE(dsa::MakeKeyGroups(cache.ref.row, key_offset, hd, &groups));
  for (const DsaScores form : {DsaScores::kThread, DsaScores::kStaged, DsaScores::kTiled, DsaScores::kTensorCores}) {
    SCOPED_TRACE(static_cast<int>(form));
    std::vector<float> scores(static_cast<size_t>(T * max_ctx + 256), -3.0f);
    int32_t err = 0;
    float* out = scores.data();
    switch (form) {
      case DsaScores::kThread:
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, 128), 1}, 128, 0, [&] {
          kvk::DsaScoreKernel(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, 0.25f, top_k, out, &err);
        });
        break;
      case DsaScores::kStaged:
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, kvk::kDsaPositions), 1}, kvk::kDsaPositions,
                           static_cast<size_t>(kvk::DsaStagedBytes(heads, hd)), [&] {
                             kvk::DsaScoreStagedKernel(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, 0.25f,
                                                       top_k, out, &err);
                           });
        break;
      case DsaScores::kTiled:
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, kvk::DsaTilePositions(32)), 1},
                           kvk::kDsaTileThreads, static_cast<size_t>(kvk::DsaTiledBytes(32)), [&] {
                             kvk::DsaScoreTiledKernel<32>(qm, wm, cache.ref, layer, batch, heads, hd, key_offset,
                                                          0.25f, top_k, out, &err);
                           });
        break;
      case DsaScores::kTensorCores:
        // (Two tiles a block: the block's second tile runs past the bound.)
        emulation::RunGrid({static_cast<unsigned>(T), BlocksFor(max_ctx, 2 * dsa::kMmaPositions), 1}, dsa::kMmaThreads,
                           static_cast<size_t>(dsa::DsaMmaBytes(2, hd)), [&] {
                             dsa::DsaScoreMmaKernel<2>(qm, wm, cache.ref, layer, batch, heads, hd, key_offset, 0.25f,
                                                       top_k, groups, 2, out, &err);
                           });
        break;
    }
    EXPECT_EQ(err, 0);
    for (int64_t p = 0; p < max_ctx; ++p) {
      EXPECT_NE(scores[p], -3.0f) << "token 0 position " << p << " not scored";
      EXPECT_EQ(scores[max_ctx + p], -3.0f) << "token 1 position " << p << " written";
      EXPECT_NE(scores[2 * max_ctx + p], -3.0f) << "token 2 position " << p << " not scored";
    }
    for (int64_t i = T * max_ctx; i < static_cast<int64_t>(scores.size()); ++i) {
      EXPECT_EQ(scores[i], -3.0f) << "written past the last row at " << i - T * max_ctx;
    }
  }
}

// The query's three bfloat16 parts sum to it exactly (normal values of every binade from 2^-100
// to the top of float32's range, both signs; values that round past bfloat16's largest finite
// value take it as their top part), an infinity or NaN is the top part alone, and zeros stay
// zeros.
TEST(KvKernelsEmulated, QueryPartsSumToTheQuery) {
  std::mt19937 rng(105);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  const auto check = [](float v) {
    uint16_t p[3];
    dsa::SplitBf16x3(v, &p[0], &p[1], &p[2]);
    const float a = Bf16ToF32(p[0]), b = Bf16ToF32(p[1]), c = Bf16ToF32(p[2]);
    EXPECT_EQ((c + b) + a, v) << v;  // the sum in float32, smallest part first ...
    EXPECT_EQ(static_cast<double>(a) + b + c, static_cast<double>(v)) << v;  // ... and exactly
    EXPECT_TRUE(std::isfinite(a) && std::isfinite(b) && std::isfinite(c)) << v;
  };
  for (int e = -100; e <= 127; ++e) {
    for (int i = 0; i < 40; ++i) {
      const float v = std::ldexp(mant(rng), e);
      check(v);
      check(-v);
    }
  }
  for (const float v : {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 3.3961e38f, 3.3895e38f,
                        1.0f + 0x1p-23f, 0x1.fffffep-1f, 0x1p-100f}) {
    check(v);
  }
  for (const float v : {INFINITY, -INFINITY, NAN}) {
    uint16_t p[3];
    dsa::SplitBf16x3(v, &p[0], &p[1], &p[2]);
    EXPECT_EQ(p[0], F32ToBf16(v)) << v;
    EXPECT_EQ(p[1], 0) << v;
    EXPECT_EQ(p[2], 0) << v;
  }
  uint16_t p[3];
  dsa::SplitBf16x3(0.0f, &p[0], &p[1], &p[2]);
  EXPECT_EQ(p[0] | p[1] | p[2], 0);
}

// Tiles a block of the tensor-core scores takes (132 multiprocessors, an H100's): one where the
// pass has fewer than 8 blocks a multiprocessor (decode of a session at 128K positions: 1,024
// tiles), more where it has more (64 sessions at 32K: 16,384 tiles; a 4,096-token prefill:
// 131,072), at most 8; a device count of 0 read as 1.
TEST(KvKernelsEmulated, DsaMmaTilesPerBlockLeaveWavesOfBlocks) {
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(1, 131072, 132), 1);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(16, 8192, 132), 1);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(8, 32768, 132), 1);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(16, 65536, 132), 7);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(64, 32768, 132), 8);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(4096, 4096, 132), 8);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(4096, 4096, 0), 8);
  EXPECT_EQ(dsa::DsaMmaTilesPerBlock(1, 100, 132), 1);
}

// The key's scale groups the tensor-core kernel takes: flat BF16 and FP8 rows (one group: scale
// 1, the layer's), the tiled codec's tiles where each is a whole number of 16-column steps (the
// last may be partial), and not F32 rows, tiles of 5, a key past the row, or more than 256
// columns.
TEST(KvKernelsEmulated, DsaKeyGroupsForTheTensorCores) {
  const KvCodec* bf16 = FindKvCodec(kKvCodecBf16);
  const KvCodec* fp8 = FindKvCodec(kKvCodecFp8);
  const KvCodec* tiled = FindKvCodec(kKvCodecFp8Tiled);
  const KvCodec* f32 = FindKvCodec(kKvCodecF32);
  dsa::KeyGroups g;
  const KvRowLayout wide = tiled->Layout(Shape(136));  // index key at 80: tiles of 64 (64, 64, 8)
  ASSERT_TRUE(dsa::MakeKeyGroups(RowRefOf(*tiled, wide), 80, 136, &g));
  ASSERT_EQ(g.count, 3);
  // The row: the latent's 64 codes, the rope's 16 BF16 values (bytes 64 .. 95), the index
  // key's codes from byte 96; the latent's 2 tile scales, then the index key's.
  EXPECT_EQ(g.offset[0], 96);
  EXPECT_EQ(g.scale[0], 2);
  EXPECT_EQ(g.end[0], 64);
  EXPECT_EQ(g.end[1], 128);
  EXPECT_EQ(g.end[2], 136);
  EXPECT_EQ(g.bf16[0], 0);
  EXPECT_EQ(g.scale[1], g.scale[0] + 1);
  EXPECT_EQ(g.offset[1], g.offset[0] + 64);
  // The rope key and the index key together: a BF16 group of 16, then the tiles.
  ASSERT_TRUE(dsa::MakeKeyGroups(RowRefOf(*tiled, wide), 64, 80, &g));
  ASSERT_EQ(g.count, 2);
  EXPECT_EQ(g.end[0], 16);
  EXPECT_EQ(g.bf16[0], 1);
  EXPECT_EQ(g.offset[0], 64);
  EXPECT_EQ(g.scale[0], -2);
  EXPECT_EQ(g.end[1], 80);
  EXPECT_EQ(g.offset[1], 96);
  EXPECT_EQ(g.scale[1], 2);
  // A key that starts inside a tile: its first group ends at the tile's end.
  ASSERT_TRUE(dsa::MakeKeyGroups(RowRefOf(*tiled, wide), 96, 64, &g));
  ASSERT_EQ(g.count, 2);
  EXPECT_EQ(g.end[0], 48);
  EXPECT_EQ(g.offset[0], 96 + 16);
  EXPECT_EQ(g.scale[0], 2);
  EXPECT_EQ(g.end[1], 64);
  EXPECT_EQ(g.offset[1], 96 + 64);
  EXPECT_EQ(g.scale[1], 3);
  EXPECT_FALSE(dsa::MakeKeyGroups(RowRefOf(*tiled, wide), 88, 64, &g)) << "a tile boundary 56 columns in";
  const KvRowLayout narrow = tiled->Layout(Shape(12));  // tiles of 5
  EXPECT_FALSE(dsa::MakeKeyGroups(RowRefOf(*tiled, narrow), 80, 12, &g));
  EXPECT_FALSE(dsa::MakeKeyGroups(RowRefOf(*tiled, wide), 80, 137, &g)) << "past the row";
  const KvRowLayout flat = bf16->Layout(Shape(12));
  ASSERT_TRUE(dsa::MakeKeyGroups(RowRefOf(*bf16, flat), 80, 12, &g));
  EXPECT_EQ(g.count, 1);
  EXPECT_EQ(g.offset[0], 160);
  EXPECT_EQ(g.scale[0], -2);
  ASSERT_TRUE(dsa::MakeKeyGroups(RowRefOf(*fp8, fp8->Layout(Shape(12))), 80, 12, &g));
  EXPECT_EQ(g.offset[0], 80);
  EXPECT_EQ(g.scale[0], -1);
  EXPECT_FALSE(dsa::MakeKeyGroups(RowRefOf(*f32, f32->Layout(Shape(12))), 80, 12, &g));
  EXPECT_FALSE(dsa::MakeKeyGroups(RowRefOf(*bf16, flat), 0, 257, &g));
}

}  // namespace
}  // namespace llmrt::cuda
