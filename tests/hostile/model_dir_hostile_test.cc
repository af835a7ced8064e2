// Hostile model directories through the public header: files that are not regular files
// (named as the checkpoint, a shard or the shard index), shard indexes built to cost memory, and
// the symbolic links of the Hugging Face cache layout, which must keep working.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "nlohmann/json.hpp"
#include "tests/hostile/hostile_util.h"

namespace llmrt::hostile {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kData = LLMRT_TEST_DATA;

std::string SafetensorsBytes(const json& header, const std::string& data) {
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{h.size()} >> (8 * i)) & 0xff);
  return out + h + data;
}

// Splits dir/model.safetensors into two shards named as transformers names them plus
// model.safetensors.index.json, and removes the single file.
void Shard(const std::string& dir) {
  const std::string file = ReadFile(dir + "/model.safetensors");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(file[i]);
  const json header = json::parse(file.substr(8, len));
  const std::string data = file.substr(8 + len);
  std::vector<std::string> names;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  auto elem = [&](const std::string& n) {
    const std::string d = header[n]["dtype"];
    return d == "F32" || d == "I32" ? 4 : d == "BF16" || d == "F16" ? 2 : 1;
  };
  json index = {{"metadata", {{"total_size", data.size()}}}, {"weight_map", json::object()}};
  const char* shard_names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  for (int s = 0; s < 2; ++s) {
    std::vector<std::string> part(names.begin() + (s == 0 ? 0 : names.size() / 2),
                                  s == 0 ? names.begin() + names.size() / 2 : names.end());
    // Larger elements first: every tensor stays aligned to its element size.
    std::stable_sort(part.begin(), part.end(),
                     [&](const std::string& a, const std::string& b) { return elem(a) > elem(b); });
    json h = json::object();
    std::string bytes;
    for (const std::string& n : part) {
      const uint64_t b = header[n]["data_offsets"][0], e = header[n]["data_offsets"][1];
      h[n] = {{"dtype", header[n]["dtype"]},
              {"shape", header[n]["shape"]},
              {"data_offsets", {bytes.size(), bytes.size() + (e - b)}}};
      bytes += data.substr(b, e - b);
      index["weight_map"][n] = shard_names[s];
    }
    WriteFile(dir + "/" + shard_names[s], SafetensorsBytes(h, bytes));
  }
  WriteFile(dir + "/model.safetensors.index.json", index.dump(2));
  fs::remove(dir + "/model.safetensors");
}

// Greedy tokens of one session on `prompt`; empty with *err set on failure.
std::vector<int32_t> Greedy(const std::string& dir, const std::vector<int32_t>& prompt, int n, std::string* err) {
  std::vector<int32_t> out;
  llm_runtime* rt = nullptr;
  llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
  if (st != LLM_OK) {
    *err = ExpectStatus(st, LLM_OK, "runtime_create " + dir);
    return out;
  }
  llm_session* s = nullptr;
  if (llm_session_create(rt, nullptr, &s) == LLM_OK &&
      llm_session_append_tokens(s, prompt.data(), prompt.size()) == LLM_OK) {
    while (static_cast<int>(out.size()) < n) {
      llm_step_result r;
      size_t got = 0;
      if (llm_decode_step(rt, &r, 1, &got) != LLM_OK || got != 1 || r.status != LLM_OK) break;
      if (r.token != LLM_TOKEN_NONE) out.push_back(r.token);
    }
  }
  if (static_cast<int>(out.size()) != n) *err = std::string("generation failed: ") + llm_last_error();
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
  return out;
}

std::string ExpectCreate(const std::string& dir, llm_status want, const std::string& needle) {
  llm_runtime* rt = nullptr;
  const llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
  llm_runtime_destroy(rt);
  std::string err = ExpectStatus(st, want, "runtime_create");
  if (err.empty() && std::string(llm_last_error()).find(needle) == std::string::npos) {
    err = "runtime_create: \"" + std::string(llm_last_error()) + "\" does not name " + needle;
  }
  return err;
}

