// llm-bench: decode throughput of the CPU backend on a generated DeepSeek-V3-architecture
// checkpoint large enough that every decode step streams its weights from memory, and the
// achieved weight-read bandwidth at batch 1 against a memory-copy bandwidth measured in the
// same run. Prints tables; times nothing in tests.
//
//   llm-bench [--dir DIR] [--sessions 1,4,16,64] [--steps N] [--threads N] [--prompt N]
//   llm-bench --integrity [--model DIR] [--sessions 1,8,64] [--steps N] [--repeats N]
//   llm-bench --tokenize DIR --text FILE [--repeats N]
//   llm-bench --kv-table DIR[,DIR...] [--budget-gib N] [--session-tokens N]
//   llm-bench --context 256,2048 [--sessions 1,4] [--steps N]
//   llm-bench --formats bf16,fp8,int4-g32,int4-g128,int4-g32-all [--sessions 1,16,64] [--steps N]
//
// --formats writes the generated model in each weight format (next to DIR) and reports decode
// and prefill speed per format, plus BF16 weights with the FP8 KV codec, as ratios to BF16.
//
// --kv-table sizes the KV cache of each model directory (config.json only; tests/data/configs
// holds the released Kimi K2, GLM-5 and GLM-4.5 configs) per codec with llm_model_kv_sizing.
// --context compares generated Kimi-K2-structure (dense MLA), GLM-5-structure (MLA + DSA indexer,
// index_topk 512) and GLM-4.5-structure (GQA) models of the same hidden size, layers and MoE,
// prefilling each session to the given context lengths: below index_topk the MLA models attend
// densely, above it GLM-5 attends to 512 positions.
//
// --integrity compares decode throughput and p95 step latency with the no-op tracker, the
// built-in tag checker and a host callback tracker (counting events), interleaving the three in
// every repeat so machine noise hits them alike; it reports ratios to no-op with their spread.
//
// The checkpoint (about 2.4 GB BF16) is written once to DIR (default /tmp/llmrt-bench-model)
// and reused while its config matches.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "llmrt/llmrt.h"
#include "nlohmann/json.hpp"
#include "src/util/safetensors.h"
#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The generated model: Kimi K2's layer structure at a size whose per-token weight reads
// (about 1.3 GB at batch 1) are far past the last-level cache.
struct BenchConfig {
  int64_t vocab = 32000, hidden = 4096, layers = 4, heads = 32;
  int64_t q_lora = 1024, kv_lora = 512, nope = 128, rope = 64, v = 128;
  int64_t inter = 8192, moe_inter = 1024, experts = 16, top_k = 8, shared = 1, dense = 1;
  // GLM-5 DSA indexer (GlmMoeDsaForCausalLM) when dsa.
  bool dsa = false;
  int64_t index_topk = 2048, index_heads = 32, index_dim = 128;
  // GLM-4.5 structure (Glm4MoeForCausalLM: GQA with biases, q/k norm, partial rotary) when gqa.
  bool gqa = false;
  int64_t kv_heads = 2, head_dim = 128;
  // Weight storage: "bf16"; "fp8" (every decoder linear but the router, 128x128 block scales, as
  // DeepSeek/Kimi FP8 releases); "int4-g32" / "int4-g128" (routed experts, compressed-tensors
  // pack-quantized, as Kimi K2-Thinking); "int4-g32-all" (every decoder linear but kv_b_proj and
  // the router).
  std::string weights = "bf16";
};

int64_t Int4Group(const BenchConfig& c) {
  return c.weights.rfind("int4-g128", 0) == 0 ? 128 : 32;
}

// Whether the tensor `name` is stored quantized under c.weights.
bool IsQuantized(const BenchConfig& c, const std::string& name, const std::vector<int64_t>& shape) {
  if (c.weights == "bf16" || shape.size() != 2 || name.rfind("model.layers.", 0) != 0) return false;
  if (name.find("mlp.gate.weight") != std::string::npos || name.find(".indexer.") != std::string::npos) return false;
  if (c.weights == "fp8") return true;
  if (c.weights == "int4-g32-all") return name.find("kv_b_proj") == std::string::npos;
  return name.find(".mlp.experts.") != std::string::npos;
}

// Bytes one weight matrix of `shape` occupies in its storage format (codes plus scales).
double StoredBytes(const BenchConfig& c, const std::string& name, const std::vector<int64_t>& shape, bool f32) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  if (!IsQuantized(c, name, shape)) return n * (f32 ? 4.0 : 2.0);
  if (c.weights == "fp8") {
    return n + 4.0 * static_cast<double>(((shape[0] + 127) / 128) * ((shape[1] + 127) / 128));
  }
  return n / 2 + 2.0 * static_cast<double>(shape[0] * (shape[1] / Int4Group(c)));
}

// The smaller models --context compares: attention is a visible share of a step at long context.
BenchConfig ContextConfig(bool dsa, bool gqa = false) {
  BenchConfig c;
  c.vocab = 8192;
  c.hidden = 1024;
  c.heads = 16;
  c.q_lora = 512;
  c.inter = 2816;
  c.moe_inter = 512;
  c.experts = 8;
  c.top_k = 2;
  c.dsa = dsa;
  c.index_topk = 512;
  c.gqa = gqa;
  c.heads = gqa ? 8 : c.heads;  // GLM-4.5's 96 query heads over 8 KV heads of 128, scaled down
  return c;
}

