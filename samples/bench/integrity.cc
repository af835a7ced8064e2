// llm-bench --integrity: decode throughput and p95 step latency with the no-op tracker, the
// built-in tag checker and a host callback tracker (counting events), interleaving the three in
// every repeat so machine noise hits them alike; ratios to no-op with their spread, and the share
// of step time spent verifying.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "modes.h"

namespace llm_bench {

namespace {

struct EventCounts {
  uint64_t events = 0;
};

}  // namespace

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
    if (CreateBenchRuntime(model, &ro, &rts[k]) != LLM_OK) {
      std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
      return 1;
    }
  }
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rts[0], &info);
  std::printf("llm-bench --integrity: %s (%s), %.3f B parameters, %s backend; %d repeats of %d decode steps, "
              "trackers interleaved\n\n",
              model.c_str(), info.architecture, info.num_parameters / 1e9, BackendName(info.backend), repeats, steps);
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

}  // namespace llm_bench
