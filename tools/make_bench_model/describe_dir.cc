// DescribeDir (bench_model.h): the batch-1 weight reads of any checkpoint directory, so that
// llm-bench --model reports bandwidth on checkpoints it did not generate.
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "src/util/safetensors.h"
#include "tools/make_bench_model/bench_model.h"

namespace llmrt::bench {

namespace {

namespace fs = std::filesystem;

// The config of the language model: K2.5-style checkpoints nest it in text_config.
const nlohmann::json& TextConfig(const nlohmann::json& j) {
  return j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : j;
}

int64_t IntOr(const nlohmann::json& j, const char* key, int64_t fallback) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : fallback;
}

// The safetensors files of `dir`: the shards its index names, else model.safetensors.
bool ShardFiles(const fs::path& dir, std::vector<fs::path>* files) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    files->push_back(dir / "model.safetensors");
    return true;
  }
  std::ifstream in(index);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    std::fprintf(stderr, "llm-make-bench-model: %s: no weight_map object\n", index.c_str());
    return false;
  }
  std::set<std::string> names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
      std::fprintf(stderr, "llm-make-bench-model: %s: bad shard name for %s\n", index.c_str(), tensor.c_str());
      return false;
    }
    names.insert(file.get<std::string>());
  }
  for (const auto& n : names) files->push_back(dir / n);
  return true;
}

// The layer index of "model.layers.N." (or "language_model.model.layers.N."), else -1.
int64_t LayerOf(const std::string& name) {
  const std::string key = "model.layers.";
  const size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  return std::atoll(name.c_str() + at + key.size());
}

}  // namespace

bool DescribeDir(const fs::path& dir, DirDescription* out) {
  std::ifstream in(dir / "config.json");
  if (!in) {
    std::fprintf(stderr, "llm-make-bench-model: cannot read %s\n", (dir / "config.json").c_str());
    return false;
  }
  const nlohmann::json root = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) {
    std::fprintf(stderr, "llm-make-bench-model: %s is not a JSON object\n", (dir / "config.json").c_str());
    return false;
  }
  const nlohmann::json& j = TextConfig(root);
  const int64_t layers = IntOr(j, "num_hidden_layers", -1);
  const int64_t experts = IntOr(j, "n_routed_experts", 0);
  const int64_t top_k = IntOr(j, "num_experts_per_tok", 0);
  out->vocab = IntOr(j, "vocab_size", 0);
  out->index_topk = IntOr(j, "index_topk", 0);
  if (layers <= 0 || out->vocab <= 0) {
    std::fprintf(stderr, "llm-make-bench-model: %s: no positive num_hidden_layers and vocab_size\n",
                 (dir / "config.json").c_str());
    return false;
  }
  std::vector<fs::path> files;
  if (!ShardFiles(dir, &files)) return false;
  double bytes = 0, expert_bytes = 0;
  for (const auto& f : files) {
    auto st = SafetensorsFile::Open(f.string());
    if (!st.ok()) {
      std::fprintf(stderr, "llm-make-bench-model: %s\n", std::string(st.status().message()).c_str());
      return false;
    }
    for (const auto& [name, t] : st->tensors()) {
      if (LayerOf(name) >= layers) continue;  // multi-token-prediction layers do not run
      const double b = static_cast<double>(t.bytes);
      if (name.find("embed_tokens.") != std::string::npos) {
        bytes += t.shape.empty() ? 0 : b / static_cast<double>(t.shape[0]);
      } else if (name.find(".mlp.experts.") != std::string::npos) {
        expert_bytes += b;
      } else if (name.find("visual") == std::string::npos && name.find("vision_tower") == std::string::npos &&
                 name.find("mm_projector") == std::string::npos) {
        bytes += b;
      }
    }
  }
  out->weight_bytes_per_token =
      bytes + (experts > 0 ? expert_bytes * static_cast<double>(top_k) / static_cast<double>(experts) : 0.0);
  return true;
}

}  // namespace llmrt::bench