// A sharded copy of the committed Kimi-architecture checkpoint.
std::string ShardedModel(const std::string& name) {
  const std::string dir = MakeTempDir(name);
  CopyDir(kData + "/tiny_kimi_k2_qlora_yarn", dir);
  Shard(dir);
  return dir;
}

// A FIFO named model.safetensors (or a shard) must be refused, not opened and waited on.
TEST(HostileModelDir, FifoInsteadOfSafetensorsIsAnErrorNotAHang) {
  const std::string dir = MakeTempDir("fifo");
  CopyDir(kData + "/tiny_kimi_k2_qlora_yarn", dir);
  ::unlink((dir + "/model.safetensors").c_str());
  ASSERT_EQ(::mkfifo((dir + "/model.safetensors").c_str(), 0600), 0);
  EXPECT_EQ(RunIsolated([&] {
              llm_runtime* rt = nullptr;
              const llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
              if (rt != nullptr) llm_runtime_destroy(rt);
              return ExpectStatus(st, LLM_ERR_IO, "runtime_create over a FIFO");
            }, /*timeout_s=*/20),
            "");
}

TEST(HostileModelDir, FifoInsteadOfConfigOrTokenizerIsAnErrorNotAHang) {
  for (const char* name : {"config.json", "tokenizer.json"}) {
    const std::string dir = MakeTempDir("fifo_text");
    CopyDir(kData + "/tiny_glm4_moe", dir);
    CopyDir(kData + "/tokenizers/glm", dir);
    ::unlink((dir + "/" + name).c_str());
    ASSERT_EQ(::mkfifo((dir + "/" + name).c_str(), 0600), 0);
    EXPECT_EQ(RunIsolated([&] {
                llm_runtime* rt = nullptr;
                llm_tokenizer* tok = nullptr;
                const llm_status a = llm_runtime_create(dir.c_str(), nullptr, &rt);
                const llm_status b = llm_tokenizer_create(dir.c_str(), &tok);
                llm_runtime_destroy(rt);
                llm_tokenizer_destroy(tok);
                if (std::string(name) == "config.json") return ExpectStatus(a, LLM_ERR_IO, name);
                // Without a regular tokenizer.json the directory has no tokenizer at all.
                return b == LLM_ERR_IO ? std::string() : ExpectStatus(b, LLM_ERR_NOT_FOUND, name);
              }, /*timeout_s=*/20),
              "")
        << name;
  }
}

// The Hugging Face cache stores a snapshot as relative links into its blob store: a sharded
// checkpoint loaded through such links gives exactly the tokens of the plain single file.
TEST(HostileModelDir, SymlinkedShardsLoadLikeTheHuggingFaceCache) {
  const std::string plain = kData + "/tiny_kimi_k2_qlora_yarn";
  const std::string sharded = ShardedModel("hf_src");
  const std::string root = MakeTempDir("hf_cache");
  const std::string snapshot = root + "/snapshots/0123abcd";
  fs::create_directories(root + "/blobs");
  fs::create_directories(snapshot);
  int blob = 0;
  for (const auto& e : fs::directory_iterator(sharded)) {
    const std::string hash = "blob" + std::to_string(blob++);
    fs::copy_file(e.path(), root + "/blobs/" + hash);
    fs::create_symlink("../../blobs/" + hash, snapshot + "/" + e.path().filename().string());
  }
  EXPECT_EQ(RunIsolated([&] {
              std::string err;
              const std::vector<int32_t> want = Greedy(plain, {1, 17, 42}, 6, &err);
              const std::vector<int32_t> got = err.empty() ? Greedy(snapshot, {1, 17, 42}, 6, &err) : want;
              if (err.empty() && got != want) err = "the sharded, linked checkpoint generates other tokens";
              return err;
            }),
            "");
  fs::remove_all(root);
  fs::remove_all(sharded);
}

