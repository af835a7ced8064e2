// llm-bench --context 256,4096: prefill and decode speed of generated models of equal hidden size,
// layers and MoE: Kimi K2 structure (dense MLA), GLM-5 (MLA + DSA indexer, index_topk 512) and
// GLM-4.5 (GQA), each session prefilled to the given context lengths. Below index_topk the MLA
// models attend densely; above it GLM-5 attends to 512 positions.
#include <algorithm>
#include <cstdio>

#include "modes.h"

namespace llm_bench {

int RunContextBench(const ModelGenerator& gen, const fs::path& base, const std::vector<int>& contexts,
                    const std::vector<int>& batches, int steps, int threads) {
  GeneratedModel glm5;
  if (!gen.Describe("context-glm5", "bf16", &glm5)) return 1;
  std::printf("llm-bench --context: generated models of equal hidden size, layers and MoE: Kimi K2 (MLA), GLM-5 "
              "(MLA + DSA, index_topk %lld), GLM-4.5 (GQA, 8 query / 2 KV heads of 128)\n\n",
              static_cast<long long>(glm5.index_topk));
  std::printf("| model | context | sessions | attention per query | KV B/token | prefill tok/s | decode tok/s | "
              "decode vs K2 dense |\n|---|---:|---:|---|---:|---:|---:|---:|\n");
  for (int ctx : contexts) {
    for (int b : batches) {
      double dense_tps = 0;
      for (int model = 0; model < 3; ++model) {
        const bool dsa = model == 1, gqa = model == 2;
        const fs::path dir = base / (gqa ? "glm45-gqa" : dsa ? "glm5-dsa" : "k2-dense");
        GeneratedModel cfg;
        if (!gen.Ensure(dir, gqa ? "context-glm45" : dsa ? "context-glm5" : "context-k2", "bf16", &cfg)) return 1;
        llm_runtime_info info;
        llm_runtime* rt = OpenBenchRuntime(dir, threads, 1ull << 30, LLM_KV_DTYPE_BF16, 2048, &info);
        if (rt == nullptr) return 1;
        llm_sampling_options so;
        llm_sampling_options_init(&so);
        so.flags = LLM_SAMPLING_NO_LOGITS;  // only the sampled ids come back
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
  std::printf("\n(%s backend)\n", BackendName(g_backend_ran));
  return 0;
}

}  // namespace llm_bench
