// The flat codecs: every value of a row in one element type. F32 and BF16 store values as they
// are; FP8 stores e4m3(x / scale) with one float32 scale per layer (the checkpoint's k_scale,
// else calibrated on the first rows the layer writes: largest magnitude with 2x headroom, so
// later tokens up to twice as large are stored without saturating).
#include <cstring>

#include "src/quant/codecs/builtin.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"

namespace llmrt::codecs {
namespace {

KvRowLayout FlatLayout(const KvShape& shape, DType dtype) {
  KvRowLayout l;
  l.width = shape.width();
  l.row_bytes = l.width * static_cast<int64_t>(DTypeSize(dtype));
  return l;
}

class F32Codec final : public KvCodec {
 public:
  uint32_t id() const override { return kKvCodecF32; }
  const char* name() const override { return "F32"; }
  DType dtype() const override { return DType::kF32; }
  KvScaleKind scale_kind() const override { return KvScaleKind::kNone; }
  KvRowLayout Layout(const KvShape& s) const override { return FlatLayout(s, DType::kF32); }
  void EncodeRow(const KvRowLayout& l, const float* x, float, uint8_t* row) const override {
    std::memcpy(row, x, static_cast<size_t>(l.width) * sizeof(float));
  }
  void DecodeRow(const KvRowLayout& l, const uint8_t* row, float, float* x) const override {
    std::memcpy(x, row, static_cast<size_t>(l.width) * sizeof(float));
  }
};

class Bf16Codec final : public KvCodec {
 public:
  uint32_t id() const override { return kKvCodecBf16; }
  const char* name() const override { return "BF16"; }
  DType dtype() const override { return DType::kBF16; }
  KvScaleKind scale_kind() const override { return KvScaleKind::kNone; }
  KvRowLayout Layout(const KvShape& s) const override { return FlatLayout(s, DType::kBF16); }
  void EncodeRow(const KvRowLayout& l, const float* x, float, uint8_t* row) const override {
    F32ToBf16Array(x, reinterpret_cast<uint16_t*>(row), static_cast<size_t>(l.width));
  }
  void DecodeRow(const KvRowLayout& l, const uint8_t* row, float, float* x) const override {
    for (int64_t i = 0; i < l.width; ++i) {
      uint16_t b;
      std::memcpy(&b, row + 2 * i, sizeof(b));
      x[i] = Bf16ToF32(b);
    }
  }
};

// Headroom of a calibrated scale over the calibration rows' largest magnitude.
constexpr float kFp8Headroom = 2.0f;

class Fp8Codec final : public KvCodec {
 public:
  uint32_t id() const override { return kKvCodecFp8; }
  const char* name() const override { return "FP8 e4m3 (scale per layer)"; }
  DType dtype() const override { return DType::kF8E4M3; }
  KvScaleKind scale_kind() const override { return KvScaleKind::kPerLayer; }
  KvRowLayout Layout(const KvShape& s) const override { return FlatLayout(s, DType::kF8E4M3); }
  void EncodeRow(const KvRowLayout& l, const float* x, float scale, uint8_t* row) const override {
    const float inv = 1.0f / scale;
    for (int64_t i = 0; i < l.width; ++i) row[i] = Fp8E4M3::FromFloat(x[i] * inv);
  }
  void DecodeRow(const KvRowLayout& l, const uint8_t* row, float scale, float* x) const override {
    const float* table = Fp8E4M3::DecodeTable();
    for (int64_t i = 0; i < l.width; ++i) x[i] = table[row[i]] * scale;
  }
  float CalibratedScale(float amax) const override {
    return amax > 0.0f ? amax * kFp8Headroom / Fp8E4M3::kMax : 1.0f;
  }
};

}  // namespace

const KvCodec& F32() {
  static const F32Codec c;
  return c;
}
const KvCodec& Bf16() {
  static const Bf16Codec c;
  return c;
}
const KvCodec& Fp8() {
  static const Fp8Codec c;
  return c;
}

}  // namespace llmrt::codecs
