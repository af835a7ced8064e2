#include "tests/golden/test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmrt::testing {

std::string TestData(const std::string& name) { return std::string(LLMRT_TEST_DATA) + "/" + name; }

namespace {

// The converted checkpoints of this process, removed when it exits.
struct ConvertedDirs {
  std::mutex mu;
  std::vector<std::filesystem::path> dirs;
  ~ConvertedDirs() {
    for (const auto& d : dirs) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
};

}  // namespace

std::string ConvertedFp8Model(const std::string& name, int block) {
  namespace fs = std::filesystem;
  static ConvertedDirs converted;
  const fs::path out = fs::temp_directory_path() / ("llmrt_fp8_" + std::to_string(block) + "_" + name + "_" +
                                                    std::to_string(::getpid()));
  std::lock_guard<std::mutex> lock(converted.mu);
  if (fs::exists(out / "config.json")) return out.string();
  fs::remove_all(out);
  llm_convert_options co;
  llm_convert_options_init(&co);
  co.target = LLM_CONVERT_FP8_BLOCK;
  co.fp8_block = block;
  const std::string in = std::string(LLMRT_SOURCE_DIR) + "/models/" + name;
  EXPECT_EQ(llm_convert_checkpoint(in.c_str(), out.c_str(), &co, nullptr, 0, nullptr), LLM_OK) << llm_last_error();
  converted.dirs.push_back(out);
  return out.string();
}

std::vector<std::vector<int32_t>> GoldenPrompts(const std::string& golden) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : LoadGolden(TestData(golden))) prompts.push_back(c.prompt);
  return prompts;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<GoldenCase> LoadGolden(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenCase> out;
  for (const auto& c : j["cases"]) {
    GoldenCase g;
    g.prompt = c["prompt"].get<std::vector<int32_t>>();
    g.generated = c["generated"].get<std::vector<int32_t>>();
    for (const auto& s : c["steps"]) {
      g.logits.push_back(s["logits"].get<std::vector<float>>());
      g.margins.push_back(s["margin"].get<float>());
    }
    for (const auto& s : c["bf16_kv"]["steps"]) g.bf16_logits.push_back(s["logits"].get<std::vector<float>>());
    g.bf16_generated = c["bf16_kv"]["generated"].get<std::vector<int32_t>>();
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<RunOutput> RunBatch(const std::string& model_dir, const std::vector<std::vector<int32_t>>& prompts,
                                const RunConfig& cfg) {
  std::vector<RunOutput> out(prompts.size());
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = cfg.kv_dtype;
  ro.page_size_tokens = cfg.page_size;
  ro.max_tokens_per_step = cfg.max_tokens_per_step;
  ro.kv_budget_bytes = cfg.kv_budget_bytes;
  ro.num_threads = cfg.num_threads;
  ro.prefill_weights = cfg.prefill_weights;
  ro.decode_weights = cfg.decode_weights;
  ro.backend = cfg.backend;
  ro.tensor_parallel = cfg.tensor_parallel;
  ro.expert_parallel = cfg.expert_parallel;
  ro.quantized_activations = cfg.quantized_activations;
  ro.weight_memory = cfg.weight_memory;
  ro.kv_pressure = cfg.kv_pressure;
  llm_runtime* rt = nullptr;
  llm_status st = cfg.synthetic ? llm_runtime_create_synthetic(model_dir.c_str(), cfg.synthetic_seed, &ro, &rt)
                                : llm_runtime_create(model_dir.c_str(), &ro, &rt);
  if (st != LLM_OK) {
    ADD_FAILURE() << llm_status_string(st) << ": " << llm_last_error();
    return out;
  }
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = cfg.max_new_tokens;
  so.temperature = cfg.temperature;
  so.top_k = cfg.top_k;
  so.top_p = cfg.top_p;
  so.flags = cfg.sampling_flags;
  std::map<llm_session*, size_t> index;
  std::vector<llm_session*> sessions;
  for (size_t i = 0; i < prompts.size(); ++i) {
    so.seed = cfg.seed + i;
    llm_session* s = nullptr;
    EXPECT_EQ(llm_session_create(rt, &so, &s), LLM_OK) << llm_last_error();
    EXPECT_EQ(llm_session_append_tokens(s, prompts[i].data(), prompts[i].size()), LLM_OK) << llm_last_error();
    index[s] = i;
    sessions.push_back(s);
  }
  std::vector<llm_step_result> results(prompts.size());
  std::vector<float> logits(1 << 20);
  size_t done = 0;
  for (int iter = 0; iter < 10000 && done < prompts.size(); ++iter) {
    size_t n = 0;
    st = llm_decode_step(rt, results.data(), results.size(), &n);
    if (st != LLM_OK) {
      ADD_FAILURE() << llm_status_string(st) << ": " << llm_last_error();
      break;
    }
    if (n == 0) break;
    for (size_t r = 0; r < n; ++r) {
      const llm_step_result& res = results[r];
      EXPECT_EQ(res.status, LLM_OK) << llm_status_string(res.status);
      const size_t i = index.at(res.session);
      if (res.token != LLM_TOKEN_NONE) {
        out[i].tokens.push_back(res.token);
        size_t count = 0;
        if ((cfg.sampling_flags & LLM_SAMPLING_NO_LOGITS) != 0) {
          EXPECT_EQ(llm_session_get_logits(res.session, logits.data(), logits.size(), &count), LLM_ERR_INVALID_STATE);
        } else {
          EXPECT_EQ(llm_session_get_logits(res.session, logits.data(), logits.size(), &count), LLM_OK);
          out[i].logits.emplace_back(logits.begin(), logits.begin() + count);
        }
      }
      if (res.finish_reason != LLM_FINISH_NONE) ++done;
    }
  }
  if (cfg.info_out != nullptr) {
    cfg.info_out->struct_size = sizeof(*cfg.info_out);
    EXPECT_EQ(llm_runtime_get_info(rt, cfg.info_out), LLM_OK);
  }
  for (auto* s : sessions) llm_session_destroy(s);
  llm_runtime_destroy(rt);
  return out;
}

}  // namespace llmrt::testing
