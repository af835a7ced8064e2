// safetensors files, memory-mapped: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}} (offsets relative to the data section),
// then the raw little-endian tensor bytes. Every entry is validated at open.
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

// A read-only memory mapping of a whole file; unmapped when the last reference goes.
class MappedFile final : public Storage {
 public:
  static absl::StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);
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
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<MappedFile> file;
  int64_t numel() const;
};

// Maps a safetensors dtype string to a DType (nullopt when unknown to llmrt); sets
// *element_size for every dtype the format defines (0 for unknown strings).
std::optional<DType> ParseSafetensorsDType(const std::string& s, size_t* element_size);

class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
};

// Writes a safetensors file (tests, benchmarks and converters). Tensors are written in the
// given order with 8-byte aligned data offsets.
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
