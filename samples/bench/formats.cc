// llm-bench --formats bf16,fp8,int4-g32,...: the generated model written in each weight format
// (next to DIR), plus BF16 weights with the FP8 KV codecs; decode speed per session count and
// prefill speed, as ratios to BF16 weights with BF16 KV measured in the same run. A format
// suffixed "-a8" (int4-g32-a8) runs that format's weights under LLM_ACTIVATIONS_INT8.
#include <cstdio>
#include <string>

#include "modes.h"

namespace llm_bench {

int RunFormatBench(const ModelGenerator& gen, const fs::path& base, const std::vector<std::string>& formats,
                   const std::vector<int>& batches, int steps, int threads, int prefill_len) {
  struct Row {
    std::string weights;
    int32_t kv;
  };
  std::vector<Row> rows;
  for (const auto& f : formats) rows.push_back({f, LLM_KV_DTYPE_BF16});
  rows.push_back({"bf16", LLM_KV_DTYPE_FP8_E4M3});
  rows.push_back({"bf16", LLM_KV_DTYPE_FP8_E4M3_TILED});
  GeneratedModel ref;
  if (!gen.Describe("k2", "bf16", &ref)) return 1;
  const double ref_bytes = ref.weight_bytes_per_token;
  std::printf("llm-bench --formats: generated Kimi-K2-structure model (%.2f GB of BF16 weights read per token at "
              "batch 1), %d decode steps, prefill of one %d-token prompt\n\n",
              ref_bytes / 1e9, steps, prefill_len);
  std::printf("| weights | KV | weight GB in memory | GB read/token (batch 1) | BF16/this bytes | sessions | decode tok/s |"
              " vs BF16 | prefill tok/s | vs BF16 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<double> base_decode(batches.size(), 0);
  double base_prefill = 0;
  for (const Row& row : rows) {
    const bool a8 = row.weights.size() > 3 && row.weights.compare(row.weights.size() - 3, 3, "-a8") == 0;
    const std::string weights = a8 ? row.weights.substr(0, row.weights.size() - 3) : row.weights;
    const fs::path dir = weights == "bf16" ? base : fs::path(base.string() + "-" + weights);
    GeneratedModel cfg;
    if (!gen.Ensure(dir, "k2", weights, &cfg)) return 1;
    llm_runtime_info info;
    g_quantized_activations = a8 ? LLM_ACTIVATIONS_INT8 : LLM_ACTIVATIONS_EXACT;
    llm_runtime* rt = OpenBenchRuntime(dir, threads, 512ull << 20, row.kv, 0, &info);
    g_quantized_activations = LLM_ACTIVATIONS_EXACT;
    if (rt == nullptr) return 1;
    const double bytes = cfg.weight_bytes_per_token;
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
  std::printf("\n(%s backend)\n", BackendName(g_backend_ran));
  return 0;
}

}  // namespace llm_bench