nlohmann::json ConfigJsonUnquantized(const BenchConfig& c);

nlohmann::json ConfigJson(const BenchConfig& c) {
  nlohmann::json j = ConfigJsonUnquantized(c);
  if (c.weights == "fp8") {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}}};
  } else if (c.weights != "bf16") {
    j["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "pack-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", Int4Group(c)}}}}}}}};
  }
  return j;
}

nlohmann::json ConfigJsonUnquantized(const BenchConfig& c) {
  if (c.gqa) {
    return {{"architectures", {"Glm4MoeForCausalLM"}},
            {"model_type", "glm4_moe"},
            {"vocab_size", c.vocab},
            {"hidden_size", c.hidden},
            {"intermediate_size", c.inter},
            {"moe_intermediate_size", c.moe_inter},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_heads},
            {"head_dim", c.head_dim},
            {"partial_rotary_factor", 0.5},
            {"attention_bias", true},
            {"use_qk_norm", true},
            {"n_routed_experts", c.experts},
            {"num_experts_per_tok", c.top_k},
            {"n_shared_experts", c.shared},
            {"n_group", 1},
            {"topk_group", 1},
            {"first_k_dense_replace", c.dense},
            {"routed_scaling_factor", 2.5},
            {"norm_topk_prob", true},
            {"rms_norm_eps", 1e-5},
            {"max_position_embeddings", 131072},
            {"rope_theta", 1000000.0},
            {"tie_word_embeddings", false}};
  }
  if (c.dsa) {
    nlohmann::json j = ConfigJsonUnquantized(BenchConfig{c.vocab, c.hidden, c.layers, c.heads, c.q_lora, c.kv_lora, c.nope,
                                              c.rope, c.v, c.inter, c.moe_inter, c.experts, c.top_k, c.shared,
                                              c.dense});
    j["architectures"] = {"GlmMoeDsaForCausalLM"};
    j["model_type"] = "glm_moe_dsa";
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    j["index_topk"] = c.index_topk;
    j["index_n_heads"] = c.index_heads;
    j["index_head_dim"] = c.index_dim;
    return j;
  }
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "kimi_k2"},
          {"vocab_size", c.vocab},
          {"hidden_size", c.hidden},
          {"intermediate_size", c.inter},
          {"moe_intermediate_size", c.moe_inter},
          {"num_hidden_layers", c.layers},
          {"num_attention_heads", c.heads},
          {"num_key_value_heads", c.heads},
          {"q_lora_rank", c.q_lora},
          {"kv_lora_rank", c.kv_lora},
          {"qk_nope_head_dim", c.nope},
          {"qk_rope_head_dim", c.rope},
          {"v_head_dim", c.v},
          {"n_routed_experts", c.experts},
          {"num_experts_per_tok", c.top_k},
          {"n_shared_experts", c.shared},
          {"n_group", 1},
          {"topk_group", 1},
          {"first_k_dense_replace", c.dense},
          {"routed_scaling_factor", 2.827},
          {"norm_topk_prob", true},
          {"rms_norm_eps", 1e-6},
          {"max_position_embeddings", 131072},
          {"rope_theta", 50000.0},
          {"rope_scaling",
           {{"type", "yarn"}, {"factor", 32.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
            {"original_max_position_embeddings", 4096}, {"beta_fast", 1.0}, {"beta_slow", 1.0}}},
          {"tie_word_embeddings", false}};
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool f32 = false;
  bool ones = false;  // norm weights
};

