// Fuzz targets for everything that parses untrusted bytes: safetensors headers and config.json
// here, the tokenizers' files, text and ids in fuzz_tokenizer.cc. Each target must return normally
// (an error status is fine) whatever its input. Built two ways: with clang -fsanitize=fuzzer
// (cmake -DLLMRT_FUZZ=ON, one libFuzzer binary per target) and, in every build, into
// llmrt_fuzz_smoke, which replays mutations of committed seeds (tests/fuzz/smoke_main.cc).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "src/model/config.h"
#include "src/util/safetensors.h"
#include "tests/fuzz/fuzz_targets.h"

namespace llmrt::fuzz {
namespace {

std::string Scratch() {
  static const std::string dir = [] {
    std::string d = (std::filesystem::temp_directory_path() / ("llmrt_fuzz_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                  static_cast<std::streamsize>(size));
}

}  // namespace

int Safetensors(const uint8_t* data, size_t size) {
  const std::string path = Scratch() + "/x.safetensors";
  WriteFile(path, data, size);
  auto f = SafetensorsFile::Open(path);
  if (f.ok()) {
    // Touch every tensor's bytes: the validated offsets must stay inside the mapping.
    volatile uint8_t sink = 0;
    for (const auto& [name, info] : f->tensors()) {
      if (info.bytes > 0) sink = sink ^ info.data[0] ^ info.data[info.bytes - 1];
    }
  }
  return 0;
}

int Config(const uint8_t* data, size_t size) {
  auto c = ParseModelConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (c.ok()) (void)c->KvWidth();
  return 0;
}

}  // namespace llmrt::fuzz
