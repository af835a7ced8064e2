// Helpers for driving the engine through the C ABI in tests.
#ifndef LLMRT_TESTS_GOLDEN_TEST_UTIL_H_
#define LLMRT_TESTS_GOLDEN_TEST_UTIL_H_

#include <string>
#include <vector>

#include "llmrt/llmrt.h"

namespace llmrt::testing {

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  std::vector<std::vector<float>> logits;  // one row per sampled position
  std::vector<float> margins;              // reference top-1 minus top-2 logit per position
  // The same run with transformers' MLA cache rounded to bfloat16 (llmrt's BF16 KV codec).
  std::vector<int32_t> bf16_generated;
  std::vector<std::vector<float>> bf16_logits;
};

std::vector<GoldenCase> LoadGolden(const std::string& path);

struct RunConfig {
  int32_t kv_dtype = LLM_KV_DTYPE_F32;
  uint32_t page_size = 16;
  uint32_t max_tokens_per_step = 512;
  uint64_t kv_budget_bytes = 0;
  uint32_t max_new_tokens = 9;
  int32_t num_threads = 0;
  int32_t prefill_weights = LLM_WEIGHTS_AS_STORED;
  int32_t decode_weights = LLM_WEIGHTS_AS_STORED;
  int32_t backend = LLM_BACKEND_AUTO;
  uint32_t tensor_parallel = 1;
  int32_t expert_parallel = 0;
  int32_t kv_pressure = LLM_KV_PRESSURE_FAIL;
  int32_t quantized_activations = LLM_ACTIVATIONS_EXACT;
  int32_t weight_memory = LLM_WEIGHT_MEMORY_AUTO;
  llm_runtime_info* info_out = nullptr;  // filled (struct_size set here) before the runtime is destroyed
  // Sampling of every session: greedy by default; session i is seeded seed + i.
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  // llm_sampling_options.flags; with LLM_SAMPLING_NO_LOGITS, RunOutput::logits stays empty and
  // llm_session_get_logits must fail with LLM_ERR_INVALID_STATE.
  uint32_t sampling_flags = 0;
  // Synthetic weights from this seed (llm_runtime_create_synthetic over the directory's
  // config.json) instead of the checkpoint's.
  bool synthetic = false;
  uint64_t synthetic_seed = 0;
};

struct RunOutput {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// Runs every prompt as its own session, all stepped together; returns per-prompt output.
// Fails the current test (ADD_FAILURE) on any unexpected status.
std::vector<RunOutput> RunBatch(const std::string& model_dir, const std::vector<std::vector<int32_t>>& prompts,
                                const RunConfig& cfg);

std::string TestData(const std::string& name);

// The prompts of a golden file (tests/data/<golden>).
std::vector<std::vector<int32_t>> GoldenPrompts(const std::string& golden);

// The shipped trained model `name` (models/<name>) converted to FP8 with block x block blocks
// (llm_convert_checkpoint, as the released FP8 checkpoints are laid out), in a temporary
// directory of this process, made on first use and removed when the process exits.
std::string ConvertedFp8Model(const std::string& name, int block = 128);

// Largest |a[i] - b[i]|; the sizes must agree.
float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace llmrt::testing

#endif  // LLMRT_TESTS_GOLDEN_TEST_UTIL_H_
