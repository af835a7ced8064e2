// Replays deterministic mutations (bit flips, byte overwrites, truncations, insertions, splices)
// of committed seed files through every fuzz target. Not a substitute for coverage-guided
// fuzzing (cmake -DLLMRT_FUZZ=ON with clang), but it runs in every CI build and keeps the parsers
// honest against malformed input.
//   llmrt_fuzz_smoke [iterations per seed] [target | -target ...]
// Named targets run alone; -name leaves one out. Each target draws its mutations from its own
// stream, so a subset (ctest runs two shards side by side) replays what the full run replays.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.h"

namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 5) {
      case 0:  // bit flip
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // interesting byte
        if (!s.empty()) s[rng() % s.size()] = "\x00\xff\x7f\x80\"{}[]:,9-"[rng() % 13];
        break;
      case 2:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 3: {  // insert random bytes
        const size_t at = s.empty() ? 0 : rng() % s.size();
        std::string ins(1 + rng() % 8, '\0');
        for (auto& c : ins) c = static_cast<char>(rng());
        s.insert(at, ins);
        break;
      }
      case 4: {  // duplicate a slice
        if (s.size() < 2) break;
        const size_t a = rng() % s.size(), n = 1 + rng() % std::min<size_t>(64, s.size() - a);
        s.insert(rng() % s.size(), s.substr(a, n));
        break;
      }
    }
  }
  return s;
}

// Every file of a committed seed directory (tests/fuzz/seeds/<name>), in name order.
std::vector<std::string> Seeds(const std::string& name) {
  std::vector<std::string> paths, out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(LLMRT_TEST_DATA) + "/../fuzz/seeds/" + name)) {
    paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) out.push_back(Read(p));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::string_literals;
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 300;
  const std::string d = LLMRT_TEST_DATA;
  // A small valid safetensors file as seed (the real ones are large).
  std::string st = Read(d + "/tiny_glm4_moe/model.safetensors").substr(0, 4096);
  struct Target {
    const char* name;
    int (*fn)(const uint8_t*, size_t);
    std::vector<std::string> seeds;
    int divisor = 1;  // runs iterations / divisor mutations per seed (targets that load a model)
  } targets[] = {
      {"safetensors", llmrt::fuzz::Safetensors, {st}},
      {"config", llmrt::fuzz::Config,
       {Read(d + "/tiny_kimi_k2_qlora_yarn/config.json"), Read(d + "/tiny_glm4_moe/config.json")}},
      {"tokenizer_text", llmrt::fuzz::TokenizerText,
       {"In the beginning God created\n", "\xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>[gMASK] 123 'll", Read(d + "/kjv_heldout.txt").substr(0, 600)}},
      {"tokenizer_ids", llmrt::fuzz::TokenizerIds,
       {std::string(64, '\x10'), "\xff\xff\x00\x01\x40\x00", "\x40\x0f\x41\x0f\x70\x0f\x80\x0f\x9a\x0f"}},
      {"tiktoken_model", llmrt::fuzz::TiktokenModel,
       {Read(d + "/tokenizers/kimi/tiktoken.model").substr(0, 3000), Read(d + "/../fuzz/seeds/tiktoken_model/small.tiktoken")}},
      {"tokenizer_json", llmrt::fuzz::TokenizerJson,
       {Read(d + "/tokenizers/glm/tokenizer.json").substr(0, 3000), Read(d + "/../fuzz/seeds/tokenizer_json/small.json")}},
      {"tokenizer_config", llmrt::fuzz::TokenizerConfig,
       {"\x00"s + Read(d + "/../fuzz/seeds/tokenizer_config/small.json"), "\x01{\"vocab_size\": 4100}"}},
      {"tokenizer_regex", llmrt::fuzz::TokenizerRegex,
       {"\\p{L}+| ?[^\\s\\p{L}]+|\\s+\nIn the beginning, God\n", "(a|a)*b|.\n" + std::string(40, 'a')}},
      {"chat_template", llmrt::fuzz::ChatTemplate,
       {"\x03system\0Be brief.\0user\0Who made <|im_end|> the heaven?"s,
        "\x06user\0[gMASK]hello\0assistant\0<think>x</think>"s}},
      {"safetensors_header", llmrt::fuzz::SafetensorsHeader, Seeds("safetensors_header")},
      {"shard_index", llmrt::fuzz::ShardIndex, Seeds("shard_index")},
      {"model_config", llmrt::fuzz::ModelConfig, Seeds("model_config"), 20},
      {"kv_import", llmrt::fuzz::KvImport, Seeds("kv_import"), 4},
  };
  const std::vector<std::string> only(argv + std::min(argc, 2), argv + argc);
  std::vector<std::string> run, skip;
  for (const auto& arg : only) {
    const std::string name = arg[0] == '-' ? arg.substr(1) : arg;
    if (std::none_of(std::begin(targets), std::end(targets), [&](const Target& t) { return name == t.name; })) {
      std::fprintf(stderr, "fuzz smoke: no target named '%s'\n", name.c_str());
      return 2;
    }
    (arg[0] == '-' ? skip : run).push_back(name);
  }
  const auto listed = [](const std::vector<std::string>& v, const char* name) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };
  long runs = 0;
  for (size_t ti = 0; ti < std::size(targets); ++ti) {
    auto& t = targets[ti];
    if ((!run.empty() && !listed(run, t.name)) || listed(skip, t.name)) continue;
    std::mt19937_64 rng(20261129 + ti);
    const auto start = std::chrono::steady_clock::now();
    for (const auto& seed : t.seeds) {
      t.fn(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
      for (int i = 0; i < iterations / t.divisor; ++i) {
        const std::string m = Mutate(seed, rng);
        t.fn(reinterpret_cast<const uint8_t*>(m.data()), m.size());
        ++runs;
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("fuzz smoke: %s ok (%.1f s)\n", t.name, s);
    std::fflush(stdout);
  }
  std::printf("%ld passed, 0 failed\n", runs);
  return 0;
}
