// Where the CPU backend keeps the weights (llm_runtime_options.weight_memory): in place in the
// checkpoint's file mapping, or copied into memory advised for 2 MiB pages. The choice moves
// bytes, never arithmetic: every architecture and storage format gives the same tokens and the
// same logits bit for bit either way. A copy releases the file mapping once loaded; the mapped
// mode keeps it. AUTO follows the kernel's transparent huge page setting. Anything else is
// refused.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

bool KernelOffersHugePages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!f || !std::getline(f, line)) return false;
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

// Whether this process maps a file whose path contains `needle` (Linux /proc/self/maps).
bool ProcessMaps(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(WeightMemory, AnUnknownValueIsRefused) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  EXPECT_EQ(ro.weight_memory, LLM_WEIGHT_MEMORY_AUTO);
  for (int32_t bad : {-1, 3 /* DEVICE is reported, never asked for */, 7}) {
    ro.weight_memory = bad;
    llm_runtime* rt = nullptr;
    EXPECT_EQ(llm_runtime_create(TestData("tiny_kimi_k2_qlora_yarn").c_str(), &ro, &rt), LLM_ERR_INVALID_ARGUMENT)
        << bad;
    EXPECT_EQ(rt, nullptr);
    EXPECT_NE(std::string(llm_last_error()).find("weight_memory"), std::string::npos) << llm_last_error();
  }
}

struct Case {
  const char* dir;
  const char* golden;
  int32_t decode_weights;
  int32_t activations;
};

class WeightMemoryModels : public ::testing::TestWithParam<Case> {};

TEST_P(WeightMemoryModels, MappedAndHugePagesGiveTheSameBits) {
  const Case& c = GetParam();
  const std::string dir = TestData(c.dir);
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(c.golden);
  ASSERT_FALSE(prompts.empty());
  std::vector<RunOutput> runs[2];
  const int32_t modes[2] = {LLM_WEIGHT_MEMORY_MAPPED, LLM_WEIGHT_MEMORY_HUGE_PAGES};
  for (int m = 0; m < 2; ++m) {
    llm_runtime_info info;
    RunConfig cfg;
    cfg.backend = LLM_BACKEND_CPU;
    cfg.kv_dtype = LLM_KV_DTYPE_BF16;
    cfg.weight_memory = modes[m];
    cfg.decode_weights = c.decode_weights;
    cfg.quantized_activations = c.activations;
    cfg.info_out = &info;
    runs[m] = RunBatch(dir, prompts, cfg);
    ASSERT_EQ(runs[m].size(), prompts.size());
    EXPECT_EQ(info.weight_memory, modes[m]);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(runs[0][i].tokens, runs[1][i].tokens) << "prompt " << i;
    ASSERT_EQ(runs[0][i].logits.size(), runs[1][i].logits.size()) << "prompt " << i;
    for (size_t p = 0; p < runs[0][i].logits.size(); ++p) {
      const std::vector<float>& a = runs[0][i].logits[p];
      const std::vector<float>& b = runs[1][i].logits[p];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "prompt " << i << " position " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, WeightMemoryModels,
    ::testing::Values(
        Case{"tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn.golden.json", LLM_WEIGHTS_AS_STORED,
             LLM_ACTIVATIONS_EXACT},
        Case{"tiny_glm4_moe", "tiny_glm4_moe.golden.json", LLM_WEIGHTS_AS_STORED, LLM_ACTIVATIONS_BF16},
        Case{"tiny_glm_moe_dsa_fp8", "tiny_glm_moe_dsa_fp8.golden.json", LLM_WEIGHTS_AS_STORED, LLM_ACTIVATIONS_EXACT},
        Case{"tiny_kimi_k2_int4_g32", "tiny_kimi_k2_int4_g32.golden.json", LLM_WEIGHTS_AS_STORED,
             LLM_ACTIVATIONS_INT8},
        // Routed experts quantized at load: the copy is made from memory the loader owns.
        Case{"tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn.golden.json", LLM_WEIGHTS_INT4_G32,
             LLM_ACTIVATIONS_EXACT}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.dir) + (info.param.decode_weights == LLM_WEIGHTS_INT4_G32 ? "_int4_decode" : "");
    });

// Creates a CPU runtime over `dir` with `mode`; asserts it ran.
llm_runtime* Create(const std::string& dir, int32_t mode) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.backend = LLM_BACKEND_CPU;
  ro.weight_memory = mode;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  return rt;
}

int32_t InfoWeightMemory(llm_runtime* rt) {
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  EXPECT_EQ(llm_runtime_get_info(rt, &info), LLM_OK);
  return info.weight_memory;
}

TEST(WeightMemory, AutoFollowsTheKernelsHugePageSetting) {
  llm_runtime* rt = Create(TestData("tiny_glm4_moe"), LLM_WEIGHT_MEMORY_AUTO);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(InfoWeightMemory(rt), KernelOffersHugePages() ? LLM_WEIGHT_MEMORY_HUGE_PAGES : LLM_WEIGHT_MEMORY_MAPPED);
  llm_runtime_destroy(rt);
}

TEST(WeightMemory, ACopyReleasesTheFileMappingAndMappedKeepsIt) {
  // A directory of this test's own (a copy of the model), so that no other runtime of the
  // process maps the same file.
  const std::string src = TestData("tiny_deepseek_noqlora_f32");
  const std::string dir = ::testing::TempDir() + "weight_memory_mapping_" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("rm -rf '" + dir + "' && cp -r '" + src + "' '" + dir + "'").c_str()), 0);
  const std::string file = dir + "/model.safetensors";
  ASSERT_TRUE(std::ifstream(file).good()) << file;

  llm_runtime* mapped = Create(dir, LLM_WEIGHT_MEMORY_MAPPED);
  ASSERT_NE(mapped, nullptr);
  EXPECT_TRUE(ProcessMaps(file)) << "the mapped mode reads the weights from the file mapping";
  llm_runtime_destroy(mapped);
  EXPECT_FALSE(ProcessMaps(file)) << "destroying the runtime unmaps the file";

  llm_runtime* copied = Create(dir, LLM_WEIGHT_MEMORY_HUGE_PAGES);
  ASSERT_NE(copied, nullptr);
  EXPECT_EQ(InfoWeightMemory(copied), LLM_WEIGHT_MEMORY_HUGE_PAGES);
  EXPECT_FALSE(ProcessMaps(file)) << "a runtime that copied its weights holds no mapping of the checkpoint";
  // And it runs from the copy: the file may go away.
  ASSERT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 3;
  llm_session* s = nullptr;
  ASSERT_EQ(llm_session_create(copied, &so, &s), LLM_OK);
  const int32_t prompt[] = {1, 2, 3};
  ASSERT_EQ(llm_session_append_tokens(s, prompt, 3), LLM_OK);
  llm_step_result r[1];
  size_t n = 0;
  int tokens = 0;
  for (int i = 0; i < 16 && tokens < 3; ++i) {
    ASSERT_EQ(llm_decode_step(copied, r, 1, &n), LLM_OK);
    if (n == 1 && r[0].token != LLM_TOKEN_NONE) ++tokens;
  }
  EXPECT_EQ(tokens, 3);
  llm_session_destroy(s);
  llm_runtime_destroy(copied);
}

}  // namespace
}  // namespace llmrt::testing
