// safetensors files, memory-mapped: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}} (offsets relative to the data section),
// then the raw little-endian tensor bytes. Every entry is validated at open, before the file is
// mapped: the header is read with a size limit and parsed by a streaming parser that accepts
// only that schema, so its cost is bounded by the header's size whatever the header holds.
#ifndef LLMRT_UTIL_SAFETENSORS_H_
#define LLMRT_UTIL_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/util/dtype.h"

namespace llmrt {

// Limits on safetensors files (the "Limits" paragraph of llm_runtime_create states them).
// The largest header: the reference implementation's own limit (safetensors' MAX_HEADER_SIZE).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Tensors in one file, and in a whole checkpoint [about 220,000 for Kimi K2-Thinking's INT4].
inline constexpr int64_t kMaxCheckpointTensors = int64_t{1} << 20;
// Dimensions of one tensor [5, a video patch embedding], and its elements (2^48: 256 TiB of U8).
inline constexpr int kMaxTensorRank = 8;
inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 48;

// A read-only memory mapping of a whole file; unmapped when the last reference goes.
class MappedFile final : public Storage {
 public:
  static absl::StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);
  // Maps `size` bytes of the open regular file `fd` (not closed here); `path` names it.
  static absl::StatusOr<std::shared_ptr<MappedFile>> Map(int fd, uint64_t size, const std::string& path);
  ~MappedFile() override;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct TensorInfo {
  std::string name;
  std::string dtype_name;     // as written in the header ("BF16", "F8_E4M3", ...)
  std::optional<DType> dtype;  // empty for dtypes llmrt has no type for
  std::vector<int64_t> shape;
  // Aligned to the element size for every dtype llmrt has a type for (Open refuses others).
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  uint64_t file_offset = 0;  // of the first byte, from the start of the file
  std::shared_ptr<MappedFile> file;
  int64_t numel() const;
};

// Maps a safetensors dtype string to a DType (nullopt when unknown to llmrt); sets
// *element_size for every dtype the format defines (0 for unknown strings).
std::optional<DType> ParseSafetensorsDType(const std::string& s, size_t* element_size);

class SafetensorsFile {
 public:
  // Errors: NotFound when absent; IoError when not a readable regular file; FormatError for a
  // header that is not the safetensors schema or offsets outside the file; OutOfRangeError past
  // the limits above; UnsupportedError for tensor data not aligned to its element size (files
  // written by the safetensors library always are).
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // Moves the entries out (each keeps the mapping alive); tensors() is empty afterwards.
  std::map<std::string, TensorInfo> TakeTensors() { return std::move(tensors_); }
  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
};

// Writes a safetensors file (tests, benchmarks and converters). Tensors are written in the
// given order (fill callbacks run in that order), without gaps, after a header padded to a
// multiple of 8 bytes: each tensor is aligned to its element size when the bytes before it are
// a multiple of that size (as when larger elements come first, the safetensors library's order);
// SafetensorsFile::Open refuses a misaligned tensor.
struct TensorToWrite {
  std::string name;
  std::string dtype;  // safetensors dtype string
  std::vector<int64_t> shape;
  const void* data = nullptr;  // the bytes, or nullptr to have `fill` produce them
  size_t bytes = 0;
  // Produces bytes [begin, begin + n) of the tensor into dst; lets large tensors be written
  // without holding them in memory.
  std::function<void(uint8_t* dst, size_t begin, size_t n)> fill;
};
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace llmrt

#endif  // LLMRT_UTIL_SAFETENSORS_H_
