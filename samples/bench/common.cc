#include "common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llm_bench {

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

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  for (size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

const char* BackendName(int32_t backend) {
  switch (backend) {
    case LLM_BACKEND_CPU: return "cpu";
    case LLM_BACKEND_CUDA: return "cuda";
    default: return "auto";
  }
}

llm_status CreateBenchRuntime(const fs::path& dir, llm_runtime_options* ro, llm_runtime** rt) {
  ro->backend = g_backend;
  ro->weight_memory = g_weight_memory;
  const llm_status st = g_synthetic ? llm_runtime_create_synthetic(dir.c_str(), g_synthetic_seed, ro, rt)
                                    : llm_runtime_create(dir.c_str(), ro, rt);
  if (st == LLM_OK) {
    llm_runtime_info info;
    info.struct_size = sizeof(info);
    if (llm_runtime_get_info(*rt, &info) == LLM_OK) g_backend_ran = info.backend;
  }
  return st;
}

llm_runtime* OpenBenchRuntime(const fs::path& dir, int threads, uint64_t kv_budget, int32_t kv_dtype,
                              uint32_t max_tokens_per_step, llm_runtime_info* info) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.num_threads = threads;
  ro.kv_budget_bytes = kv_budget;
  ro.kv_dtype = kv_dtype;
  ro.max_tokens_per_step = max_tokens_per_step;
  ro.tensor_parallel = g_tensor_parallel;
  ro.quantized_activations = g_quantized_activations;
  llm_runtime* rt = nullptr;
  if (CreateBenchRuntime(dir, &ro, &rt) != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return nullptr;
  }
  info->struct_size = sizeof(*info);
  llm_runtime_get_info(rt, info);
  return rt;
}

bool StepUntilAllSample(llm_runtime* rt, std::vector<llm_step_result>& res, int max_steps) {
  for (int i = 0; i < max_steps; ++i) {
    size_t n = 0;
    if (llm_decode_step(rt, res.data(), res.size(), &n) != LLM_OK) {
      std::fprintf(stderr, "llm-bench: a prefill step failed: %s\n", llm_last_error());
      return false;
    }
    if (n == res.size() &&
        std::all_of(res.begin(), res.end(), [](const llm_step_result& r) { return r.token != LLM_TOKEN_NONE; })) {
      return true;
    }
  }
  std::fprintf(stderr, "llm-bench: %zu sessions did not all reach decoding in %d steps\n", res.size(), max_steps);
  return false;
}

StepStats TimeDecode(llm_runtime* rt, int sessions, int steps, int prompt_len, int64_t vocab, double* check_share) {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.flags = LLM_SAMPLING_NO_LOGITS;  // only the sampled ids come back
  // Sessions that finish their prefill early decode while the others prefill.
  const int prefill_steps = 64 + sessions * prompt_len / 128;
  so.max_new_tokens = static_cast<uint32_t>(steps + 4 + prefill_steps);
  std::vector<llm_session*> ss(sessions);
  for (int i = 0; i < sessions; ++i) {
    llm_session_create(rt, &so, &ss[i]);
    std::vector<int32_t> prompt(prompt_len);
    for (int k = 0; k < prompt_len; ++k) prompt[k] = static_cast<int32_t>((i * 131 + k * 17 + 1) % vocab);
    llm_session_append_tokens(ss[i], prompt.data(), prompt.size());
  }
  std::vector<llm_step_result> res(sessions);
  size_t n = 0;
  if (!StepUntilAllSample(rt, res, prefill_steps)) return {};
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

double TimePrefill(llm_runtime* rt, int len, int64_t vocab) {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.flags = LLM_SAMPLING_NO_LOGITS;  // only the sampled ids come back
  so.max_new_tokens = 1;
  llm_session* s = nullptr;
  if (llm_session_create(rt, &so, &s) != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return -1;
  }
  std::vector<int32_t> prompt(len);
  for (int k = 0; k < len; ++k) prompt[k] = static_cast<int32_t>((k * 29 + 3) % vocab);
  llm_session_append_tokens(s, prompt.data(), prompt.size());
  llm_step_result r;
  size_t n = 0;
  const auto t0 = Clock::now();
  bool done = false;
  llm_status st = LLM_OK;
  while (!done && (st = llm_decode_step(rt, &r, 1, &n)) == LLM_OK) {
    if (n == 1 && r.status != LLM_OK) {
      st = r.status;
      break;
    }
    done = n == 1 && r.token != LLM_TOKEN_NONE;
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!done) std::fprintf(stderr, "llm-bench: prefill of %d tokens failed: %s: %s\n", len, llm_status_string(st), llm_last_error());
  llm_session_destroy(s);
  return done ? len / sec : -1;
}

}  // namespace llm_bench
