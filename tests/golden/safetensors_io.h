// A small safetensors reader and writer for test fixtures, independent of the engine's (so the
// golden tests link only the library they test, and a fixture written here checks the engine's
// reader rather than sharing its bugs). Whole files are read into memory: fixtures are small.
#ifndef LLMRT_TESTS_GOLDEN_SAFETENSORS_IO_H_
#define LLMRT_TESTS_GOLDEN_SAFETENSORS_IO_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt::testing {

struct TensorInfo {
  std::string name;
  std::string dtype_name;  // "BF16", "F32", "F8_E4M3", "I32", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<const std::vector<uint8_t>> file;  // keeps `data` alive
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  std::map<std::string, TensorInfo> tensors_;
};

struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes the tensors in order, data 8-byte aligned.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace llmrt::testing

#endif  // LLMRT_TESTS_GOLDEN_SAFETENSORS_IO_H_
