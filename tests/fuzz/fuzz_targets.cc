// Fuzz targets for everything that parses untrusted bytes: safetensors headers, config.json,
// tokenizer files, and text/ids through the tokenizers. Each target must return normally
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
#include "src/tokenizer/detokenizer.h"
#include "src/tokenizer/tokenizer.h"
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

const Tokenizer* Kimi() {
  static std::unique_ptr<Tokenizer> t = [] {
    auto r = Tokenizer::Load(std::string(LLMRT_TEST_DATA) + "/tokenizers/kimi");
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return t.get();
}
const Tokenizer* Glm() {
  static std::unique_ptr<Tokenizer> t = [] {
    auto r = Tokenizer::Load(std::string(LLMRT_TEST_DATA) + "/tokenizers/glm");
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return t.get();
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

int TokenizerText(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Tokenizer* t : {Kimi(), Glm()}) {
    if (t == nullptr) continue;
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = t->Encode(text, special);
      auto back = Decode(*t, ids, false);
      if (!back.ok()) std::abort();  // ids from Encode are always valid
    }
  }
  return 0;
}

int TokenizerIds(const uint8_t* data, size_t size) {
  const Tokenizer* t = Kimi();
  if (t == nullptr) return 0;
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) - 64);
  (void)Decode(*t, ids, size % 2 == 1);
  IncrementalDetokenizer d(*t, false);
  std::string out;
  for (int32_t id : ids) (void)d.Push(id, &out);
  d.Flush(&out);
  return 0;
}

int TokenizerFiles(const uint8_t* data, size_t size) {
  const std::string dir = Scratch() + "/tok";
  std::filesystem::create_directories(dir);
  // The first byte picks which file the rest becomes.
  if (size == 0) return 0;
  const bool tiktoken = data[0] & 1;
  std::filesystem::remove(dir + "/tiktoken.model");
  std::filesystem::remove(dir + "/tokenizer.json");
  WriteFile(dir + (tiktoken ? "/tiktoken.model" : "/tokenizer.json"), data + 1, size - 1);
  auto t = Tokenizer::Load(dir);
  if (t.ok()) (void)(*t)->Encode("In the beginning <|im_end|> [gMASK]", true);
  return 0;
}

}  // namespace llmrt::fuzz
