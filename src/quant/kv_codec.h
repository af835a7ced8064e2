// KV codecs: how one token's cached row (MLA's latent and rope key, GQA's keys and values) is
// stored in a KV page and read back. A model describes its row as a KvShape (a list of parts);
// a codec turns that into a byte layout, encodes and decodes rows (scalar references the backend
// kernels are tested against), and says where its scales come from. Codecs are looked up by a
// stable id (KV exports carry it), never switched on; adding one is one file defining it plus
// one RegisterKvCodec call.
#ifndef LLMRT_QUANT_KV_CODEC_H_
#define LLMRT_QUANT_KV_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/util/dtype.h"

namespace llmrt {

// A run of values of a cached row, as the model describes it.
struct KvPart {
  int64_t count = 0;
  int64_t tile = 128;           // values per scale for codecs that scale per tile (a head's width
                                // for per-head keys and values)
  bool keep_precision = false;  // quantizing codecs keep it in BF16 (MLA's rope key)
};

// What a model caches per token per layer.
struct KvShape {
  int64_t num_layers = 0;
  std::vector<KvPart> parts;
  int64_t width() const;  // values per row: the parts' counts summed
};

// One segment of a row layout: values [start, start + count) stored from byte_offset, either as
// BF16 or as FP8 codes with one float32 scale per `tile` values (scales from first_scale on).
struct KvSegment {
  int64_t start = 0, count = 0;
  bool bf16 = false;
  int64_t tile = 128;
  int64_t byte_offset = 0;
  int64_t first_scale = 0;
};

// The bytes of one row. Flat codecs store `width` elements of the codec's dtype (segments
// empty); mixed codecs store each segment's codes in order, then every tile scale (float32).
struct KvRowLayout {
  int64_t width = 0;
  int64_t row_bytes = 0;
  int64_t scale_offset = 0;        // mixed: byte offset of the float32 tile scales
  std::vector<KvSegment> segments;  // mixed rows only
  bool mixed() const { return !segments.empty(); }
};

// Where a codec's scales come from.
enum class KvScaleKind {
  kNone,      // values stored as they are (F32, BF16)
  kPerLayer,  // one float32 scale per layer: the checkpoint's k_scale, else calibrated explicitly
  kPerTile,   // each row carries its own tile scales
};

class KvCodec {
 public:
  virtual ~KvCodec() = default;
  // Stable id (KV exports carry it): 0 F32, 1 BF16, 2 FP8 per-layer, 3 FP8 per-tile.
  virtual uint32_t id() const = 0;
  virtual const char* name() const = 0;
  // Element type of a flat row; mixed rows are bytes (U8).
  virtual DType dtype() const = 0;
  virtual KvScaleKind scale_kind() const = 0;
  // True when reading a stored row loses precision (the FP8 phase policy applies).
  bool lossy() const { return scale_kind() != KvScaleKind::kNone; }
  virtual KvRowLayout Layout(const KvShape& shape) const = 0;
  // Scalar references: one row of layout.width values to and from its bytes. layer_scale is
  // the layer's scale for kPerLayer codecs (stored = x / scale), ignored otherwise.
  virtual void EncodeRow(const KvRowLayout& l, const float* x, float layer_scale, uint8_t* row) const = 0;
  virtual void DecodeRow(const KvRowLayout& l, const uint8_t* row, float layer_scale, float* x) const = 0;
  // kPerLayer: the scale calibrated on values whose largest magnitude is amax.
  virtual float CalibratedScale(float amax) const { return 1.0f; }
};

// The built-in codecs' ids.
inline constexpr uint32_t kKvCodecF32 = 0;
inline constexpr uint32_t kKvCodecBf16 = 1;
inline constexpr uint32_t kKvCodecFp8 = 2;
inline constexpr uint32_t kKvCodecFp8Tiled = 3;

// A registered codec by id; nullptr when none.
const KvCodec* FindKvCodec(uint32_t id);
// Adds a codec (the registry keeps the pointer: it must live for the process). InvalidArgument
// when the id is taken. Thread-safe.
absl::Status RegisterKvCodec(const KvCodec* codec);

// Largest magnitude below which the per-layer FP8 codec accepts a scale from a checkpoint or a
// trusted KV import, and above which from nowhere: scales outside [kMinKvScale, kMaxKvScale]
// would flush every stored value to zero or overflow float32 on decode.
inline constexpr float kMinKvScale = 1e-12f;
inline constexpr float kMaxKvScale = 1e12f;

}  // namespace llmrt

#endif  // LLMRT_QUANT_KV_CODEC_H_
