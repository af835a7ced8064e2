// What llm-bench's modes share: list parsing, percentiles, opening a runtime, and timing decode
// steps of a batch of sessions. Everything goes through the public header.
#ifndef LLMRT_SAMPLES_BENCH_COMMON_H_
#define LLMRT_SAMPLES_BENCH_COMMON_H_

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "llmrt/llmrt.h"

namespace llm_bench {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// "1,4,16" -> {1, 4, 16}.
std::vector<int> ParseList(const char* s);

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& s);

// The value at fraction p (0..1) of the sorted values, nearest rank. REQUIRES: !v.empty().
double Percentile(std::vector<double> v, double p);

// A runtime over `dir` for a bench (kv_budget in bytes, max_tokens_per_step 0 for the default),
// with *info filled, or nullptr with the error printed.
// --tp N: every runtime the benchmark opens splits the model over N in-process ranks.
inline uint32_t g_tensor_parallel = 1;
// llm_runtime_options.quantized_activations of the runtimes OpenBenchRuntime opens.
inline int32_t g_quantized_activations = LLM_ACTIVATIONS_EXACT;
// --weight-memory: llm_runtime_options.weight_memory of every runtime the benchmark opens.
inline int32_t g_weight_memory = LLM_WEIGHT_MEMORY_AUTO;
// --kv: llm_runtime_options.kv_dtype of the decode and prefill modes (-1: each mode's default).
inline int32_t g_kv_dtype = -1;
// --kv-gib: the decode mode's KV budget.
inline double g_kv_gib = 0.5;

// --backend cpu|cuda|auto: llm_runtime_options.backend of every runtime the benchmark opens.
inline int32_t g_backend = LLM_BACKEND_AUTO;
// --synthetic: runtimes are made from the directory's config.json with weights generated at load
// (llm_runtime_create_synthetic with this seed) instead of read from a checkpoint.
inline bool g_synthetic = false;
inline uint64_t g_synthetic_seed = 1;
// The backend the last runtime opened ran on (LLM_BACKEND_CPU or _CUDA; AUTO before any).
inline int32_t g_backend_ran = LLM_BACKEND_AUTO;

// "cpu", "cuda" or "auto".
const char* BackendName(int32_t backend);

// llm_runtime_create, or llm_runtime_create_synthetic under --synthetic, with `ro`'s backend set
// from --backend; records the backend that ran in g_backend_ran.
llm_status CreateBenchRuntime(const fs::path& dir, llm_runtime_options* ro, llm_runtime** rt);

llm_runtime* OpenBenchRuntime(const fs::path& dir, int threads, uint64_t kv_budget, int32_t kv_dtype,
                              uint32_t max_tokens_per_step, llm_runtime_info* info);

struct StepStats {
  double tokens_per_s = 0;
  double p95_ms = 0;
};

// Steps until all of res.size() sessions sample a token in one step: a session still prefilling
// its prompt (a long prompt takes several steps of max_tokens_per_step tokens) returns
// LLM_TOKEN_NONE, and a step whose results are not all tokens is not yet a decode step. At
// most max_steps steps; false (with the error printed) when a step fails or they do not.
bool StepUntilAllSample(llm_runtime* rt, std::vector<llm_step_result>& res, int max_steps);

// Creates `sessions` sessions with prompts of `prompt_len` tokens below `vocab`, prefills them
// until all sample in one step, then two warm-up decode steps, then times `steps` decode steps; destroys the sessions. When
// check_share is not null it gets the share of the timed steps spent in integrity checks.
StepStats TimeDecode(llm_runtime* rt, int sessions, int steps, int prompt_len, int64_t vocab,
                     double* check_share = nullptr);

// Prefill tokens/s of one session's prompt of `len` tokens below `vocab`, in steps of the
// runtime's max_tokens_per_step, timed until its first token is sampled; -1 with the error
// printed when a step fails.
double TimePrefill(llm_runtime* rt, int len, int64_t vocab);

}  // namespace llm_bench

#endif  // LLMRT_SAMPLES_BENCH_COMMON_H_
