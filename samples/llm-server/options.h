// Command-line options of llm-server.
#ifndef LLMRT_SAMPLES_LLM_SERVER_OPTIONS_H_
#define LLMRT_SAMPLES_LLM_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "llmrt/llmrt.h"

namespace llm_server {

struct ServerOptions {
  std::string model_dir;
  std::string served_model_name;  // empty: the model directory's last path component
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (the chosen one is printed)
  int32_t num_threads = 0;        // CPU threads of the runtime; 0 = one per core
  int32_t backend = LLM_BACKEND_AUTO;
  int32_t kv_dtype = LLM_KV_DTYPE_AUTO;
  int32_t kv_integrity = LLM_KV_INTEGRITY_OFF;
  int32_t kv_pressure = LLM_KV_PRESSURE_FAIL;
  uint32_t tensor_parallel = 1;
  int32_t expert_parallel = 0;
  int32_t prefill_weights = LLM_WEIGHTS_AS_STORED;  // LLM_WEIGHTS_*
  int32_t decode_weights = LLM_WEIGHTS_AS_STORED;
  int32_t quantized_activations = LLM_ACTIVATIONS_EXACT;  // LLM_ACTIVATIONS_*
  int32_t weight_memory = LLM_WEIGHT_MEMORY_AUTO;          // LLM_WEIGHT_MEMORY_*
  uint64_t kv_budget_bytes = 0;   // 0: the runtime's default
  uint32_t max_sessions = 64;     // concurrent generations; more get 429
  uint32_t max_tokens_per_step = 0;
  uint64_t max_body_bytes = 1 << 20;
  int http_threads = 0;           // 0: 2 * max_sessions + 8 (see ParseArgs)
  int shutdown_timeout_s = 30;    // how long in-flight requests may run on after SIGINT/SIGTERM
  int retry_after_s = 1;          // Retry-After of 503 responses under KV exhaustion
  bool enable_test_hooks = false; // POST /debug/corrupt (llm_test_control); never in production
  bool quiet = false;             // no access log
};

// Parses argv into *out. Returns 0 to go on, or the exit code to leave with (usage errors are
// printed to stderr; --help prints the usage and returns 0 through *exit_now).
int ParseArgs(int argc, char** argv, ServerOptions* out, bool* exit_now);

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_OPTIONS_H_