// A FIFO, a directory, a link to a FIFO or a dangling link named as a shard or as the index is
// refused at once (a FIFO used to block llm_runtime_create forever).
TEST(HostileModelDir, ShardsThatAreNotRegularFilesAreErrorsNotHangs) {
  const std::string shard = "/model-00002-of-00002.safetensors";
  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;
    llm_status want;
  } cases[] = {
      {"FIFO shard", [&](const std::string& d) { ASSERT_EQ(::mkfifo((d + shard).c_str(), 0600), 0); }, LLM_ERR_IO},
      {"directory shard", [&](const std::string& d) { fs::create_directory(d + shard); }, LLM_ERR_IO},
      {"link to a FIFO",
       [&](const std::string& d) {
         ASSERT_EQ(::mkfifo((d + "/fifo").c_str(), 0600), 0);
         fs::create_symlink("fifo", d + shard);
       },
       LLM_ERR_IO},
      {"dangling link", [&](const std::string& d) { fs::create_symlink("nowhere", d + shard); }, LLM_ERR_NOT_FOUND},
      {"FIFO index",
       [&](const std::string& d) {
         fs::remove(d + "/model.safetensors.index.json");
         ASSERT_EQ(::mkfifo((d + "/model.safetensors.index.json").c_str(), 0600), 0);
       },
       LLM_ERR_IO},
  };
  for (const Case& k : cases) {
    const std::string dir = ShardedModel("shard_kind");
    fs::remove(dir + shard);
    k.make(dir);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, k.want, "model"); }, /*timeout_s=*/20), "") << k.what;
    fs::remove_all(dir);
  }
}

// Shard indexes built to cost memory or to escape the directory. The index is streamed: its
// weight_map goes straight into the name -> shard table, the rest is skipped unstored.
TEST(HostileModelDir, ShardIndexBombsAreRefusedCheaply) {
  const std::string ok_map = R"("weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"})";
  std::string many_shards = R"({"weight_map": {)";
  for (int i = 0; i <= 4096; ++i) {
    many_shards += (i ? "," : "") + std::string("\"t") + std::to_string(i) + "\": \"s" + std::to_string(i) + "\"";
  }
  many_shards += "}}";
  struct Case {
    const char* what;
    std::string index;
    llm_status want;
    const char* needle;
  } cases[] = {
      {"nested metadata", "{\"metadata\": " + std::string(8 << 20, '[') + ", " + ok_map + "}", LLM_ERR_FORMAT,
       "nested"},
      {"index is a list", "[" + std::string(1 << 20, '['), LLM_ERR_FORMAT, "not a JSON object"},
      {"no weight_map", R"({"metadata": {"total_size": 1}})", LLM_ERR_FORMAT, "weight_map"},
      {"weight_map is a list", R"({"weight_map": ["a"]})", LLM_ERR_FORMAT, "weight_map"},
      {"entry is a number", R"({"weight_map": {"a": 5}})", LLM_ERR_FORMAT, "\"a\""},
      {"entry is nested", "{\"weight_map\": {\"a\": " + std::string(1 << 20, '{') + "}}", LLM_ERR_FORMAT, "\"a\""},
      {"tensor listed twice", R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})", LLM_ERR_FORMAT,
       "twice"},
      {"shard outside", R"({"weight_map": {"a": "../model.safetensors"}})", LLM_ERR_FORMAT, "leaves the directory"},
      {"shard with NUL", R"({"weight_map": {"a": "x\u0000/../../etc/passwd"}})", LLM_ERR_FORMAT,
       "leaves the directory"},
      {"empty shard name", R"({"weight_map": {"a": ""}})", LLM_ERR_FORMAT, "leaves the directory"},
      {"4097 shards", many_shards, LLM_ERR_OUT_OF_RANGE, "shard files"},
      {"shard the index lacks a tensor of", R"({"weight_map": {"nope": "model-00001-of-00002.safetensors"}})",
       LLM_ERR_FORMAT, "nope"},
  };
  for (const Case& k : cases) {
    const std::string dir = ShardedModel("index");
    WriteFile(dir + "/model.safetensors.index.json", k.index);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, k.want, k.needle); }, /*timeout_s=*/20), "") << k.what;
    fs::remove_all(dir);
  }
  // An index past the 64 MiB limit is refused before it is read (a sparse file).
  const std::string dir = ShardedModel("big_index");
  const int fd = ::open((dir + "/model.safetensors.index.json").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, (off_t{64} << 20) + 1), 0);
  ::close(fd);
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_OUT_OF_RANGE, "model.safetensors.index.json"); }), "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace llmrt::hostile
