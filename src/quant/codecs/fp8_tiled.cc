// The tiled FP8 codec: values in e4m3 with one float32 scale per tile of each row (the tile's
// largest magnitude / 448), except parts the model marks keep_precision (MLA's rope key), which
// stay BF16. Row bytes: each segment's codes in order, then every tile scale (aligned). For Kimi K2 (512
// latent values in 4 tiles, 64 rope values) that is 512 + 128 + 16 = 656 bytes per token per
// layer. Scales live in the rows, so no layer state is shared between sessions.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/quant/codecs/builtin.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"

namespace llmrt::codecs {
namespace {

class Fp8TiledCodec final : public KvCodec {
 public:
  uint32_t id() const override { return kKvCodecFp8Tiled; }
  const char* name() const override { return "FP8 e4m3 (scale per 128-value tile)"; }
  DType dtype() const override { return DType::kU8; }
  KvScaleKind scale_kind() const override { return KvScaleKind::kPerTile; }

  KvRowLayout Layout(const KvShape& shape) const override {
    KvRowLayout l;
    int64_t start = 0;
    for (const KvPart& p : shape.parts) {
      KvSegment s;
      s.start = start;
      s.count = p.count;
      s.bf16 = p.keep_precision;
      s.tile = p.keep_precision ? 0 : p.tile;
      l.segments.push_back(s);
      start += p.count;
    }
    l.width = start;
    // BF16 values start on an even byte and the float32 scales on a multiple of four (rows are
    // then multiples of four bytes), so every load is aligned; the released models' shapes need
    // no padding.
    int64_t bytes = 0, scales = 0;
    for (KvSegment& s : l.segments) {
      if (s.bf16) bytes = (bytes + 1) / 2 * 2;
      s.byte_offset = bytes;
      bytes += s.bf16 ? 2 * s.count : s.count;
      if (!s.bf16) {
        s.first_scale = scales;
        scales += (s.count + s.tile - 1) / s.tile;
      }
    }
    l.scale_offset = (bytes + 3) / 4 * 4;
    l.row_bytes = l.scale_offset + 4 * scales;
    return l;
  }

  void EncodeRow(const KvRowLayout& l, const float* x, float, uint8_t* row) const override {
    for (const KvSegment& s : l.segments) {
      if (s.bf16) {
        for (int64_t i = 0; i < s.count; ++i) {
          const uint16_t b = F32ToBf16(x[s.start + i]);
          std::memcpy(row + s.byte_offset + 2 * i, &b, sizeof(b));
        }
        continue;
      }
      for (int64_t t0 = 0, k = 0; t0 < s.count; t0 += s.tile, ++k) {
        const int64_t n = std::min(s.tile, s.count - t0);
        float amax = 0.0f;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[s.start + t0 + i]));
        const float scale = amax > 0.0f ? amax / Fp8E4M3::kMax : 1.0f;
        std::memcpy(row + l.scale_offset + 4 * (s.first_scale + k), &scale, sizeof(scale));
        const float inv = 1.0f / scale;
        for (int64_t i = 0; i < n; ++i) row[s.byte_offset + t0 + i] = Fp8E4M3::FromFloat(x[s.start + t0 + i] * inv);
      }
    }
  }

  void DecodeRow(const KvRowLayout& l, const uint8_t* row, float, float* x) const override {
    for (const KvSegment& s : l.segments) {
      if (s.bf16) {
        for (int64_t i = 0; i < s.count; ++i) {
          uint16_t b;
          std::memcpy(&b, row + s.byte_offset + 2 * i, sizeof(b));
          x[s.start + i] = Bf16ToF32(b);
        }
        continue;
      }
      for (int64_t i = 0; i < s.count; ++i) {
        float scale;
        std::memcpy(&scale, row + l.scale_offset + 4 * (s.first_scale + i / s.tile), sizeof(scale));
        x[s.start + i] = Fp8E4M3::ToFloat(row[s.byte_offset + i]) * scale;
      }
    }
  }
};

}  // namespace

const KvCodec& Fp8Tiled() {
  static const Fp8TiledCodec c;
  return c;
}

}  // namespace llmrt::codecs
