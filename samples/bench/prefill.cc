// llm-bench --prefill-lens 128,512: prefill speed of one session's prompt on a generated model or
// any checkpoint (--model), in one forward pass per prompt where max_tokens_per_step allows
// (it is set to the longest prompt, up to 2048), so the number compares with engines that
// process a prompt as one batch.
#include <algorithm>
#include <cstdio>

#include "modes.h"

namespace llm_bench {

int RunPrefillBench(const fs::path& dir, const GeneratedModel& cfg, const std::vector<int>& lens, int repeats,
                    int threads) {
  int longest = 0;
  for (int len : lens) {
    if (len < 1 || len > 1 << 20) {
      std::fprintf(stderr, "llm-bench: --prefill-lens wants lengths from 1 to 1048576, got %d\n", len);
      return 2;
    }
    longest = std::max(longest, len);
  }
  if (repeats < 1) repeats = 1;
  llm_runtime_info info;
  const uint32_t per_step = static_cast<uint32_t>(std::min(longest, 2048));
  llm_runtime* rt = OpenBenchRuntime(dir, threads, 1ull << 30, g_kv_dtype >= 0 ? g_kv_dtype : LLM_KV_DTYPE_BF16, per_step, &info);
  if (rt == nullptr) return 1;
  std::printf("llm-bench --prefill-lens: %s (%s%s), %s backend, %d threads, up to %u tokens per forward pass, "
              "%d repeats\n\n",
              dir.c_str(), info.architecture, g_synthetic ? ", synthetic weights" : "", BackendName(info.backend),
              threads, per_step, repeats);
  // One warm-up pass so first-touch page faults of the weights are not timed.
  if (TimePrefill(rt, std::min(longest, 16), cfg.vocab) < 0) return 1;
  std::vector<std::vector<double>> tps(lens.size());
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < lens.size(); ++i) {
      const double t = TimePrefill(rt, lens[i], cfg.vocab);
      if (t < 0) return 1;
      tps[i].push_back(t);
    }
  }
  std::printf("| prompt tokens | prefill tok/s (median) | min | max |\n|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < lens.size(); ++i) {
    std::printf("| %d | %.2f | %.2f | %.2f |\n", lens[i], Percentile(tps[i], 0.5), Percentile(tps[i], 0),
                Percentile(tps[i], 1));
  }
  llm_runtime_destroy(rt);
  return 0;
}

}  // namespace llm_bench
