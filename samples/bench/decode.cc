// llm-bench's default mode: decode tokens/s at each session count on a generated model (Kimi K2
// structure unless --preset says otherwise) or any checkpoint (--model), and the achieved
// weight-read bandwidth at batch 1 as a share of a read-only streaming bandwidth (the ceiling),
// a memcpy bandwidth and a plain BF16 dot-product loop, all measured in the same run.
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "baselines.h"
#include "modes.h"

namespace llm_bench {
namespace {

// A session that returns sampled ids only, its prompt appended: prompt_len generated ids, the
// i-th prompt of a run (distinct prompts per i). nullptr if the runtime refused either call.
llm_session* OpenSession(llm_runtime* rt, const GeneratedModel& cfg, int prompt_len, int i, uint32_t max_new_tokens) {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.flags = LLM_SAMPLING_NO_LOGITS;
  so.max_new_tokens = max_new_tokens;
  llm_session* s = nullptr;
  if (llm_session_create(rt, &so, &s) != LLM_OK) return nullptr;
  std::vector<int32_t> prompt(prompt_len);
  for (int k = 0; k < prompt_len; ++k) prompt[k] = (i * 131 + k * 17 + 1) % static_cast<int>(cfg.vocab);
  if (llm_session_append_tokens(s, prompt.data(), prompt.size()) != LLM_OK) {
    llm_session_destroy(s);
    return nullptr;
  }
  return s;
}

}  // namespace

int RunDecodeBench(const fs::path& dir, const GeneratedModel& cfg, const std::vector<int>& batches, int steps,
                   int threads, int prompt_len, bool baselines) {
  const int nthreads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  double read_gbs = 0, stream_gbs = 0, copy_gbs = 0, dot_gbs = 0;

  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.num_threads = threads;
  ro.kv_budget_bytes = static_cast<uint64_t>(g_kv_gib * (1ull << 30));
  if (g_kv_dtype >= 0) ro.kv_dtype = g_kv_dtype;
  ro.tensor_parallel = g_tensor_parallel;
  ro.quantized_activations = g_quantized_activations;
  llm_runtime* rt = nullptr;
  auto t_load = Clock::now();
  llm_status st = CreateBenchRuntime(dir, &ro, &rt);
  if (st != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s: %s\n", llm_status_string(st), llm_last_error());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  // Time to first token: one session's prompt prefilled and its first token sampled, counted
  // from the call that created the runtime (what a benchmark run on a fresh machine waits for).
  double first_token_s = -1;
  {
    llm_session* s = OpenSession(rt, cfg, prompt_len, 0, 1);
    if (s != nullptr) {
      llm_step_result r[1];
      size_t n = 0;
      for (int i = 0; i < 1 << 16 && first_token_s < 0; ++i) {
        if (llm_decode_step(rt, r, 1, &n) != LLM_OK) break;
        if (n == 1 && r[0].token != LLM_TOKEN_NONE) {
          first_token_s = std::chrono::duration<double>(Clock::now() - t_load).count();
        }
      }
    }
    llm_session_destroy(s);
    if (first_token_s < 0) {
      std::fprintf(stderr, "llm-bench: the first token failed: %s\n", llm_last_error());
      return 1;
    }
  }
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  const double per_token = cfg.weight_bytes_per_token;
  // The baselines read memory of the page size the engine's weights have (a read stream from
  // 4 KiB pages is no ceiling for weights in 2 MiB pages).
  const bool huge = info.weight_memory == LLM_WEIGHT_MEMORY_HUGE_PAGES;
  if (baselines) {
    stream_gbs = ReadStreamBandwidth(nthreads, huge);
    copy_gbs = MemcpyBandwidth(nthreads, huge, &read_gbs);
    dot_gbs = Bf16DotStreamBandwidth(nthreads, huge);
  }
  std::printf("llm-bench: %s (%s%s), %s backend, %.2f B parameters, %.2f GB of weights as stored (%s in %.2f s, "
              "first token %.2f s after creation began), %d threads, tensor_parallel %u (%.2f GB resident per rank, "
              "%s)\n",
              dir.c_str(), info.architecture, g_synthetic ? ", synthetic weights" : "", BackendName(info.backend),
              info.num_parameters / 1e9, info.weight_bytes / 1e9, g_synthetic ? "generated" : "loaded", load_s,
              first_token_s, nthreads, info.tensor_parallel, info.rank_weight_bytes / 1e9,
              info.weight_memory == LLM_WEIGHT_MEMORY_MAPPED       ? "file-mapped"
              : info.weight_memory == LLM_WEIGHT_MEMORY_HUGE_PAGES ? "in huge pages"
                                                                   : "in device memory");
  const int kv = info.kv_dtype;
  std::printf("weights read per decode token at batch 1: %.3f GB; KV %s, %llu B/token, %llu tokens in %.2f GiB\n",
              per_token / 1e9,
              kv == LLM_KV_DTYPE_F32              ? "F32"
              : kv == LLM_KV_DTYPE_FP8_E4M3       ? "FP8"
              : kv == LLM_KV_DTYPE_FP8_E4M3_TILED ? "FP8 tiled"
                                                  : "BF16",
              static_cast<unsigned long long>(info.kv_bytes_per_token),
              static_cast<unsigned long long>(info.kv_capacity_tokens), g_kv_gib);
  if (baselines) {
    std::printf("read-only streaming bandwidth (%d threads, sum over 1 GiB in %s pages): %.2f GB/s\n", nthreads,
                huge ? "2 MiB" : "4 KiB", stream_gbs);
  std::printf("memcpy bandwidth (%d threads, 1 GiB): %.2f GB/s read+write, %.2f GB/s read\n", nthreads,
              copy_gbs, read_gbs);
    std::printf("BF16 dot-product loop (in llm-bench) over one contiguous 1 GiB matrix: %.2f GB/s\n", dot_gbs);
  }
  std::printf("\n");
  std::printf("%s backend:\n", BackendName(info.backend));
  std::printf("| sessions | decode tok/s | step p50 ms | step p95 ms | tok/s vs 1 session | collectives ms/step |\n");
  std::printf("|---------:|-------------:|------------:|------------:|-------------------:|--------------------:|\n");
  double base_tps = 0, batch1_step = 0, batch1_p50 = 0;
  std::map<int, std::array<double, 2>> warm_ms;  // per batch: the two warm-up decode steps
  std::map<int, std::array<double, 2>> slow;     // per batch: the slowest timed step (1-based) and its ms
  for (int b : batches) {
    std::vector<llm_session*> ss(b);
    // Sessions that finish their prefill early decode while the others prefill: room for those
    // tokens too (at most warmup_steps; a step prefills at least 128 tokens).
    const int warmup_steps = 64 + b * prompt_len / 128;
    for (int i = 0; i < b; ++i) {
      ss[i] = OpenSession(rt, cfg, prompt_len, i, static_cast<uint32_t>(steps + 2 + warmup_steps));
      if (ss[i] == nullptr) {
        std::fprintf(stderr, "llm-bench: session %d of %d: %s\n", i, b, llm_last_error());
        return 1;
      }
    }
    std::vector<llm_step_result> res(b);
    size_t n = 0;
    // Prefill (as many steps as the step budget needs: b * prompt_len tokens may exceed one step's
    // max_tokens_per_step) until every session samples in the same step.
    if (!StepUntilAllSample(rt, res, warmup_steps)) return 1;
    // Two warm-up decode steps: on CUDA the first pass of a context bucket runs directly and the
    // second is recorded as a graph, which the timed steps replay. Their times are printed after
    // the table (a capture's cost is paid once per bucket and batch size).
    for (double& t : warm_ms[b]) {
      const auto t0 = Clock::now();
      llm_decode_step(rt, res.data(), res.size(), &n);
      t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    std::vector<double> times;
    llm_runtime_info before;
    before.struct_size = sizeof(before);
    llm_runtime_get_info(rt, &before);
    for (int s = 0; s < steps; ++s) {
      auto t0 = Clock::now();
      st = llm_decode_step(rt, res.data(), res.size(), &n);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (st != LLM_OK || n != static_cast<size_t>(b)) {
        std::fprintf(stderr, "llm-bench: step failed: %s\n",
                     st != LLM_OK ? llm_last_error() : "fewer results than sessions (a session ended early)");
        return 1;
      }
    }
    double total = 0;
    for (double t : times) total += t;
    const size_t slowest = static_cast<size_t>(std::max_element(times.begin(), times.end()) - times.begin());
    slow[b] = {static_cast<double>(slowest + 1), times[slowest] * 1e3};
    const double tps = b * steps / total;
    if (b == batches[0]) base_tps = tps;
    if (b == 1) {
      batch1_step = total / steps;
      batch1_p50 = Percentile(times, 0.5);
    }
    llm_runtime_info after;
    after.struct_size = sizeof(after);
    llm_runtime_get_info(rt, &after);
    // Rank 0's time inside all-reduces and all-gathers, waiting for the other ranks included.
    const double coll_ms = (after.collective_ns - before.collective_ns) * 1e-6 / steps;
    std::printf("| %8d | %12.2f | %11.1f | %11.1f | %17.2fx | %19.2f |\n", b, tps, Percentile(times, 0.5) * 1e3,
                Percentile(times, 0.95) * 1e3, tps / base_tps, coll_ms);
    for (auto* s : ss) llm_session_destroy(s);
  }
  if (info.backend == LLM_BACKEND_CUDA) {
    std::printf("\nwarm-up decode steps (a context bucket's first pass runs directly, its second is recorded as a "
                "CUDA graph):");
    for (const auto& [b, t] : warm_ms) {
      std::printf(" %d sessions %.1f / %.1f ms (slowest timed step: %d, %.1f ms);", b, t[0], t[1],
                  static_cast<int>(slow[b][0]), slow[b][1]);
    }
    std::printf("\n");
  }
  // The memory's speed on a shared machine drifts within a run (one run of the docs read 18.0
  // GB/s before its decode and 12.8 after), so the batch-1 share is also measured in rounds,
  // each a read-only stream right before 8 batch-1 steps, and the median of the rounds' ratios
  // reported.
  std::vector<double> ratios;
  if (batch1_step > 0 && baselines) {
    llm_session* s = OpenSession(rt, cfg, prompt_len, 1, 64);
    if (s == nullptr) {
      std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
      return 1;
    }
    std::vector<llm_step_result> r(1);
    size_t n = 0;
    if (!StepUntilAllSample(rt, r, 64 + prompt_len / 128)) return 1;
    for (int w = 0; w < 2; ++w) llm_decode_step(rt, r.data(), 1, &n);
    std::printf("\nbatch 1 in rounds (a read-only stream, then 8 decode steps):\n");
    std::printf("| round | stream GB/s | decode GB/s | decode / stream |\n|---:|---:|---:|---:|\n");
    for (int round = 0; round < 5; ++round) {
      const double sgbs = ReadStreamBandwidth(nthreads, huge);
      const auto t0 = Clock::now();
      for (int k = 0; k < 8; ++k) {
        if (llm_decode_step(rt, r.data(), 1, &n) != LLM_OK || n != 1) {
          std::fprintf(stderr, "llm-bench: step failed: %s\n", llm_last_error());
          return 1;
        }
      }
      const double dgbs = per_token * 8 / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
      if (sgbs > 0) ratios.push_back(dgbs / sgbs);
      std::printf("| %d | %.2f | %.2f | %.0f%% |\n", round + 1, sgbs, dgbs, sgbs > 0 ? 100 * dgbs / sgbs : 0.0);
    }
    llm_session_destroy(s);
  }
  if (batch1_step > 0 && !baselines) {
    std::printf("\nbatch 1: %.2f GB/s of weight reads\n", per_token / batch1_step / 1e9);
  } else if (batch1_step > 0) {
    // The ceiling is measured again after the decode runs and the higher of the two kept (on a
    // shared machine the memory's speed drifts); the decode's bandwidth is given at the mean step
    // and at the median step (robust to steps that another tenant's burst slowed).
    const double stream_after = ReadStreamBandwidth(nthreads, huge);
    const double ceiling = std::max(stream_gbs, stream_after);
    const double gbs = per_token / batch1_step / 1e9;
    const double gbs_p50 = per_token / batch1_p50 / 1e9;
    std::printf("\nread-only streaming bandwidth again after decoding: %.2f GB/s (ceiling: the higher, %.2f GB/s)\n",
                stream_after, ceiling);
    std::printf("batch 1: %.2f GB/s of weight reads at the mean step = %.0f%% of the read-only streaming bandwidth; "
                "%.2f GB/s at the median step = %.0f%%\n",
                gbs, ceiling > 0 ? 100 * gbs / ceiling : 0.0, gbs_p50, ceiling > 0 ? 100 * gbs_p50 / ceiling : 0.0);
    std::printf("at the mean step: %.0f%% of memcpy read+write bandwidth (%.0f%% of its read half), %.0f%% of the "
                "contiguous dot-product loop\n",
                100 * gbs / copy_gbs, 100 * gbs / read_gbs, 100 * gbs / dot_gbs);
    if (!ratios.empty()) {
      std::printf("batch 1 in rounds: median %.0f%% of the read-only stream measured right before each round\n",
                  100 * Percentile(ratios, 0.5));
    }
  }
  llm_runtime_destroy(rt);
  return 0;
}

}  // namespace llm_bench
