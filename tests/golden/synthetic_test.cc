// llm_runtime_create_synthetic: runtimes made from a config.json alone decode with finite
// logits, are deterministic in their seed, report what a runtime of the real checkpoint reports
// (parameters, resident bytes of quantized formats), and refuse bad input with clear statuses.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

namespace fs = std::filesystem;

// A directory holding only `model`'s config.json: proves no tensor file is read.
class ConfigOnlyDir {
 public:
  ConfigOnlyDir(const std::string& model, const std::string& config_text = "") {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("llmrt_synthetic_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
    if (!model.empty()) fs::copy_file(fs::path(TestData(model)) / "config.json", dir_ / "config.json");
    if (!config_text.empty()) std::ofstream(dir_ / "config.json") << config_text;
  }
  ~ConfigOnlyDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

const std::vector<std::vector<int32_t>> kPrompts = {{1, 5, 9, 13, 17}, {42, 7}};

RunConfig Synthetic(uint64_t seed, llm_runtime_info* info = nullptr) {
  RunConfig cfg;
  cfg.synthetic = true;
  cfg.synthetic_seed = seed;
  cfg.max_new_tokens = 6;
  cfg.info_out = info;
  return cfg;
}

void ExpectFiniteLogits(const std::vector<RunOutput>& out, size_t tokens) {
  ASSERT_EQ(out.size(), kPrompts.size());
  for (const RunOutput& o : out) {
    ASSERT_EQ(o.tokens.size(), tokens);
    ASSERT_EQ(o.logits.size(), tokens);
    for (const auto& row : o.logits) {
      ASSERT_FALSE(row.empty());
      for (float v : row) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

class SyntheticModel : public ::testing::TestWithParam<const char*> {};

TEST_P(SyntheticModel, DecodesDeterministicallyFromConfigAlone) {
  ConfigOnlyDir dir(GetParam());
  llm_runtime_info info;
  const auto a = RunBatch(dir.path(), kPrompts, Synthetic(7, &info));
  ExpectFiniteLogits(a, 6);
  const auto b = RunBatch(dir.path(), kPrompts, Synthetic(7));
  ExpectFiniteLogits(b, 6);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
    EXPECT_EQ(a[i].logits, b[i].logits) << "prompt " << i;
  }
  const auto c = RunBatch(dir.path(), kPrompts, Synthetic(8));
  ExpectFiniteLogits(c, 6);
  EXPECT_NE(a[0].logits[0], c[0].logits[0]) << "seeds 7 and 8 gave the same logits";

  // The same parameter count as the real checkpoint of this config; bytes as stored within 1%
  // (the synthetic router correction bias is F32, as DeepSeek-V3 stores it; the tiny
  // checkpoints store it in BF16).
  llm_runtime_info real;
  RunConfig rc;
  rc.max_new_tokens = 1;
  rc.info_out = &real;
  RunBatch(TestData(GetParam()), {{1, 2}}, rc);
  EXPECT_EQ(info.num_parameters, real.num_parameters);
  EXPECT_EQ(info.num_layers, real.num_layers);
  EXPECT_NEAR(static_cast<double>(info.weight_bytes), static_cast<double>(real.weight_bytes),
              0.01 * static_cast<double>(real.weight_bytes));
  EXPECT_EQ(std::string(info.architecture), std::string(real.architecture));
}

INSTANTIATE_TEST_SUITE_P(TinyModels, SyntheticModel,
                         ::testing::Values("tiny_kimi_k2_qlora_yarn", "tiny_glm_moe_dsa", "tiny_glm4_moe"));

// Quantized configs: the weights are made in the format the released checkpoints store, so the
// resident bytes of that format equal those of the real (tiny) checkpoint.
TEST(Synthetic, Fp8AndInt4ConfigsAreResidentInTheirFormats) {
  struct Case {
    const char* model;
    uint64_t llm_runtime_info::*field;
  };
  for (const Case& k : {Case{"tiny_kimi_k2_fp8", &llm_runtime_info::weight_bytes_fp8},
                        Case{"tiny_glm_moe_dsa_fp8", &llm_runtime_info::weight_bytes_fp8},
                        Case{"tiny_kimi_k2_int4_g32", &llm_runtime_info::weight_bytes_int4}}) {
    SCOPED_TRACE(k.model);
    ConfigOnlyDir dir(k.model);
    llm_runtime_info info, real;
    ExpectFiniteLogits(RunBatch(dir.path(), kPrompts, Synthetic(1, &info)), 6);
    RunConfig rc;
    rc.max_new_tokens = 1;
    rc.info_out = &real;
    RunBatch(TestData(k.model), {{1, 2}}, rc);
    EXPECT_GT(info.*k.field, 0u);
    EXPECT_EQ(info.*k.field, real.*k.field);
    EXPECT_EQ(info.num_parameters, real.num_parameters);
  }
}

// Phase policies, tensor parallelism and the FP8 KV cache work unchanged: INT4 decode experts are
// quantized at load from the made BF16, two ranks split the made matrices, and the FP8 cache
// calibrates its scales (a synthetic checkpoint has no k_scale tensors).
TEST(Synthetic, RunsUnderPoliciesRanksAndFp8Kv) {
  ConfigOnlyDir dir("tiny_kimi_k2_qlora_yarn");
  RunConfig cfg = Synthetic(3);
  llm_runtime_info info;
  cfg.info_out = &info;
  cfg.decode_weights = LLM_WEIGHTS_INT4_G32;
  ExpectFiniteLogits(RunBatch(dir.path(), kPrompts, cfg), 6);
  EXPECT_GT(info.weight_bytes_int4, 0u);

  cfg = Synthetic(3, &info);
  cfg.tensor_parallel = 2;
  ExpectFiniteLogits(RunBatch(dir.path(), kPrompts, cfg), 6);
  EXPECT_EQ(info.tensor_parallel, 2u);

  cfg = Synthetic(3, &info);
  cfg.kv_dtype = LLM_KV_DTYPE_FP8_E4M3;
  ExpectFiniteLogits(RunBatch(dir.path(), kPrompts, cfg), 6);
  EXPECT_EQ(info.kv_scale_source, LLM_KV_SCALE_CALIBRATED);
}

TEST(Synthetic, RefusesBadInput) {
  llm_runtime* rt = reinterpret_cast<llm_runtime*>(&rt);  // must be reset to NULL on failure
  EXPECT_EQ(llm_runtime_create_synthetic(nullptr, 1, nullptr, &rt), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llm_last_error()).find("config_dir"), std::string::npos) << llm_last_error();
  EXPECT_EQ(rt, nullptr);

  ConfigOnlyDir ok("tiny_glm4_moe");
  EXPECT_EQ(llm_runtime_create_synthetic(ok.path().c_str(), 1, nullptr, nullptr), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llm_last_error()).find("out_runtime"), std::string::npos) << llm_last_error();

  ConfigOnlyDir empty("");
  rt = reinterpret_cast<llm_runtime*>(&rt);
  EXPECT_EQ(llm_runtime_create_synthetic(empty.path().c_str(), 1, nullptr, &rt), LLM_ERR_NOT_FOUND);
  EXPECT_NE(std::string(llm_last_error()).find("config.json"), std::string::npos) << llm_last_error();
  EXPECT_EQ(rt, nullptr);

  ConfigOnlyDir llama("", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})");
  EXPECT_EQ(llm_runtime_create_synthetic(llama.path().c_str(), 1, nullptr, &rt), LLM_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(llm_last_error()).find("LlamaForCausalLM"), std::string::npos) << llm_last_error();

  ConfigOnlyDir broken("", R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": "wide"})");
  EXPECT_EQ(llm_runtime_create_synthetic(broken.path().c_str(), 1, nullptr, &rt), LLM_ERR_FORMAT);

  // 2^24 x 65536 BF16 embedding rows (2 TiB): refused as out of memory, naming the tensor,
  // before anything is touched.
  std::ifstream in(TestData("tiny_glm4_moe") + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (auto [key, value] : {std::pair<std::string, std::string>{"\"vocab_size\": 256", "\"vocab_size\": 16777216"},
                            {"\"hidden_size\": 64", "\"hidden_size\": 65536"}}) {
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    text.replace(at, key.size(), value);
  }
  ConfigOnlyDir huge("", text);
  EXPECT_EQ(llm_runtime_create_synthetic(huge.path().c_str(), 1, nullptr, &rt), LLM_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(llm_last_error()).find("embed_tokens"), std::string::npos) << llm_last_error();
  EXPECT_EQ(rt, nullptr);

  llm_runtime_options bad;
  llm_runtime_options_init(&bad);
  bad.backend = 99;
  EXPECT_EQ(llm_runtime_create_synthetic(ok.path().c_str(), 1, &bad, &rt), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
}

}  // namespace
}  // namespace llmrt::testing
