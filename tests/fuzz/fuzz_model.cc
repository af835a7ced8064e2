// Fuzz targets for model directories: a safetensors header, a shard index and config.json of each
// family, each taken as far as it goes (parse, KV sizing, load, a few decode steps). Seed corpora
// are in tests/fuzz/seeds/<target>/, for example:
//   build-fuzz/tests/fuzz_ModelConfig -max_total_time=300 corpus/ tests/fuzz/seeds/model_config
// (the first directory collects what the run finds; keep it out of the repository).
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "llmrt/llmrt.h"
#include "src/model/checkpoint.h"
#include "src/util/safetensors.h"
#include "tests/fuzz/fuzz_targets.h"

namespace llmrt::fuzz {
namespace {

namespace fs = std::filesystem;

// A directory of this process (fuzzers run several processes side by side), removed at exit.
std::string ModelScratch(const std::string& name) {
  static const fs::path root = [] {
    static fs::path r = fs::temp_directory_path() / ("llmrt_fuzz_model_" + std::to_string(::getpid()));
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(r, ec);
    });
    return r;
  }();
  const std::string d = (root / name).string();
  fs::create_directories(d);
  return d;
}

// Replaces the contents of `path`. Not by truncating to zero first: ext4 flushes a file that is
// truncated and rewritten when it is closed, which would make every execution wait on the disk.
void Write(const std::string& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, static_cast<const char*>(data) + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) std::abort();
  ::close(fd);
}

// Library log lines (the routing assumption, skipped layers) would flood the fuzzer's output.
void Quiet() {
  static const bool once = [] {
    llm_set_log_callback(nullptr, nullptr, LLM_LOG_OFF);
    return true;
  }();
  (void)once;
}

// The size of the data section behind a fuzzed header: offsets up to here are in the file.
constexpr size_t kDataBytes = 4096;

}  // namespace

int SafetensorsHeader(const uint8_t* data, size_t size) {
  static const std::string path = ModelScratch("header") + "/x.safetensors";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((uint64_t{size} >> (8 * i)) & 0xff);
  file.append(reinterpret_cast<const char*>(data), size);
  file.append(kDataBytes, '\x5a');
  Write(path, file.data(), file.size());
  auto f = SafetensorsFile::Open(path);
  if (!f.ok()) return 0;
  // Every accepted entry lies inside the file, is aligned for its type, has a bounded shape
  // whose elements match its bytes.
  volatile uint8_t sink = 0;
  for (const auto& [name, info] : f->tensors()) {
    if (info.shape.size() > static_cast<size_t>(kMaxTensorRank)) std::abort();
    if (info.bytes > 0) sink = sink ^ info.data[0] ^ info.data[info.bytes - 1];
    size_t es = 0;
    ParseSafetensorsDType(info.dtype_name, &es);
    if (es == 0 || static_cast<uint64_t>(info.numel()) * es != info.bytes) std::abort();
    if (info.dtype.has_value() && reinterpret_cast<uintptr_t>(info.data) % es != 0) std::abort();
  }
  return 0;
}

int ShardIndex(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = ModelScratch("index");
    fs::copy_file(std::string(LLMRT_TEST_DATA) + "/tiny_kimi_k2_qlora_yarn/config.json", d + "/config.json",
                  fs::copy_options::overwrite_existing);
    const float a[2] = {1, 2}, b[3] = {3, 4, 5};
    if (!WriteSafetensors(d + "/model-00001-of-00002.safetensors", {{"a", "F32", {2}, a, 8}, {"c", "F32", {1}, a, 4}})
             .ok() ||
        !WriteSafetensors(d + "/model-00002-of-00002.safetensors", {{"b", "F32", {3}, b, 12}}).ok()) {
      std::abort();  // the scratch directory is not writable
    }
    return d;
  }();
  Quiet();
  Write(dir + "/model.safetensors.index.json", data, size);
  auto ck = Checkpoint::Open(dir);
  if (!ck.ok()) return 0;
  // Only tensors the index names, each from the shard it names, readable to its last byte.
  volatile uint8_t sink = 0;
  for (const auto& [name, info] : ck->tensors()) {
    if (name != "a" && name != "b" && name != "c") std::abort();
    if (info.bytes > 0) sink = sink ^ info.data[0] ^ info.data[info.bytes - 1];
  }
  return 0;
}

int ModelConfig(const uint8_t* data, size_t size) {
  // The first byte picks the family whose committed weights sit beside the fuzzed config.json.
  static const char* const kModels[] = {"tiny_kimi_k2_qlora_yarn", "tiny_glm4_moe", "tiny_glm_moe_dsa",
                                        "tiny_kimi_k2_fp8"};
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> v;
    for (const char* m : kModels) {
      const std::string d = ModelScratch(m);
      fs::remove(d + "/model.safetensors");
      fs::create_symlink(std::string(LLMRT_TEST_DATA) + "/" + m + "/model.safetensors", d + "/model.safetensors");
      v.push_back(d);
    }
    return v;
  }();
  if (size == 0) return 0;
  Quiet();
  const std::string& dir = dirs[data[0] % dirs.size()];
  Write(dir + "/config.json", data + 1, size - 1);

  // KV sizing from the config alone: accepted configs never wrap.
  for (int32_t dtype : {LLM_KV_DTYPE_F32, LLM_KV_DTYPE_BF16, LLM_KV_DTYPE_FP8_E4M3, LLM_KV_DTYPE_FP8_E4M3_TILED}) {
    llm_kv_sizing ks;
    ks.struct_size = sizeof(ks);
    const llm_status st = llm_model_kv_sizing(dir.c_str(), dtype, UINT64_MAX, 4096, UINT32_MAX, &ks);
    if (st == LLM_ERR_INTERNAL) std::abort();
    if (st != LLM_OK) return 0;
    if (ks.num_layers == 0 || ks.elements_per_token_layer == 0 || ks.bytes_per_token % ks.num_layers != 0 ||
        ks.bytes_per_token / ks.num_layers < ks.elements_per_token_layer || ks.capacity_tokens % 4096 != 0 ||
        ks.capacity_tokens / 4096 > UINT64_MAX / (ks.bytes_per_token * 4096)) {
      std::abort();  // a wrapped or truncated size
    }
  }
  // Load against the real tensors and, when that works, run a session for a few steps.
  llm_runtime_options o;
  llm_runtime_options_init(&o);
  o.num_threads = 1;
  o.kv_budget_bytes = 1 << 20;
  llm_runtime* rt = nullptr;
  const llm_status st = llm_runtime_create(dir.c_str(), &o, &rt);
  if (st == LLM_ERR_INTERNAL) std::abort();
  if (st != LLM_OK) return 0;
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  llm_session* s = nullptr;
  const int32_t prompt[] = {1, 2, 3};
  if (llm_session_create(rt, nullptr, &s) == LLM_OK && llm_session_append_tokens(s, prompt, 3) == LLM_OK) {
    for (int i = 0; i < 3; ++i) {
      llm_step_result r;
      size_t n = 0;
      const llm_status step = llm_decode_step(rt, &r, 1, &n);
      if (step == LLM_ERR_INTERNAL || (n == 1 && r.status == LLM_ERR_INTERNAL)) std::abort();
      if (n == 1 && r.token != LLM_TOKEN_NONE && (r.token < 0 || static_cast<uint32_t>(r.token) >= info.vocab_size)) {
        std::abort();
      }
      if (step != LLM_OK || n != 1 || r.finish_reason != LLM_FINISH_NONE) break;
    }
  }
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
  return 0;
}

}  // namespace llmrt::fuzz
