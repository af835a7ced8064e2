// Weight formats as a traits table: everything llmrt knows about one way of storing a matrix is
// one row of this table (name, checkpoint loader, scalar dequantization reference, resident
// bytes, optional quantize-at-load), looked up by a small id, never switched on. Backends
// register their matmul kernels per format id; a backend without a kernel for a format refuses
// it at load (LLM_ERR_UNSUPPORTED). Adding a format is one file defining its traits plus one
// RegisterWeightFormat call.
#ifndef LLMRT_QUANT_WEIGHT_FORMAT_H_
#define LLMRT_QUANT_WEIGHT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/quant/quant_config.h"
#include "src/util/dtype.h"
#include "src/util/safetensors.h"

namespace llmrt {

using WeightFormatId = uint8_t;
// The built-in formats. Their ids are stable: runtime info reports resident bytes per built-in.
inline constexpr WeightFormatId kWeightF32 = 0;
inline constexpr WeightFormatId kWeightBf16 = 1;
inline constexpr WeightFormatId kWeightFp8Block = 2;   // e4m3 codes, float32 scales per block
inline constexpr WeightFormatId kWeightInt4Group = 3;  // packed int4, bfloat16 scales per group
inline constexpr int kMaxWeightFormats = 32;

// Layout constants a format reads from the checkpoint's quantization_config.
struct WeightParams {
  int64_t block_rows = 0, block_cols = 0;  // FP8 block scales
  int64_t group = 0;                       // INT4 group scales
};

// Host memory of one stored array and what keeps it alive (the checkpoint's mmap, or a buffer
// made at load).
struct HostArray {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  DType dtype = DType::kU8;  // element type a backend sees
  std::vector<int64_t> shape;
  std::shared_ptr<Storage> keepalive;
  bool defined() const { return data != nullptr || bytes == 0; }
};

// Host bytes owned by llmrt (weights made at load: dequantized or quantized copies).
class HostBuffer final : public Storage {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {}
  uint8_t* data() { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<uint8_t> bytes_;
};
// A HostArray over a new zeroed buffer of `shape` elements of `dtype`.
HostArray NewHostArray(DType dtype, std::vector<int64_t> shape);

// A [rows, cols] matrix as a format stores it, in host memory.
struct StoredMatrix {
  WeightFormatId format = kWeightBf16;
  int64_t rows = 0, cols = 0;
  WeightParams params;
  HostArray codes;
  HostArray scales;  // unquantized formats: none
};

// The raw bytes of a matrix of some format (host memory): what the scalar references and CPU
// kernels read.
struct MatrixBytes {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0, cols = 0;
  WeightParams params;
};

// A checkpoint's tensors by name (src/model/checkpoint.h implements it).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // nullptr when absent.
  virtual const TensorInfo* Find(const std::string& name) const = 0;
  virtual const QuantConfig& quant_config() const = 0;
  // Names the source in messages (the checkpoint directory).
  virtual const std::string& where() const = 0;
};

struct WeightFormatTraits {
  WeightFormatId id = 0;
  const char* name = "";  // "BF16", "FP8 e4m3 block-scaled", ...
  bool quantized = false;
  // Bytes of codes plus scales of a [rows, cols] matrix.
  uint64_t (*resident_bytes)(int64_t rows, int64_t cols, const WeightParams& p) = nullptr;
  // Scalar reference: row `row` in float32 (what kernels are tested against).
  void (*dequantize_row)(const MatrixBytes& m, int64_t row, float* out) = nullptr;
  // Recognizes the checkpoint matrix `name` ("<stem>weight", [rows, cols]) stored in this format:
  // nullopt when the checkpoint does not store it this way, an error (naming the tensor) when it
  // does but inconsistently. Appends the checkpoint tensors it read to *used.
  absl::StatusOr<std::optional<StoredMatrix>> (*load)(const TensorSource& src, const std::string& name,
                                                      int64_t rows, int64_t cols,
                                                      std::vector<std::string>* used) = nullptr;
  // Quantize at load from float32 rows [rows, cols] with `p`; nullptr when the format cannot be
  // produced at load.
  absl::StatusOr<StoredMatrix> (*quantize)(const float* w, int64_t rows, int64_t cols,
                                           const WeightParams& p) = nullptr;
  // The sub-matrix rows [r0, r0 + nr) x columns [c0, c0 + nc) of m, for tensor parallelism: a
  // view of m's bytes when it is a row range of whole rows, a copy of only the slice otherwise.
  // FailedPrecondition naming the bounds and the block or group size when they do not fall on
  // the format's block or group boundaries. nullptr: the format cannot be sharded.
  absl::StatusOr<StoredMatrix> (*slice)(const StoredMatrix& m, int64_t r0, int64_t nr, int64_t c0,
                                        int64_t nc) = nullptr;
};

// The rows [r0, r0 + nr) and byte columns [b0, b0 + nb) of a, a row-major array of `row_bytes`
// bytes per row, as an array of `shape`: a view when whole rows are taken, else a copy.
HostArray SliceHostArray(const HostArray& a, int64_t row_bytes, int64_t r0, int64_t nr, int64_t b0, int64_t nb,
                         std::vector<int64_t> shape);

// The traits of a registered format; nullptr when none has that id.
const WeightFormatTraits* FindWeightFormat(WeightFormatId id);
// The traits of a registered format. REQUIRES: registered (an internal invariant).
const WeightFormatTraits& WeightFormatOf(WeightFormatId id);
// Every registered format in registration order (the built-ins first): the order in which
// loaders are asked to recognize a checkpoint matrix.
std::vector<const WeightFormatTraits*> WeightFormats();
// Adds a format. InvalidArgument when the id is taken or out of range, or a required entry is
// missing. Thread-safe.
absl::Status RegisterWeightFormat(const WeightFormatTraits& traits);

// Row `row` of m in float32 through its format's reference.
void DequantizeRowReference(WeightFormatId format, const MatrixBytes& m, int64_t row, float* out);

}  // namespace llmrt

#endif  // LLMRT_QUANT_WEIGHT_FORMAT_H_