std::vector<TensorSpec> Tensors(const BenchConfig& c) {
  std::vector<TensorSpec> t;
  const int64_t qk = c.nope + c.rope;
  t.push_back({"model.embed_tokens.weight", {c.vocab, c.hidden}});
  t.push_back({"model.norm.weight", {c.hidden}, false, true});
  t.push_back({"lm_head.weight", {c.vocab, c.hidden}});
  auto mlp = [&](const std::string& p, int64_t inter) {
    t.push_back({p + "gate_proj.weight", {inter, c.hidden}});
    t.push_back({p + "up_proj.weight", {inter, c.hidden}});
    t.push_back({p + "down_proj.weight", {c.hidden, inter}});
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", {c.hidden}, false, true});
    t.push_back({p + "post_attention_layernorm.weight", {c.hidden}, false, true});
    if (c.gqa) {
      const std::string a = p + "self_attn.";
      t.push_back({a + "q_proj.weight", {c.heads * c.head_dim, c.hidden}});
      t.push_back({a + "k_proj.weight", {c.kv_heads * c.head_dim, c.hidden}});
      t.push_back({a + "v_proj.weight", {c.kv_heads * c.head_dim, c.hidden}});
      t.push_back({a + "q_proj.bias", {c.heads * c.head_dim}});
      t.push_back({a + "k_proj.bias", {c.kv_heads * c.head_dim}});
      t.push_back({a + "v_proj.bias", {c.kv_heads * c.head_dim}});
      t.push_back({a + "o_proj.weight", {c.hidden, c.heads * c.head_dim}});
      t.push_back({a + "q_norm.weight", {c.head_dim}, false, true});
      t.push_back({a + "k_norm.weight", {c.head_dim}, false, true});
    } else {
    t.push_back({p + "self_attn.q_a_proj.weight", {c.q_lora, c.hidden}});
    t.push_back({p + "self_attn.q_a_layernorm.weight", {c.q_lora}, false, true});
    t.push_back({p + "self_attn.q_b_proj.weight", {c.heads * qk, c.q_lora}});
    t.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora + c.rope, c.hidden}});
    t.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora}, false, true});
    t.push_back({p + "self_attn.kv_b_proj.weight", {c.heads * (c.nope + c.v), c.kv_lora}});
    t.push_back({p + "self_attn.o_proj.weight", {c.hidden, c.heads * c.v}});
    }
    if (c.dsa) {
      const std::string x = p + "self_attn.indexer.";
      t.push_back({x + "wq_b.weight", {c.index_heads * c.index_dim, c.q_lora}});
      t.push_back({x + "wk.weight", {c.index_dim, c.hidden}});
      t.push_back({x + "k_norm.weight", {c.index_dim}, false, true});
      t.push_back({x + "k_norm.bias", {c.index_dim}});
      t.push_back({x + "weights_proj.weight", {c.index_heads, c.hidden}});
    }
    if (i < c.dense) {
      mlp(p + "mlp.", c.inter);
    } else {
      t.push_back({p + "mlp.gate.weight", {c.experts, c.hidden}});
      t.push_back({p + "mlp.gate.e_score_correction_bias", {c.experts}, true});
      for (int64_t e = 0; e < c.experts; ++e) mlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe_inter);
      mlp(p + "mlp.shared_experts.", c.moe_inter * c.shared);
    }
  }
  return t;
}

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Bytes of weights one decode step at batch 1 reads: everything but the embedding table (one
// row) and the routed experts a token did not select.
double WeightBytesPerToken(const BenchConfig& c) {
  double bytes = 0;
  double experts = 0;
  for (const auto& t : Tensors(c)) {
    if (t.name == "model.embed_tokens.weight") {
      bytes += c.hidden * 2.0;
      continue;
    }
    const double b = StoredBytes(c, t.name, t.shape, t.f32);
    if (t.name.find(".mlp.experts.") != std::string::npos) {
      experts += b;
    } else {
      bytes += b;
    }
  }
  return bytes + experts * static_cast<double>(c.top_k) / static_cast<double>(c.experts);
}

bool WriteCheckpoint(const BenchConfig& c, const fs::path& dir) {
  fs::create_directories(dir);
  const std::string cfg = ConfigJson(c).dump(2);
  std::ifstream old(dir / "config.json");
  std::string old_cfg((std::istreambuf_iterator<char>(old)), std::istreambuf_iterator<char>());
  if (old_cfg == cfg && fs::exists(dir / "model.safetensors")) return true;
  std::fprintf(stderr, "llm-bench: writing a generated checkpoint to %s ...\n", dir.c_str());
  std::vector<llmrt::TensorToWrite> out;
  uint64_t seed = 1;
  // xorshift64 bytes for tensor seed s0 from byte offset `begin` (so chunks are reproducible).
  auto random_bytes = [](uint64_t s0, uint8_t* dst, size_t begin, size_t n, auto map) {
    uint64_t x = s0 * 0x9e3779b97f4a7c15ull + begin + 1;
    for (size_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      dst[i] = map(x);
    }
  };
  auto constant = [](std::vector<uint8_t> pattern) {
    return [pattern](uint8_t* dst, size_t begin, size_t n) {
      for (size_t i = 0; i < n; ++i) dst[i] = pattern[(begin + i) % pattern.size()];
    };
  };
  for (const auto& t : Tensors(c)) {
    const float scale = t.shape.size() == 2 ? 1.0f / std::sqrt(static_cast<float>(t.shape[1])) : 0.01f;
    const bool ones = t.ones, f32 = t.f32;
    const uint64_t s0 = seed++;
    if (IsQuantized(c, t.name, t.shape)) {
      const int64_t rows = t.shape[0], cols = t.shape[1];
      const std::string stem = t.name.substr(0, t.name.size() - 6);  // drop "weight"
      if (c.weights == "fp8") {
        // Codes of magnitude 2^-3..2^1 (exponent 4..8), either sign; scale_inv brings them to
        // the BF16 model's spread.
        out.push_back({t.name, "F8_E4M3", t.shape, nullptr, static_cast<size_t>(rows * cols),
                       [=](uint8_t* dst, size_t begin, size_t n) {
                         random_bytes(s0, dst, begin, n, [](uint64_t x) {
                           return static_cast<uint8_t>((x & 0x80) | (((x >> 8) % 5 + 4) << 3) | ((x >> 16) & 7));
                         });
                       }});
        const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
        float sv = scale * 1.7f / 2.0f;
        std::vector<uint8_t> pat(4);
        std::memcpy(pat.data(), &sv, 4);
        out.push_back({t.name + "_scale_inv", "F32", {br, bc}, nullptr, static_cast<size_t>(br * bc * 4), constant(pat)});
      } else {
        const int64_t g = Int4Group(c);
        out.push_back({stem + "weight_packed", "I32", {rows, cols / 8}, nullptr, static_cast<size_t>(rows * cols / 2),
                       [=](uint8_t* dst, size_t begin, size_t n) {
                         random_bytes(s0, dst, begin, n, [](uint64_t x) { return static_cast<uint8_t>(x >> 24); });
                       }});
        const uint16_t sb = llmrt::F32ToBf16(scale * 1.7f / 7.0f);
        out.push_back({stem + "weight_scale", "BF16", {rows, cols / g}, nullptr, static_cast<size_t>(rows * (cols / g) * 2),
                       constant({static_cast<uint8_t>(sb & 0xFF), static_cast<uint8_t>(sb >> 8)})});
        const int32_t dims[2] = {static_cast<int32_t>(rows), static_cast<int32_t>(cols)};
        std::vector<uint8_t> pat(8);
        std::memcpy(pat.data(), dims, 8);
        out.push_back({stem + "weight_shape", "I32", {2}, nullptr, 8, constant(pat)});
      }
      continue;
    }
    llmrt::TensorToWrite w;
    w.name = t.name;
    w.dtype = t.f32 ? "F32" : "BF16";
    w.shape = t.shape;
    w.bytes = static_cast<size_t>(Numel(t.shape)) * (t.f32 ? 4 : 2);
    w.fill = [=](uint8_t* dst, size_t begin, size_t n) {
      if (f32) {
        std::memset(dst, 0, n);
        return;
      }
      uint16_t* p = reinterpret_cast<uint16_t*>(dst);
      uint64_t x = s0 * 0x9e3779b97f4a7c15ull + begin;
      for (size_t i = 0; i < n / 2; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const float u = static_cast<float>((x >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
        p[i] = llmrt::F32ToBf16(ones ? 1.0f : u * scale * 1.7f);
      }
    };
    out.push_back(std::move(w));
  }
  auto st = llmrt::WriteSafetensors((dir / "model.safetensors").string(), out);
  if (!st.ok()) {
    std::fprintf(stderr, "llm-bench: %s\n", std::string(st.message()).c_str());
    return false;
  }
  std::ofstream(dir / "config.json") << cfg;
  return true;
}

// Best wall time of 4 runs of fn(thread index) on `threads` threads at once.
template <typename Fn>
double BestParallelSeconds(int threads, Fn fn) {
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { fn(i); });
    for (auto& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Multi-threaded memcpy of a buffer far past the LLC; GB/s counting bytes read plus bytes
// written (the STREAM "copy" convention) and bytes read alone.
double MemcpyBandwidth(int threads, double* read_only_gbs) {
  const size_t bytes = size_t{1} << 30;
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  const size_t chunk = bytes / threads;
  const double best = BestParallelSeconds(threads, [&](int i) {
    std::memcpy(dst.data() + i * chunk, src.data() + i * chunk, chunk);
  });
  *read_only_gbs = bytes / best / 1e9;
  return 2.0 * bytes / best / 1e9;
}

// The decode matmul kernel itself streaming one contiguous 1 GiB BF16 matrix (rows of 4096),
// split over threads: the ceiling the engine's batch-1 decode can approach.
double KernelStreamBandwidth(int threads) {
  const int64_t K = 4096, rows = (int64_t{1} << 30) / (2 * K);
  std::vector<uint16_t> w(static_cast<size_t>(rows * K), llmrt::F32ToBf16(0.5f));
  std::vector<float> x(K, 1.0f), out(rows);
  const int64_t chunk = rows / threads;
  const double best = BestParallelSeconds(threads, [&](int i) {
    llmrt::cpu::MatMulRows(llmrt::DType::kBF16, w.data(), K, x.data(), K, 1, out.data(), rows, i * chunk,
                           i == threads - 1 ? rows : (i + 1) * chunk);
  });
  return w.size() * 2.0 / best / 1e9;
}

std::vector<int> ParseList(const char* s) {
  std::vector<int> v;
  while (*s) {
    v.push_back(std::atoi(s));
    const char* c = std::strchr(s, ',');
    if (!c) break;
    s = c + 1;
  }
  return v;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

struct StepStats {
  double tokens_per_s = 0;
  double p95_ms = 0;
};

// Creates `sessions` sessions, prefills them, then times `steps` decode steps.
StepStats TimeDecode(llm_runtime* rt, int sessions, int steps, int prompt_len, int64_t vocab,
                     double* check_share = nullptr) {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = static_cast<uint32_t>(steps + 4);
  std::vector<llm_session*> ss(sessions);
  for (int i = 0; i < sessions; ++i) {
    llm_session_create(rt, &so, &ss[i]);
    std::vector<int32_t> prompt(prompt_len);
    for (int k = 0; k < prompt_len; ++k) prompt[k] = static_cast<int32_t>((i * 131 + k * 17 + 1) % vocab);
    llm_session_append_tokens(ss[i], prompt.data(), prompt.size());
  }
  std::vector<llm_step_result> res(sessions);
  size_t n = 0;
  for (int w = 0; w < 2; ++w) llm_decode_step(rt, res.data(), res.size(), &n);
  std::vector<double> times;
  llm_runtime_info before;
  before.struct_size = sizeof(before);
  llm_runtime_get_info(rt, &before);
  for (int s = 0; s < steps; ++s) {
    auto t0 = Clock::now();
    llm_decode_step(rt, res.data(), res.size(), &n);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  llm_runtime_info after;
  after.struct_size = sizeof(after);
  llm_runtime_get_info(rt, &after);
  for (auto* s : ss) llm_session_destroy(s);
  double total = 0;
  for (double t : times) total += t;
  if (check_share) *check_share = (after.integrity_check_ns - before.integrity_check_ns) * 1e-9 / total;
  return {sessions * steps / total, Percentile(times, 0.95) * 1e3};
}

struct EventCounts {
  uint64_t events = 0;
};

// Encoding speed of the tokenizer in DIR over FILE (best of `repeats`), in MB/s of input text.
int RunTokenizeBench(const std::string& dir, const std::string& file, int repeats) {
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  llm_tokenizer* tok = nullptr;
  if (llm_tokenizer_create(dir.c_str(), &tok) != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return 1;
  }
  std::vector<int32_t> ids(text.size() + 16);
  size_t n = 0;
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    llm_tokenize(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::string out(text.size() * 2 + 16, '\0');
  size_t len = 0;
  auto t0 = Clock::now();
  llm_detokenize(tok, ids.data(), n, 0, out.data(), out.size(), &len);
  const double dsec = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("| tokenizer | text | bytes | tokens | encode MB/s | decode MB/s |\n|---|---|---:|---:|---:|---:|\n");
  std::printf("| %s | %s | %zu | %zu | %.2f | %.1f |\n", dir.c_str(), file.c_str(), text.size(), n,
              text.size() / best / 1e6, len / dsec / 1e6);
  llm_tokenizer_destroy(tok);
  return 0;
}

int RunIntegrityBench(const std::string& model, const std::vector<int>& batches, int steps, int repeats,
                      int threads) {
  const char* names[3] = {"no-op", "tag checker", "callbacks"};
  EventCounts counts;
  llm_kv_tracker cb;
  std::memset(&cb, 0, sizeof(cb));
  cb.struct_size = sizeof(cb);
  cb.user_data = &counts;
  cb.on_alloc = [](void* u, uint64_t, uint32_t, uint64_t) { static_cast<EventCounts*>(u)->events++; };
  cb.on_free = [](void* u, uint64_t, uint32_t, uint64_t) { static_cast<EventCounts*>(u)->events++; };
  cb.on_verify = [](void* u, uint64_t, const uint32_t*, const uint64_t*, size_t) -> int32_t {
    static_cast<EventCounts*>(u)->events++;
    return 0;
  };
  llm_runtime* rts[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < 3; ++k) {
    llm_runtime_options ro;
    llm_runtime_options_init(&ro);
    ro.num_threads = threads;
    ro.kv_budget_bytes = 256ull << 20;
    ro.kv_integrity = k == 1 ? LLM_KV_INTEGRITY_TAGS : LLM_KV_INTEGRITY_OFF;
    ro.tracker = k == 2 ? &cb : nullptr;
    if (llm_runtime_create(model.c_str(), &ro, &rts[k]) != LLM_OK) {
      std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
      return 1;
    }
  }
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rts[0], &info);
  std::printf("llm-bench --integrity: %s (%s), %.3f B parameters; %d repeats of %d decode steps, trackers interleaved\n\n",
              model.c_str(), info.architecture, info.num_parameters / 1e9, repeats, steps);
  std::printf("| sessions | tracker | decode tok/s (median) | vs no-op (median, min..max) | p95 step ms | p95 vs no-op | verification share of step time |\n");
  std::printf("|---------:|---------|----------------------:|-----------------------------|------------:|-------------:|--------------------------------:|\n");
  for (int b : batches) {
    std::vector<double> tps[3], p95[3], share[3];
    for (int r = 0; r < repeats; ++r) {
      for (int k0 = 0; k0 < 3; ++k0) {
        const int k = (k0 + r) % 3;  // rotate the order every repeat
        double sh = 0;
        StepStats st = TimeDecode(rts[k], b, steps, 8, info.vocab_size, &sh);
        tps[k].push_back(st.tokens_per_s);
        p95[k].push_back(st.p95_ms);
        share[k].push_back(sh);
      }
    }
    for (int k = 0; k < 3; ++k) {
      std::vector<double> ratio(repeats), pr(repeats);
      for (int r = 0; r < repeats; ++r) {
        ratio[r] = tps[k][r] / tps[0][r];
        pr[r] = p95[k][r] / p95[0][r];
      }
      std::printf("| %8d | %-11s | %21.1f | %.4f (%.4f..%.4f)    | %11.2f | %12.4f | %30.5f%% |\n", b, names[k],
                  Percentile(tps[k], 0.5), Percentile(ratio, 0.5), *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()), Percentile(p95[k], 0.5), Percentile(pr, 0.5),
                  100 * Percentile(share[k], 0.5));
    }
  }
  std::printf("\ncallback tracker events seen: %llu\n", static_cast<unsigned long long>(counts.events));
  for (auto* rt : rts) llm_runtime_destroy(rt);
  return 0;
}

}  // namespace

// KV bytes per token, capacity and sessions per codec for each model directory's config.
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

// A runtime over `dir` for a bench, or nullptr (the error printed).
llm_runtime* OpenBenchRuntime(const fs::path& dir, int threads, uint64_t kv_budget, int32_t kv_dtype,
                              uint32_t max_tokens_per_step, llm_runtime_info* info) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.num_threads = threads;
  ro.kv_budget_bytes = kv_budget;
  ro.kv_dtype = kv_dtype;
  ro.max_tokens_per_step = max_tokens_per_step;
  llm_runtime* rt = nullptr;
  if (llm_runtime_create(dir.c_str(), &ro, &rt) != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return nullptr;
  }
  info->struct_size = sizeof(*info);
  llm_runtime_get_info(rt, info);
  return rt;
}

// Prefill and decode speed of dense MLA (Kimi K2), MLA + DSA (GLM-5) and GQA (GLM-4.5) at
// each context length, same sizes otherwise.
int RunContextBench(const fs::path& base, const std::vector<int>& contexts, const std::vector<int>& batches,
                    int steps, int threads) {
  std::printf("llm-bench --context: generated models of equal hidden size, layers and MoE: Kimi K2 (MLA), GLM-5 "
              "(MLA + DSA, index_topk %lld), GLM-4.5 (GQA, 8 query / 2 KV heads of 128)\n\n",
              static_cast<long long>(ContextConfig(true).index_topk));
  std::printf("| model | context | sessions | attention per query | KV B/token | prefill tok/s | decode tok/s | "
              "decode vs K2 dense |\n|---|---:|---:|---|---:|---:|---:|---:|\n");
  for (int ctx : contexts) {
    for (int b : batches) {
      double dense_tps = 0;
      for (int model = 0; model < 3; ++model) {
        const bool dsa = model == 1, gqa = model == 2;
        const BenchConfig cfg = ContextConfig(dsa, gqa);
        const fs::path dir = base / (gqa ? "glm45-gqa" : dsa ? "glm5-dsa" : "k2-dense");
        if (!WriteCheckpoint(cfg, dir)) return 1;
        llm_runtime_info info;
        llm_runtime* rt = OpenBenchRuntime(dir, threads, 1ull << 30, LLM_KV_DTYPE_BF16, 2048, &info);
        if (rt == nullptr) return 1;
        llm_sampling_options so;
        llm_sampling_options_init(&so);
        so.max_new_tokens = static_cast<uint32_t>(steps + 2);
        std::vector<llm_session*> ss(b);
        for (int i = 0; i < b; ++i) {
          llm_session_create(rt, &so, &ss[i]);
          std::vector<int32_t> prompt(ctx);
          for (int k = 0; k < ctx; ++k) prompt[k] = static_cast<int32_t>((i * 131 + k * 17 + 1) % cfg.vocab);
          llm_session_append_tokens(ss[i], prompt.data(), prompt.size());
        }
        std::vector<llm_step_result> res(b);
        size_t n = 0;
        // Prefill until every session has sampled its first token.
        std::vector<llm_session*> pending(ss.begin(), ss.end());
        const auto t0 = Clock::now();
        while (!pending.empty()) {
          if (llm_decode_step(rt, res.data(), res.size(), &n) != LLM_OK) {
            std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
            return 1;
          }
          for (size_t r = 0; r < n; ++r) {
            if (res[r].token != LLM_TOKEN_NONE) pending.erase(std::remove(pending.begin(), pending.end(), res[r].session), pending.end());
          }
        }
        const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
        const auto t1 = Clock::now();
        for (int s = 0; s < steps; ++s) llm_decode_step(rt, res.data(), res.size(), &n);
        const double tps = b * steps / std::chrono::duration<double>(Clock::now() - t1).count();
        if (model == 0) dense_tps = tps;
        const bool sparse = dsa && ctx > cfg.index_topk;
        std::printf("| %s | %d | %d | %s | %llu | %.1f | %.2f | %.2fx |\n",
                    gqa ? "GLM-4.5 GQA" : dsa ? "GLM-5 DSA" : "K2 dense", ctx, b,
                    sparse ? "512 selected" : gqa ? "all (GQA)" : "all (dense)",
                    static_cast<unsigned long long>(info.kv_bytes_per_token),
                    b * ctx / prefill_s, tps, tps / dense_tps);
        std::fflush(stdout);
        for (auto* s : ss) llm_session_destroy(s);
        llm_runtime_destroy(rt);
      }
    }
  }
  return 0;
}

// Prefill tokens/s: one session's prompt of `len` tokens, in steps of up to 512 tokens.
double TimePrefill(llm_runtime* rt, int len, int64_t vocab) {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 1;
  llm_session* s = nullptr;
  llm_session_create(rt, &so, &s);
  std::vector<int32_t> prompt(len);
  for (int k = 0; k < len; ++k) prompt[k] = static_cast<int32_t>((k * 29 + 3) % vocab);
  llm_session_append_tokens(s, prompt.data(), prompt.size());
  llm_step_result r;
  size_t n = 0;
  const auto t0 = Clock::now();
  bool done = false;
  while (!done && llm_decode_step(rt, &r, 1, &n) == LLM_OK) done = n == 1 && r.token != LLM_TOKEN_NONE;
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  llm_session_destroy(s);
  return len / sec;
}

// Decode (per session count) and prefill speed per weight format and KV codec, as ratios to BF16
// weights with BF16 KV measured in the same run.
int RunFormatBench(const fs::path& base, const std::vector<std::string>& formats, const std::vector<int>& batches,
                   int steps, int threads, int prefill_len) {
  struct Row {
    std::string weights;
    int32_t kv;
  };
  std::vector<Row> rows;
  for (const auto& f : formats) rows.push_back({f, LLM_KV_DTYPE_BF16});
  rows.push_back({"bf16", LLM_KV_DTYPE_FP8_E4M3});
  rows.push_back({"bf16", LLM_KV_DTYPE_FP8_E4M3_TILED});
  BenchConfig ref;
  const double ref_bytes = WeightBytesPerToken(ref);
  std::printf("llm-bench --formats: generated Kimi-K2-structure model (%.2f GB of BF16 weights read per token at "
              "batch 1), %d decode steps, prefill of one %d-token prompt\n\n",
              ref_bytes / 1e9, steps, prefill_len);
  std::printf("| weights | KV | weight GB in memory | GB read/token (batch 1) | BF16/this bytes | sessions | decode tok/s |"
              " vs BF16 | prefill tok/s | vs BF16 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<double> base_decode(batches.size(), 0);
  double base_prefill = 0;
  for (const Row& row : rows) {
    BenchConfig cfg;
    cfg.weights = row.weights;
    const fs::path dir = row.weights == "bf16" ? base : fs::path(base.string() + "-" + row.weights);
    if (!WriteCheckpoint(cfg, dir)) return 1;
    llm_runtime_info info;
    llm_runtime* rt = OpenBenchRuntime(dir, threads, 512ull << 20, row.kv, 0, &info);
    if (rt == nullptr) return 1;
    const double bytes = WeightBytesPerToken(cfg);
    const double prefill = TimePrefill(rt, prefill_len, cfg.vocab);
    const bool is_base = row.weights == "bf16" && row.kv == LLM_KV_DTYPE_BF16;
    if (is_base) base_prefill = prefill;
    for (size_t i = 0; i < batches.size(); ++i) {
      const StepStats st = TimeDecode(rt, batches[i], steps, 8, cfg.vocab);
      if (is_base) base_decode[i] = st.tokens_per_s;
      std::printf("| %s | %s | %.2f | %.3f | %.2fx | %d | %.2f | %.2fx | %s | %s |\n", row.weights.c_str(),
                  row.kv == LLM_KV_DTYPE_BF16 ? "BF16" : row.kv == LLM_KV_DTYPE_FP8_E4M3 ? "FP8 flat" : "FP8 tiled",
                  info.weight_bytes / 1e9, bytes / 1e9,
                  ref_bytes / bytes, batches[i], st.tokens_per_s, base_decode[i] > 0 ? st.tokens_per_s / base_decode[i] : 0.0,
                  i == 0 ? (std::to_string(static_cast<int>(prefill + 0.5))).c_str() : "",
                  i == 0 ? (std::to_string(prefill / base_prefill).substr(0, 4) + "x").c_str() : "");
      std::fflush(stdout);
    }
    llm_runtime_destroy(rt);
  }
  return 0;
}

int main(int argc, char** argv) {
  fs::path dir = "/tmp/llmrt-bench-model";
  std::vector<int> batches = {1, 4, 16, 64};
  int steps = 8, threads = 0, prompt_len = 8, repeats = 5;
  bool integrity = false;
  std::string model, tokenize_dir, text_file, kv_table, formats;
  int prefill_len = 256;
  std::vector<int> contexts;
  double budget_gib = 64;
  int session_tokens = 8192;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--integrity") {
      integrity = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "llm-bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--model") model = argv[i + 1];
    else if (a == "--tokenize") tokenize_dir = argv[i + 1];
    else if (a == "--text") text_file = argv[i + 1];
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (a == "--sessions") batches = ParseList(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--prompt") prompt_len = std::atoi(argv[i + 1]);
    else if (a == "--kv-table") kv_table = argv[i + 1];
    else if (a == "--budget-gib") budget_gib = std::atof(argv[i + 1]);
    else if (a == "--session-tokens") session_tokens = std::atoi(argv[i + 1]);
    else if (a == "--context") contexts = ParseList(argv[i + 1]);
    else if (a == "--formats") formats = argv[i + 1];
    else if (a == "--prefill") prefill_len = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: llm-bench [--dir DIR] [--sessions 1,4,16,64] [--steps N] [--threads N] [--prompt N]\n"
                           "       llm-bench --integrity [--model DIR] [--sessions 1,8,64] [--steps N] [--repeats N]\n"
                           "       llm-bench --tokenize DIR --text FILE [--repeats N]\n"
                           "       llm-bench --kv-table DIR[,DIR...] [--budget-gib N] [--session-tokens N]\n"
                           "       llm-bench --context 256,2048 [--sessions 1,4] [--steps N]\n"
                           "       llm-bench --formats bf16,fp8,int4-g32,int4-g128,int4-g32-all [--sessions 1,16,64] "
                           "[--steps N] [--prefill N]\n");
      return 2;
    }
    ++i;
  }
  if (!tokenize_dir.empty()) return RunTokenizeBench(tokenize_dir, text_file, repeats);
  if (!kv_table.empty()) {
    std::vector<std::string> dirs;
    for (size_t b = 0, e; b <= kv_table.size(); b = e + 1) {
      e = kv_table.find(',', b);
      if (e == std::string::npos) e = kv_table.size();
      if (e > b) dirs.push_back(kv_table.substr(b, e - b));
    }
    return RunKvTable(dirs, budget_gib, session_tokens);
  }
  if (!formats.empty()) {
    std::vector<std::string> fs_list;
    for (size_t b = 0, e; b <= formats.size(); b = e + 1) {
      e = formats.find(',', b);
      if (e == std::string::npos) e = formats.size();
      if (e > b) fs_list.push_back(formats.substr(b, e - b));
    }
    std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 16, 64} : batches;
    return RunFormatBench(dir, fs_list, b, steps, threads, prefill_len);
  }
  if (!contexts.empty()) {
    std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 4} : batches;
    return RunContextBench(dir.parent_path() / "llmrt-bench-context", contexts, b, steps, threads);
  }
  const BenchConfig cfg;
  if (integrity) {
    if (model.empty()) {
      if (!WriteCheckpoint(cfg, dir)) return 1;
      model = dir.string();
    }
    std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 8, 64} : batches;
    return RunIntegrityBench(model, b, steps, repeats, threads);
  }
  if (!WriteCheckpoint(cfg, dir)) return 1;
  const int nthreads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  double read_gbs = 0;
  const double copy_gbs = MemcpyBandwidth(nthreads, &read_gbs);
  const double kernel_gbs = KernelStreamBandwidth(nthreads);

  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.num_threads = threads;
  ro.kv_budget_bytes = 512ull << 20;
  llm_runtime* rt = nullptr;
  auto t_load = Clock::now();
  llm_status st = llm_runtime_create(dir.c_str(), &ro, &rt);
  if (st != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s: %s\n", llm_status_string(st), llm_last_error());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  const double per_token = WeightBytesPerToken(cfg);
  std::printf("llm-bench: %s, %.2f B parameters, %.2f GB BF16 weights (loaded in %.2f s), %d threads\n",
              info.architecture, info.num_parameters / 1e9, info.weight_bytes / 1e9, load_s, nthreads);
  std::printf("weights read per decode token at batch 1: %.3f GB; KV %llu B/token\n", per_token / 1e9,
              static_cast<unsigned long long>(info.kv_bytes_per_token));
  std::printf("memcpy bandwidth (%d threads, 1 GiB): %.2f GB/s read+write, %.2f GB/s read\n", nthreads,
              copy_gbs, read_gbs);
  std::printf("BF16 matvec kernel over one contiguous 1 GiB matrix: %.2f GB/s\n\n", kernel_gbs);
  std::printf("| sessions | decode tok/s | step p50 ms | step p95 ms | tok/s vs 1 session |\n");
  std::printf("|---------:|-------------:|------------:|------------:|-------------------:|\n");
  double base_tps = 0, batch1_step = 0;
  for (int b : batches) {
    llm_sampling_options so;
    llm_sampling_options_init(&so);
    so.max_new_tokens = static_cast<uint32_t>(steps + 2);
    std::vector<llm_session*> ss(b);
    for (int i = 0; i < b; ++i) {
      llm_session_create(rt, &so, &ss[i]);
      std::vector<int32_t> prompt(prompt_len);
      for (int k = 0; k < prompt_len; ++k) prompt[k] = (i * 131 + k * 17 + 1) % static_cast<int>(cfg.vocab);
      llm_session_append_tokens(ss[i], prompt.data(), prompt.size());
    }
    std::vector<llm_step_result> res(b);
    size_t n = 0;
    // Prefill (one step with the default budget) plus one warm-up decode step.
    for (int w = 0; w < 2; ++w) llm_decode_step(rt, res.data(), res.size(), &n);
    std::vector<double> times;
    for (int s = 0; s < steps; ++s) {
      auto t0 = Clock::now();
      st = llm_decode_step(rt, res.data(), res.size(), &n);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (st != LLM_OK || n != static_cast<size_t>(b)) {
        std::fprintf(stderr, "llm-bench: step failed: %s\n", llm_last_error());
        return 1;
      }
    }
    double total = 0;
    for (double t : times) total += t;
    const double tps = b * steps / total;
    if (b == batches[0]) base_tps = tps;
    if (b == 1) batch1_step = total / steps;
    std::printf("| %8d | %12.2f | %11.1f | %11.1f | %17.2fx |\n", b, tps, Percentile(times, 0.5) * 1e3,
                Percentile(times, 0.95) * 1e3, tps / base_tps);
    for (auto* s : ss) llm_session_destroy(s);
  }
  if (batch1_step > 0) {
    const double gbs = per_token / batch1_step / 1e9;
    std::printf("\nbatch 1: %.2f GB/s of weight reads = %.0f%% of memcpy read+write bandwidth "
                "(%.0f%% of its read half), %.0f%% of the contiguous matvec kernel\n",
                gbs, 100 * gbs / copy_gbs, 100 * gbs / read_gbs, 100 * gbs / kernel_gbs);
  }
  llm_runtime_destroy(rt);
  return 0;
}
