// llm-bench --kv-table DIR[,DIR...]: KV bytes per token, capacity and sessions per codec for each
// model directory, from its config.json alone (llm_model_kv_sizing); tests/data/configs holds the
// released Kimi K2, GLM-5 and GLM-4.5 configs.
#include <cstdio>
#include <fstream>
#include <utility>

#include "modes.h"
#include "nlohmann/json.hpp"

namespace llm_bench {

int RunKvTable(const std::vector<std::string>& dirs, double budget_gib, int session_tokens) {
  const uint64_t budget = static_cast<uint64_t>(budget_gib * (1ull << 30));
  std::printf("llm-bench --kv-table: KV budget %.0f GiB, 16-token pages, sessions of %d tokens\n\n", budget_gib,
              session_tokens);
  std::printf("| model | architecture | layers | values/token/layer | codec | KV B/token | tokens in budget | "
              "sessions of %d | vs BF16 |\n|---|---|---:|---:|---|---:|---:|---:|---:|\n", session_tokens);
  for (const auto& d : dirs) {
    std::ifstream in(d + "/config.json");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    const std::string arch = j.is_object() && j.contains("architectures") ? j["architectures"][0].get<std::string>() : "?";
    uint64_t bf16_tokens = 0;
    for (auto [codec, name] : {std::pair{LLM_KV_DTYPE_BF16, "BF16"}, std::pair{LLM_KV_DTYPE_FP8_E4M3, "FP8 e4m3 flat"},
                               std::pair{LLM_KV_DTYPE_FP8_E4M3_TILED, "FP8 e4m3 tiled"}}) {
      llm_kv_sizing k;
      k.struct_size = sizeof(k);
      if (llm_model_kv_sizing(d.c_str(), codec, budget, 16, static_cast<uint32_t>(session_tokens), &k) != LLM_OK) {
        std::fprintf(stderr, "llm-bench: %s: %s\n", d.c_str(), llm_last_error());
        return 1;
      }
      if (codec == LLM_KV_DTYPE_BF16) bf16_tokens = k.capacity_tokens;
      std::printf("| %s | %s | %u | %u | %s | %llu | %llu | %llu | %.2fx |\n", fs::path(d).filename().c_str(),
                  arch.c_str(), k.num_layers, k.elements_per_token_layer, name,
                  static_cast<unsigned long long>(k.bytes_per_token), static_cast<unsigned long long>(k.capacity_tokens),
                  static_cast<unsigned long long>(k.max_sessions),
                  static_cast<double>(k.capacity_tokens) / static_cast<double>(bf16_tokens));
    }
  }
  return 0;
}

}  // namespace llm_bench
