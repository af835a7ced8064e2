// llm-bench --kv-table DIR[,DIR...] --tp N --device-gib G: per-device weight bytes of each model
// split over N tensor-parallel ranks, as llmrt lays them out (docs/parallelism.md), in three
// storages, and the KV tokens that fit in what remains of a G GiB device (llm_model_kv_sizing_v2).
//
// Storages, as the releases store them and llmrt keeps them resident:
//  - BF16: every matrix BF16.
//  - FP8: decoder linears FP8 e4m3 with 128x128 float32 block scales (the DeepSeek-V3 / Kimi K2 /
//    GLM FP8 releases); embeddings, lm_head, norms, routers and the indexer's weights_proj BF16;
//    MLA's kv_b_proj dequantized to F32 at load (llmrt's absorbed attention reads it as rows).
//  - INT4 experts: routed experts INT4 with one bf16 scale per 32 columns (Kimi K2-Thinking's
//    compressed-tensors layout), everything else BF16.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "modes.h"
#include "nlohmann/json.hpp"

namespace llm_bench {
namespace {

enum class Storage { kBf16, kFp8, kInt4Experts };

struct Dims {
  int64_t V, D, I, Im, L, H, KV, hd, q_lora, kv_lora, nope, rope, v, E, ns, Hi, Di, first_dense;
  bool mla, gqa_bias;
  std::vector<bool> moe_layer;
};

int64_t Get(const nlohmann::json& c, const char* k, int64_t def = 0) {
  return c.contains(k) && c[k].is_number_integer() ? c[k].get<int64_t>() : def;
}

Dims ReadDims(const nlohmann::json& top) {
  const nlohmann::json& c = top.contains("text_config") ? top["text_config"] : top;
  Dims d{};
  d.V = Get(c, "vocab_size");
  d.D = Get(c, "hidden_size");
  d.I = Get(c, "intermediate_size");
  d.Im = Get(c, "moe_intermediate_size");
  d.L = Get(c, "num_hidden_layers");
  d.H = Get(c, "num_attention_heads");
  d.KV = Get(c, "num_key_value_heads", d.H);
  d.hd = Get(c, "head_dim", d.H > 0 ? d.D / d.H : 0);
  d.q_lora = Get(c, "q_lora_rank");
  d.kv_lora = Get(c, "kv_lora_rank");
  d.nope = Get(c, "qk_nope_head_dim");
  d.rope = Get(c, "qk_rope_head_dim");
  d.v = Get(c, "v_head_dim");
  d.E = Get(c, "n_routed_experts");
  d.ns = Get(c, "n_shared_experts");
  d.Hi = Get(c, "index_n_heads");
  d.Di = Get(c, "index_head_dim");
  d.first_dense = Get(c, "first_k_dense_replace");
  d.mla = d.kv_lora > 0;
  d.gqa_bias = c.contains("attention_bias") && c["attention_bias"].is_boolean() && c["attention_bias"].get<bool>();
  for (int64_t l = 0; l < d.L; ++l) {
    bool moe = d.E > 0 && l >= d.first_dense;
    if (c.contains("mlp_layer_types") && c["mlp_layer_types"].is_array() && l < static_cast<int64_t>(c["mlp_layer_types"].size())) {
      moe = c["mlp_layer_types"][l] == "sparse";
    }
    d.moe_layer.push_back(moe);
  }
  return d;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes of one rank's [rows, cols] slice of a linear layer.
double Linear(int64_t rows, int64_t cols, Storage s, bool expert) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  if (s == Storage::kInt4Experts && expert) return n / 2 + static_cast<double>(rows) * (cols / 32) * 2;
  if (s == Storage::kFp8) return n + static_cast<double>(CeilDiv(rows, 128) * CeilDiv(cols, 128)) * 4;
  return 2 * n;
}

double RankWeightBytes(const Dims& d, int tp, Storage s) {
  double b = 2.0 * d.V / tp * d.D * 2 + 2.0 * d.D;  // embed and lm_head rows, final norm
  for (int64_t l = 0; l < d.L; ++l) {
    b += 2.0 * 2 * d.D;  // the two norms
    if (d.mla) {
      const int64_t Hl = d.H / tp;
      if (d.q_lora > 0) {
        b += Linear(d.q_lora, d.D, s, false) + 2.0 * d.q_lora + Linear(Hl * (d.nope + d.rope), d.q_lora, s, false);
      } else {
        b += Linear(Hl * (d.nope + d.rope), d.D, s, false);
      }
      b += Linear(d.kv_lora + d.rope, d.D, s, false) + 2.0 * d.kv_lora;
      b += static_cast<double>(Hl) * (d.nope + d.v) * d.kv_lora * (s == Storage::kFp8 ? 4 : 2);  // kv_b (dense)
      b += Linear(d.D, Hl * d.v, s, false);
      if (d.Hi > 0) {  // the DSA indexer, replicated
        b += Linear(d.Hi * d.Di, d.q_lora, s, false) + Linear(d.Di, d.D, s, false) + 2.0 * 2 * d.Di +
             2.0 * d.Hi * d.D;
      }
    } else {
      const int64_t Hl = d.H / tp, KVl = tp <= d.KV ? d.KV / tp : 1;
      b += Linear(Hl * d.hd, d.D, s, false) + 2 * Linear(KVl * d.hd, d.D, s, false) + Linear(d.D, Hl * d.hd, s, false);
      if (d.gqa_bias) b += 2.0 * (Hl + 2 * KVl) * d.hd;
    }
    if (d.moe_layer[l]) {
      b += 2.0 * d.E * d.D + 4.0 * d.E;  // router and its bias
      b += static_cast<double>(d.E) * 3 * Linear(d.Im / tp, d.D, s, true);  // routed: split or partitioned alike
      if (d.ns > 0) b += 3 * Linear(d.Im * d.ns / tp, d.D, s, false);
    } else {
      b += 3 * Linear(d.I / tp, d.D, s, false);
    }
  }
  return b;
}

}  // namespace

int RunRankSizing(const std::vector<std::string>& dirs, int tp, double device_gib, int session_tokens) {
  const double device = device_gib * static_cast<double>(1ull << 30);
  std::printf("llm-bench --kv-table --tp %d --device-gib %.0f: per-device weights and the KV tokens that fit in the "
              "rest (16-token pages; no activation or workspace reserve)\n\n", tp, device_gib);
  std::printf("| model | weights | weights/device GB | left GiB | KV B/token/device BF16 | KV tokens BF16 | "
              "KV tokens FP8 |\n|---|---|---:|---:|---:|---:|---:|\n");
  for (const auto& d : dirs) {
    std::ifstream in(d + "/config.json");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object()) {
      std::fprintf(stderr, "llm-bench: %s/config.json is not JSON\n", d.c_str());
      return 1;
    }
    const Dims dims = ReadDims(j);
    for (auto [s, name] : {std::pair{Storage::kBf16, "BF16"}, std::pair{Storage::kFp8, "FP8 128x128"},
                           std::pair{Storage::kInt4Experts, "INT4 g32 experts"}}) {
      const double w = RankWeightBytes(dims, tp, s);
      const double left = device - w;
      uint64_t tokens[2] = {0, 0};
      uint64_t bpt = 0;
      int k = 0;
      for (int32_t codec : {LLM_KV_DTYPE_BF16, LLM_KV_DTYPE_FP8_E4M3}) {
        llm_kv_sizing z;
        z.struct_size = sizeof(z);
        if (left > 0) {
          if (llm_model_kv_sizing_v2(d.c_str(), codec, static_cast<uint64_t>(left), 16, static_cast<uint32_t>(session_tokens),
                                     static_cast<uint32_t>(tp), &z) != LLM_OK) {
            std::fprintf(stderr, "llm-bench: %s: %s\n", d.c_str(), llm_last_error());
            return 1;
          }
          tokens[k] = z.capacity_tokens;
          if (codec == LLM_KV_DTYPE_BF16) bpt = z.bytes_per_token;
        }
        ++k;
      }
      std::printf("| %s | %s | %.1f | %.1f | %llu | %llu | %llu |\n", fs::path(d).filename().c_str(), name, w / 1e9,
                  left / (1ull << 30), static_cast<unsigned long long>(bpt), static_cast<unsigned long long>(tokens[0]),
                  static_cast<unsigned long long>(tokens[1]));
    }
  }
  return 0;
}

}  // namespace llm_bench
