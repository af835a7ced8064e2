// Backend selection through the C ABI, and the CUDA backend against the CPU engine.
//
// LLM_BACKEND_CUDA without a usable device (or in a build without CUDA) is LLM_ERR_UNSUPPORTED
// with a message naming the backend; LLM_BACKEND_AUTO then runs on the CPU. Where a device is
// present, the three architectures' tiny checkpoints (BF16 and F32 weights) run on both
// backends: the same greedy tokens, and logits within 2e-3 of the CPU's (F32 KV) and 5e-3 (BF16
// KV: a rounding of the cached rows can land either side of a bfloat16 boundary when the two
// backends' float32 sums differ in the last bits). Batched and one-session-at-a-time runs on the
// device give the same tokens. The quantized checkpoints (FP8 blocks, INT4 g32 / g128) are held
// to the same bounds: both backends multiply float32 activations by exactly dequantized weights
// (CUDA's tensor-core kernel for INT4 and FP8 weights with the activations in two bfloat16 parts,
// 2^-16 a product, far inside the bound; its CUDA-core GEMV, LLMRT_CUDA_QUANT=gemv, is held to
// the same).
// FP8 KV (per-layer scale and tiled, on MLA, GQA and DSA models) gets 5e-2: the two backends
// store the same e4m3 code for a value unless their float32 values straddle a rounding boundary,
// and then the cached value moves by one e4m3 step (up to 1/8 of its magnitude) instead of one
// bfloat16 step (1/128), 16 times the BF16 case's effect; the greedy tokens must still agree.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

// Whether a runtime with the CUDA backend can be created for `dir`; fails the test if the answer
// is anything other than OK or a clear UNSUPPORTED.
bool CudaRuns(const std::string& dir) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.backend = LLM_BACKEND_CUDA;
  llm_runtime* rt = nullptr;
  const llm_status st = llm_runtime_create(dir.c_str(), &ro, &rt);
  if (st == LLM_OK) {
    llm_runtime_destroy(rt);
    return true;
  }
  const std::string msg = llm_last_error();
  EXPECT_EQ(st, LLM_ERR_UNSUPPORTED) << msg;
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
  return false;
}

// The device's runs against the CPU's, prompt by prompt up to the first token that differs (the
// histories differ from there on): logits within `logit_bound` of the CPU's (none where it is
// negative), and the CPU's token wherever its top-1 margin exceeds 0.6; with `all_tokens` every
// token the same. Returns the largest |logit difference| seen.
float ExpectCloseToCpu(const std::vector<RunOutput>& cpu, const std::vector<RunOutput>& gpu, float logit_bound,
                       bool all_tokens, const std::string& what) {
  EXPECT_EQ(cpu.size(), gpu.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < std::min(cpu.size(), gpu.size()); ++i) {
    if (all_tokens) {
      EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << what << " prompt " << i;
    }
    const size_t steps = std::min(gpu[i].logits.size(), cpu[i].logits.size());
    for (size_t j = 0; j < steps; ++j) {
      const float d = MaxAbsDiff(gpu[i].logits[j], cpu[i].logits[j]);
      worst = std::max(worst, d);
      if (logit_bound >= 0) {
        EXPECT_LE(d, logit_bound) << what << " prompt " << i << " step " << j;
      }
      std::vector<float> top = cpu[i].logits[j];
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      if (top[0] - top[1] > 0.6f) {
        EXPECT_EQ(gpu[i].tokens[j], cpu[i].tokens[j]) << what << " prompt " << i << " step " << j;
      }
      if (gpu[i].tokens[j] != cpu[i].tokens[j]) break;
    }
  }
  return worst;
}

TEST(BackendSelect, CudaIsUnsupportedWithoutADeviceAndAutoRuns) {
  const std::string dir = TestData("tiny_kimi_k2_qlora_yarn");
  const bool cuda = CudaRuns(dir);
  // AUTO always runs: on the device when there is one, else on the CPU, with the same tokens.
  RunConfig cfg;
  cfg.backend = LLM_BACKEND_AUTO;
  const std::vector<std::vector<int32_t>> prompts = {{0, 17, 42, 99, 3, 250, 7}};
  const std::vector<RunOutput> got = RunBatch(dir, prompts, cfg);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tokens, (std::vector<int32_t>{178, 108, 252, 14, 31, 214, 39, 201, 165}))
      << (cuda ? "on the CUDA backend" : "on the CPU backend");
}

struct Model {
  const char* dir;
  const char* golden;
};

// With BF16 KV each backend rounds its own float32 keys and values to bfloat16, and where the
// two float32 values straddle a rounding boundary the cached element differs by one bfloat16 ulp
// (2^-8 relative). On the H200 such flips moved the logits of tiny_kimi_k2_qlora_yarn by 5.6e-3
// and of tiny_deepseek_noqlora_f32 by 9.2e-3 at one step (F32 KV: within 2.6e-5), as the flips
// golden_models_test.cc samples (up to 1.3e-2 at p90 on the DSA model). The tokens must match.
constexpr float kBf16KvDeviceTolerance = 2e-2f;

class CudaMatchesCpu : public ::testing::TestWithParam<Model> {};

TEST_P(CudaMatchesCpu, SameTokensAndCloseLogits) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  for (int32_t kv : {LLM_KV_DTYPE_F32, LLM_KV_DTYPE_BF16}) {
    const float tol = kv == LLM_KV_DTYPE_F32 ? 2e-3f : kBf16KvDeviceTolerance;
    RunConfig cpu_cfg;
    cpu_cfg.kv_dtype = kv;
    cpu_cfg.backend = LLM_BACKEND_CPU;
    RunConfig cuda_cfg = cpu_cfg;
    cuda_cfg.backend = LLM_BACKEND_CUDA;
    const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
    const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << "prompt " << i << " kv " << kv;
      ASSERT_EQ(gpu[i].logits.size(), cpu[i].logits.size());
      for (size_t j = 0; j < cpu[i].logits.size(); ++j) {
        EXPECT_LE(MaxAbsDiff(gpu[i].logits[j], cpu[i].logits[j]), tol) << "prompt " << i << " step " << j << " kv " << kv;
      }
    }
    // Sessions one at a time, and prefill in chunks of 3 tokens: the same tokens.
    for (size_t i = 0; i < prompts.size(); ++i) {
      RunConfig chunked = cuda_cfg;
      chunked.max_tokens_per_step = 3;
      const std::vector<RunOutput> solo = RunBatch(dir, {prompts[i]}, chunked);
      ASSERT_EQ(solo.size(), 1u);
      EXPECT_EQ(solo[0].tokens, gpu[i].tokens) << "prompt " << i << " alone, chunked, kv " << kv;
    }
  }
}

std::string ModelName(const ::testing::TestParamInfo<Model>& info) {
  std::string n = info.param.dir;
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(, CudaMatchesCpu,
                         ::testing::Values(Model{"tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn.golden.json"},
                                           Model{"tiny_deepseek_noqlora_f32", "tiny_deepseek_noqlora_f32.golden.json"},
                                           Model{"tiny_glm4_moe", "tiny_glm4_moe.golden.json"},
                                           Model{"tiny_glm_moe_dsa", "tiny_glm_moe_dsa.golden.json"}),
                         ModelName);

// The CUDA attention kernels (LLMRT_CUDA_ATTENTION; the default, `tc`, ran above): the scalar
// float32 kernel is held to the same bounds against the CPU engine. `tc-bf16` rounds the
// attention's query and probabilities to bfloat16 (2^-8 relative), a smaller perturbation than
// the BF16 activation policy's rounding of every matmul input, which moves these models' logits by
// at most 0.143 on the CPU (bf16_activations_test.cc): its logits must stay within that test's
// 0.3 while the tokens agree, and its tokens must agree wherever the CPU's top-1 margin exceeds
// 0.6. On the DSA model that rounding also moves the indexer's scores, and a changed top-k
// selection is a discrete change (on the H200: 3 of 27 steps moved by 0.88 to 2.2 with the
// tokens unchanged), so there only the token rule applies. `wgmma` takes latents of 512 only, so
// on these models it checks the option's way to the one-part kernel it falls back to. The
// expanded MLA prefill (LLMRT_CUDA_MLA_PREFILL=2: in every prefill pass the sequences that bring
// at least two tokens, so each prompt's chunks, while decoding sequences and decode passes stay
// absorbed) rounds the query, the expanded
// keys and values and the probabilities to bfloat16, a perturbation of tc-bf16's size, under the
// same rules; so does GQA's prefill on FlashAttention tiles (LLMRT_CUDA_GQA_PREFILL=2: the query,
// keys, values and probabilities as bfloat16; MLA models: no GQA, no change). The DSA indexer's
// tensor-core scores (LLMRT_CUDA_DSA_SCORES=mma: within float32's bound of the default kernel's,
// in another order, so a near tie may select otherwise) run under the same rules (models
// without DSA: no indexer, no change).
TEST_P(CudaMatchesCpu, EveryAttentionKernel) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  RunConfig cpu_cfg;
  cpu_cfg.kv_dtype = LLM_KV_DTYPE_BF16;
  cpu_cfg.backend = LLM_BACKEND_CPU;
  RunConfig cuda_cfg = cpu_cfg;
  cuda_cfg.backend = LLM_BACKEND_CUDA;
  const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
  const bool dsa = std::string(GetParam().dir).find("dsa") != std::string::npos;
  const std::pair<const char*, const char*> settings[] = {
      {"LLMRT_CUDA_ATTENTION", "scalar"},
      {"LLMRT_CUDA_ATTENTION", "tc-bf16"},
      {"LLMRT_CUDA_ATTENTION", "wgmma"},  // these models' latents run tc-bf16
      {"LLMRT_CUDA_MLA_PREFILL", "2"},    // every prompt's prefill expanded (GQA: no MLA, no change)
      {"LLMRT_CUDA_GQA_PREFILL", "2"},    // every GQA prompt's prefill on FlashAttention tiles
      {"LLMRT_CUDA_DSA_SCORES", "mma"}};  // the DSA indexer's scores on the tensor cores
  for (const auto& [name, value] : settings) {
    setenv(name, value, 1);
    const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
    unsetenv(name);
    const bool exact = std::string(value) == "scalar";
    const std::string what = std::string(name) + "=" + value;
    const float worst = ExpectCloseToCpu(cpu, gpu, exact ? kBf16KvDeviceTolerance : dsa ? -1.0f : 0.3f, exact, what);
    std::printf("[%s] %s: max |logit diff| vs CPU %.3g\n", GetParam().dir, what.c_str(), worst);
  }
  // Prompts' chunks beside decoding sequences (8 tokens a step): the expanded MLA and the GQA
  // FlashAttention prefill take the chunks' sequences, and the decoding tokens beside them run
  // absorbed or token by token in the same pass, over a grid that lists them alone.
  RunConfig chunked = cuda_cfg;
  chunked.max_tokens_per_step = 8;
  setenv("LLMRT_CUDA_MLA_PREFILL", "2", 1);
  setenv("LLMRT_CUDA_GQA_PREFILL", "2", 1);
  const std::vector<RunOutput> gpu = RunBatch(dir, prompts, chunked);
  unsetenv("LLMRT_CUDA_MLA_PREFILL");
  unsetenv("LLMRT_CUDA_GQA_PREFILL");
  const float worst = ExpectCloseToCpu(cpu, gpu, dsa ? -1.0f : 0.3f, false, "chunks beside decoding sequences");
  std::printf("[%s] chunks of 8 beside decoding sequences, both prefill forms: max |logit diff| vs CPU %.3g\n",
              GetParam().dir, worst);
}

// The tensor-core attention's row loads in one stage or two (LLMRT_CUDA_ATTENTION_STAGES): the
// same arithmetic in the same order, so the logits are bit for bit the same.
TEST_P(CudaMatchesCpu, AttentionStagesAreBitIdentical) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  RunConfig cfg;
  cfg.kv_dtype = LLM_KV_DTYPE_BF16;
  cfg.backend = LLM_BACKEND_CUDA;
  std::vector<RunOutput> runs[2];
  for (int s = 0; s < 2; ++s) {
    setenv("LLMRT_CUDA_ATTENTION_STAGES", s == 0 ? "1" : "2", 1);
    runs[s] = RunBatch(dir, prompts, cfg);
    unsetenv("LLMRT_CUDA_ATTENTION_STAGES");
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(runs[0][i].tokens, runs[1][i].tokens) << "prompt " << i;
    ASSERT_EQ(runs[0][i].logits.size(), runs[1][i].logits.size());
    for (size_t j = 0; j < runs[0][i].logits.size(); ++j) {
      EXPECT_EQ(MaxAbsDiff(runs[0][i].logits[j], runs[1][i].logits[j]), 0.0f) << "prompt " << i << " step " << j;
    }
  }
}

// A value the runtime does not know (LLMRT_CUDA_ATTENTION, LLMRT_CUDA_ATTENTION_STAGES,
// LLMRT_CUDA_MOE, LLMRT_CUDA_MOE_TILE, LLMRT_CUDA_QUANT, LLMRT_CUDA_MLA_PREFILL,
// LLMRT_CUDA_GQA_PREFILL, LLMRT_CUDA_DSA_SCORES) is refused at creation, naming the variable, whichever backend runs.
TEST(BackendSelect, UnknownAttentionKernelIsRefused) {
  const std::pair<const char*, const char*> settings[] = {{"LLMRT_CUDA_ATTENTION", "flash"},
                                                          {"LLMRT_CUDA_ATTENTION_STAGES", "3"},
                                                          {"LLMRT_CUDA_MOE", "cutlass"},
                                                          {"LLMRT_CUDA_MOE_TILE", "48"},
                                                          {"LLMRT_CUDA_DSA_SCORES", "fast"},
                                                          {"LLMRT_CUDA_GQA_PREFILL", "fast"},
                                                          {"LLMRT_CUDA_GQA_PREFILL", "0"},
                                                          {"LLMRT_CUDA_QUANT", "marlin"},
                                                          {"LLMRT_CUDA_MLA_PREFILL", "flash"},
                                                          {"LLMRT_CUDA_MLA_PREFILL", "0"}};
  for (const auto& [name, value] : settings) {
    setenv(name, value, 1);
    llm_runtime_options ro;
    llm_runtime_options_init(&ro);
    ro.backend = LLM_BACKEND_CPU;
    llm_runtime* rt = nullptr;
    const llm_status st = llm_runtime_create(TestData("tiny_glm4_moe").c_str(), &ro, &rt);
    const std::string msg = llm_last_error();
    unsetenv(name);
    EXPECT_EQ(st, LLM_ERR_INVALID_ARGUMENT) << msg;
    EXPECT_EQ(rt, nullptr);
    EXPECT_NE(msg.find(std::string(name) + "=" + value), std::string::npos) << msg;
    if (rt != nullptr) llm_runtime_destroy(rt);
  }
}

// Every kernel LLMRT_CUDA_ATTENTION, LLMRT_CUDA_MOE and LLMRT_CUDA_DSA_SCORES name, and every
// LLMRT_CUDA_MLA_PREFILL and LLMRT_CUDA_GQA_PREFILL form, is accepted at creation whichever backend runs (on the CPU it
// changes nothing: the same tokens as without it).
TEST(BackendSelect, KnownAttentionKernelsAreAccepted) {
  const std::string dir = TestData("tiny_glm4_moe");
  RunConfig cfg;
  cfg.backend = LLM_BACKEND_CPU;
  cfg.max_new_tokens = 3;
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}};
  const std::vector<RunOutput> plain = RunBatch(dir, prompts, cfg);
  const std::pair<const char*, std::vector<const char*>> settings[] = {
      {"LLMRT_CUDA_ATTENTION", {"tc", "tc-bf16", "wgmma", "scalar"}},
      {"LLMRT_CUDA_MLA_PREFILL", {"absorbed", "expanded", "1", "4096"}},
      {"LLMRT_CUDA_GQA_PREFILL", {"tokens", "flash", "1", "4096"}},
      {"LLMRT_CUDA_MOE", {"mma", "wgmma", "gemv"}},
      {"LLMRT_CUDA_DSA_SCORES", {"tiled", "staged", "thread", "mma"}}};
  for (const auto& [name, values] : settings) {
    for (const char* value : values) {
      setenv(name, value, 1);
      const std::vector<RunOutput> out = RunBatch(dir, prompts, cfg);
      unsetenv(name);
      ASSERT_EQ(out.size(), plain.size()) << name << "=" << value;
      EXPECT_EQ(out[0].tokens, plain[0].tokens) << name << "=" << value;
    }
  }
}

// Synthetic weights (llm_runtime_create_synthetic over the config.json alone): the CUDA backend
// generates them on the device, bit for bit what the CPU runtime makes on the host, so the two
// runtimes hold the same model: the same greedy tokens, logits within the bound above, and the
// same parameter and byte counts. BF16, FP8 block-scaled and INT4 (routed experts) configs.
class SyntheticCudaMatchesCpu : public ::testing::TestWithParam<Model> {};

TEST_P(SyntheticCudaMatchesCpu, SameTokensAndCloseLogits) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 13, 17}, {42, 7}, {3}};
  llm_runtime_info cpu_info, gpu_info;
  RunConfig cpu_cfg;
  cpu_cfg.synthetic = true;
  cpu_cfg.synthetic_seed = 5;
  cpu_cfg.max_new_tokens = 6;
  cpu_cfg.backend = LLM_BACKEND_CPU;
  cpu_cfg.info_out = &cpu_info;
  RunConfig cuda_cfg = cpu_cfg;
  cuda_cfg.backend = LLM_BACKEND_CUDA;
  cuda_cfg.info_out = &gpu_info;
  const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
  const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << "prompt " << i;
    ASSERT_EQ(gpu[i].logits.size(), cpu[i].logits.size());
    for (size_t j = 0; j < cpu[i].logits.size(); ++j) {
      EXPECT_LE(MaxAbsDiff(gpu[i].logits[j], cpu[i].logits[j]), 2e-3f) << "prompt " << i << " step " << j;
    }
  }
  EXPECT_EQ(gpu_info.num_parameters, cpu_info.num_parameters);
  EXPECT_EQ(gpu_info.weight_bytes, cpu_info.weight_bytes);
  EXPECT_EQ(gpu_info.weight_bytes_bf16, cpu_info.weight_bytes_bf16);
  EXPECT_EQ(gpu_info.weight_bytes_int4, cpu_info.weight_bytes_int4);
  // Resident bytes by format: the CUDA backend keeps an FP8 kv_b dequantized to float32 (its MLA
  // kernels read no quantized kv_b), so FP8 bytes move to F32 there, and only there.
  EXPECT_LE(gpu_info.weight_bytes_fp8, cpu_info.weight_bytes_fp8);
  EXPECT_GE(gpu_info.weight_bytes_f32, cpu_info.weight_bytes_f32);
  if (gpu_info.weight_bytes_fp8 != cpu_info.weight_bytes_fp8) {
    EXPECT_GT(gpu_info.weight_bytes_f32, cpu_info.weight_bytes_f32);
  } else {
    EXPECT_EQ(gpu_info.weight_bytes_f32, cpu_info.weight_bytes_f32);
  }
}

INSTANTIATE_TEST_SUITE_P(, SyntheticCudaMatchesCpu,
                         ::testing::Values(Model{"tiny_kimi_k2_qlora_yarn", ""}, Model{"tiny_glm4_moe", ""},
                                           Model{"tiny_kimi_k2_fp8", ""}, Model{"tiny_glm_moe_dsa_fp8", ""},
                                           Model{"tiny_kimi_k2_int4_g32", ""}),
                         ModelName);

// The quantized checkpoints, F32 KV (the quantized weights alone).
class CudaMatchesCpuQuantized : public ::testing::TestWithParam<Model> {};

TEST_P(CudaMatchesCpuQuantized, SameTokensAndCloseLogits) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  RunConfig cpu_cfg;
  cpu_cfg.kv_dtype = LLM_KV_DTYPE_F32;
  cpu_cfg.backend = LLM_BACKEND_CPU;
  RunConfig cuda_cfg = cpu_cfg;
  cuda_cfg.backend = LLM_BACKEND_CUDA;
  const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
  const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << "prompt " << i;
    ASSERT_EQ(gpu[i].logits.size(), cpu[i].logits.size());
    for (size_t j = 0; j < cpu[i].logits.size(); ++j) {
      EXPECT_LE(MaxAbsDiff(gpu[i].logits[j], cpu[i].logits[j]), 2e-3f) << "prompt " << i << " step " << j;
    }
  }
  // One session alone, prefill in chunks of 3 tokens: the same tokens as in the batch.
  RunConfig chunked = cuda_cfg;
  chunked.max_tokens_per_step = 3;
  const std::vector<RunOutput> solo = RunBatch(dir, {prompts[0]}, chunked);
  ASSERT_EQ(solo.size(), 1u);
  EXPECT_EQ(solo[0].tokens, gpu[0].tokens) << "prompt 0 alone, chunked";
  {
    // The quantized weights on the CUDA-core GEMV (float32 activations) instead of the tensor cores.
    setenv("LLMRT_CUDA_QUANT", "gemv", 1);
    const std::vector<RunOutput> gemv = RunBatch(dir, prompts, cuda_cfg);
    unsetenv("LLMRT_CUDA_QUANT");
    ASSERT_EQ(gemv.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(gemv[i].tokens, cpu[i].tokens) << "prompt " << i << ", LLMRT_CUDA_QUANT=gemv";
      for (size_t j = 0; j < cpu[i].logits.size() && j < gemv[i].logits.size(); ++j) {
        EXPECT_LE(MaxAbsDiff(gemv[i].logits[j], cpu[i].logits[j]), 2e-3f) << "prompt " << i << " step " << j << ", gemv";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, CudaMatchesCpuQuantized,
                         ::testing::Values(Model{"tiny_kimi_k2_fp8", "tiny_kimi_k2_fp8.golden.json"},
                                           Model{"tiny_kimi_k2_int4_g32", "tiny_kimi_k2_int4_g32.golden.json"},
                                           Model{"tiny_kimi_k2_int4_g128", "tiny_kimi_k2_int4_g128.golden.json"},
                                           Model{"tiny_glm4_moe_fp8", "tiny_glm4_moe_fp8.golden.json"},
                                           Model{"tiny_glm_moe_dsa_fp8", "tiny_glm_moe_dsa_fp8.golden.json"}),
                         ModelName);

// The warpgroup attention kernel end to end: configs with Kimi K2's and GLM-5's latent of 512,
// rope key of 64 and 64 heads (everything else tiny; synthetic weights, the same on both
// backends; GLM-5's with its DSA indexer selecting 100 positions), prompts of 1 to 300 tokens
// (prefill chunks, several chunks of 64 positions, splits) and decode steps, BF16 and flat FP8
// KV, against the CPU engine. `wgmma` has tc-bf16's numerics (one bfloat16 part), so it is held to
// EveryAttentionKernel's one-part rule: the CPU's token wherever its top-1 margin exceeds 0.6,
// and logits within 0.3 (not on the DSA model, where a moved hidden state may change the next
// layer's selection: a discrete change); tc-bf16 runs beside it for the comparison, and both
// maxima are printed. The expanded MLA prefill (LLMRT_CUDA_MLA_PREFILL=expanded: where it costs
// fewer multiply-adds by count, which the 300-token prompt's prefill does with this latent) runs
// under the same rule. The CPU half runs everywhere (the configs must keep loading).
class SyntheticLatent512 : public ::testing::TestWithParam<Model> {};

TEST_P(SyntheticLatent512, WarpgroupAttentionMatchesCpu) {
  const std::string dir = TestData(GetParam().dir);
  const bool dsa = std::string(GetParam().dir).find("dsa") != std::string::npos;
  std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 13, 17}, {42}, {}};
  for (int i = 0; i < 300; ++i) prompts[2].push_back((i * 37 + 11) % 256);
  for (int32_t kv : {LLM_KV_DTYPE_BF16, LLM_KV_DTYPE_FP8_E4M3}) {
    RunConfig cpu_cfg;
    cpu_cfg.synthetic = true;
    cpu_cfg.synthetic_seed = 11;
    cpu_cfg.max_new_tokens = 8;
    cpu_cfg.kv_dtype = kv;
    cpu_cfg.backend = LLM_BACKEND_CPU;
    const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
    ASSERT_EQ(cpu.size(), prompts.size());
    llm_runtime_options ro;
    llm_runtime_options_init(&ro);
    ro.backend = LLM_BACKEND_CUDA;
    llm_runtime* rt = nullptr;
    if (llm_runtime_create_synthetic(dir.c_str(), 11, &ro, &rt) != LLM_OK) {
      GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
    }
    llm_runtime_destroy(rt);
    RunConfig cuda_cfg = cpu_cfg;
    cuda_cfg.backend = LLM_BACKEND_CUDA;
    for (const char* kernel : {"wgmma", "tc-bf16", "expanded"}) {
      const bool expanded = std::string(kernel) == "expanded";
      setenv(expanded ? "LLMRT_CUDA_MLA_PREFILL" : "LLMRT_CUDA_ATTENTION", kernel, 1);
      const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
      unsetenv(expanded ? "LLMRT_CUDA_MLA_PREFILL" : "LLMRT_CUDA_ATTENTION");
      const float worst = ExpectCloseToCpu(cpu, gpu, dsa ? -1.0f : 0.3f, false,
                                           std::string(kernel) + " kv " + std::to_string(kv));
      std::printf("[%s] %s=%s kv %d: max |logit diff| vs CPU %.3g\n", GetParam().dir,
                  expanded ? "LLMRT_CUDA_MLA_PREFILL" : "LLMRT_CUDA_ATTENTION", kernel, kv,
                  worst);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, SyntheticLatent512,
                         ::testing::Values(Model{"tiny_kimi_k2_latent512", ""}, Model{"tiny_glm_moe_dsa_latent512", ""}),
                         ModelName);

// FP8 KV codecs (per-layer scale, tiled) on MLA, GQA and DSA models, under the default phase
// policy (a pass attends over its own rows in BF16).
class CudaMatchesCpuFp8Kv : public ::testing::TestWithParam<Model> {};

TEST_P(CudaMatchesCpuFp8Kv, SameTokensAndCloseLogits) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  for (int32_t kv : {LLM_KV_DTYPE_FP8_E4M3, LLM_KV_DTYPE_FP8_E4M3_TILED}) {
    RunConfig cpu_cfg;
    cpu_cfg.kv_dtype = kv;
    cpu_cfg.backend = LLM_BACKEND_CPU;
    RunConfig cuda_cfg = cpu_cfg;
    cuda_cfg.backend = LLM_BACKEND_CUDA;
    const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
    const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << "prompt " << i << " kv " << kv;
      ASSERT_EQ(gpu[i].logits.size(), cpu[i].logits.size());
      for (size_t j = 0; j < cpu[i].logits.size(); ++j) {
        EXPECT_LE(MaxAbsDiff(gpu[i].logits[j], cpu[i].logits[j]), 5e-2f) << "prompt " << i << " step " << j << " kv " << kv;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, CudaMatchesCpuFp8Kv,
                         ::testing::Values(Model{"tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn.golden.json"},
                                           Model{"tiny_glm4_moe", "tiny_glm4_moe.golden.json"},
                                           Model{"tiny_glm_moe_dsa", "tiny_glm_moe_dsa.golden.json"}),
                         ModelName);

// Whether a runtime with `backend` and the BF16 activation policy can be created for `dir`.
bool Bf16Runs(const std::string& dir, int32_t backend, std::string* why) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.backend = backend;
  ro.quantized_activations = LLM_ACTIVATIONS_BF16;
  llm_runtime* rt = nullptr;
  if (llm_runtime_create(dir.c_str(), &ro, &rt) == LLM_OK) {
    llm_runtime_destroy(rt);
    return true;
  }
  *why = llm_last_error();
  return false;
}

// The BF16 activation policy on the device (cuBLASLt for MatMul with BF16 weights) against the
// CPU engine under the same policy: both round the same float32 activations to bfloat16 and sum
// exact products in float32, so they differ by float32 summation order, plus a bfloat16 step
// where a value's two float32 renderings straddle a rounding boundary (as with BF16 KV): logits
// within 5e-3 (F32 KV) at 80% of the steps and the same greedy tokens while the margin is
// decisive and nothing flipped (see below). (On the H200, tiny_glm4_moe had 13 of 15 steps within
// 5e-3 and its largest difference was 4.3e-2, with the same tokens: a few straddles per prompt.) Batched and one session alone with chunked prefill
// give the same tokens (rows do not depend on the batch).
//
// Where the CPU backend has no BF16 policy (it refuses it), the device is compared with the CPU's
// EXACT run instead. Rounding the CPU's matmul inputs the same way moved these models' logits by
// at most 0.22 at steps without a discrete change, while a flipped expert or DSA selection moved
// 2 of 57 steps by 1.3 and 4.4 and changed greedy tokens where EXACT's top-1 margin was below
// 0.02 (docs/cuda.md). So: logits within 0.25 at 80% of the steps compared, and the same greedy
// tokens up to the first step whose EXACT margin is below 2 * 0.25 (an error within the bound
// could reorder the top two) or whose logits moved by more than 0.25 (a flip); the comparison of
// that prompt stops there. The F32 model is untouched by the policy: within 2e-3, same tokens.
// The device against the CPU under an activation policy, both runs in hand: F32 weights (which
// the policies leave alone, `strict`): every step within tol and the same tokens. Others: 80% of
// the steps within tol, and the same tokens while EXACT's top-1 margin exceeds 2 tol and the step
// moved by at most tol. Not every step: the two backends' float32 sums differ in order, so a
// router or DSA indexer near-tie (margins of 0.008 occur in these models) can flip on one and
// not the other, after which that step's logits move by units.
void ExpectDeviceFollowsCpu(const std::vector<RunOutput>& cpu, const std::vector<RunOutput>& gpu, float tol,
                            bool strict, const char* what) {
  ASSERT_EQ(cpu.size(), gpu.size());
  float worst = 0;
  int steps = 0, within = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (strict) {
      EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << "prompt " << i;
    }
    ASSERT_EQ(gpu[i].logits.size(), cpu[i].logits.size());
    for (size_t j = 0; j < cpu[i].logits.size(); ++j) {
      const float d = MaxAbsDiff(gpu[i].logits[j], cpu[i].logits[j]);
      worst = std::max(worst, d);
      ++steps;
      within += d <= tol ? 1 : 0;
      if (strict) {
        EXPECT_LE(d, tol) << "prompt " << i << " step " << j;
        continue;
      }
      std::vector<float> sorted = cpu[i].logits[j];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (j >= cpu[i].tokens.size() || j >= gpu[i].tokens.size()) break;
      if (sorted[0] - sorted[1] < 2 * tol || d > tol) break;
      ASSERT_EQ(gpu[i].tokens[j], cpu[i].tokens[j]) << "prompt " << i << " step " << j << ", margin "
                                                    << sorted[0] - sorted[1];
    }
  }
  if (!strict) {
    EXPECT_GE(within, (4 * steps + 4) / 5) << within << " of " << steps << " steps within " << tol;
  }
  std::printf("%s: largest logit difference %.3g, %d of %d steps within %.3g\n", what, worst, within, steps, tol);
}

// The routed experts on the tensor cores (the default under the BF16 and FP8 policies) against
// the CUDA-core grouped GEMV (LLMRT_CUDA_MOE=gemv) and the warpgroup-MMA kernel
// (LLMRT_CUDA_MOE=wgmma; on a device other than Hopper the mma.sync kernel again): the same
// exact products summed in other orders, so held to the comparison's own bound.
void ExpectMoeKernelsAgree(const std::string& dir, const std::vector<std::vector<int32_t>>& prompts,
                           const RunConfig& cfg, const std::vector<RunOutput>& mma, float tol, bool strict) {
  for (const char* kernel : {"gemv", "wgmma"}) {
    setenv("LLMRT_CUDA_MOE", kernel, 1);
    const std::vector<RunOutput> other = RunBatch(dir, prompts, cfg);
    unsetenv("LLMRT_CUDA_MOE");
    std::string what = "routed experts: tensor cores vs LLMRT_CUDA_MOE=";
    what += kernel;
    ExpectDeviceFollowsCpu(other, mma, tol, strict, what.c_str());
  }
}

// One session alone on the device, prefill in chunks of 3 tokens: the tokens of the batched run.
void ExpectChunkedSoloRunsMatch(const std::string& dir, const std::vector<std::vector<int32_t>>& prompts,
                                const RunConfig& cfg, const std::vector<RunOutput>& batched) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    RunConfig chunked = cfg;
    chunked.max_tokens_per_step = 3;
    const std::vector<RunOutput> solo = RunBatch(dir, {prompts[i]}, chunked);
    ASSERT_EQ(solo.size(), 1u);
    EXPECT_EQ(solo[0].tokens, batched[i].tokens) << "prompt " << i << " alone, chunked";
  }
}

class CudaBf16MatchesCpu : public ::testing::TestWithParam<Model> {};

// tol: 5e-3 against the CPU's BF16 (a value whose two float32 renderings straddle a bf16
// rounding boundary is rounded one bf16 step apart), 0.25 against its EXACT, 2e-3 for F32.
TEST_P(CudaBf16MatchesCpu, SameTokensAndCloseLogits) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  std::string why;
  ASSERT_TRUE(Bf16Runs(dir, LLM_BACKEND_CUDA, &why)) << why;
  const bool cpu_bf16 = Bf16Runs(dir, LLM_BACKEND_CPU, &why);
  if (!cpu_bf16) std::printf("the CPU backend has no BF16 policy (%s): comparing with its EXACT run\n", why.c_str());
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  RunConfig cpu_cfg;
  cpu_cfg.kv_dtype = LLM_KV_DTYPE_F32;
  cpu_cfg.backend = LLM_BACKEND_CPU;
  cpu_cfg.quantized_activations = cpu_bf16 ? LLM_ACTIVATIONS_BF16 : LLM_ACTIVATIONS_EXACT;
  RunConfig cuda_cfg = cpu_cfg;
  cuda_cfg.backend = LLM_BACKEND_CUDA;
  cuda_cfg.quantized_activations = LLM_ACTIVATIONS_BF16;
  const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
  const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
  const bool strict = std::string(GetParam().dir) == "tiny_deepseek_noqlora_f32";
  const float tol = strict ? 2e-3f : cpu_bf16 ? 5e-3f : 0.25f;
  ExpectDeviceFollowsCpu(cpu, gpu, tol, strict, cpu_bf16 ? "BF16 on CUDA vs BF16 on the CPU" : "BF16 on CUDA vs EXACT");
  ExpectChunkedSoloRunsMatch(dir, prompts, cuda_cfg, gpu);
  ExpectMoeKernelsAgree(dir, prompts, cuda_cfg, gpu, strict ? 2e-3f : 5e-3f, strict);
}

INSTANTIATE_TEST_SUITE_P(, CudaBf16MatchesCpu,
                         ::testing::Values(Model{"tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn.golden.json"},
                                           Model{"tiny_deepseek_noqlora_f32", "tiny_deepseek_noqlora_f32.golden.json"},
                                           Model{"tiny_glm4_moe", "tiny_glm4_moe.golden.json"},
                                           Model{"tiny_glm_moe_dsa", "tiny_glm_moe_dsa.golden.json"}),
                         ModelName);

// The FP8 policy on the device against the CPU's, FP8 checkpoints: the random-weight fixture
// (64 x 64 blocks: the GEMV with activation scales) and the shipped models converted with 128 x
// 128 blocks (cuBLASLt's block-scaled FP8 GEMM). Both backends quantize the same float32 values
// with the same arithmetic, so codes differ only where the two backends' float32 inputs straddle
// an e4m3 rounding boundary (a value then moves by one e4m3 step, 16 times a bfloat16 step) or a
// block maximum changes in its last bit; 2e-2 allows a few such flips (four times the BF16
// comparison's 5e-3), while a wrong scale layout or block moves logits by units.
struct Fp8Model {
  const char* name;  // tests/data/<name>, or models/<name> converted with 128 x 128 blocks
  const char* golden;
  bool shipped;
};

class CudaFp8MatchesCpu : public ::testing::TestWithParam<Fp8Model> {};

TEST_P(CudaFp8MatchesCpu, SameTokensAndCloseLogits) {
  const Fp8Model& m = GetParam();
  if (!CudaRuns(TestData("tiny_kimi_k2_qlora_yarn"))) {
    GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  }
  const std::string dir = m.shipped ? ConvertedFp8Model(m.name) : TestData(m.name);
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(m.golden);
  RunConfig cpu_cfg;
  cpu_cfg.kv_dtype = LLM_KV_DTYPE_F32;
  cpu_cfg.backend = LLM_BACKEND_CPU;
  cpu_cfg.quantized_activations = LLM_ACTIVATIONS_FP8;
  RunConfig cuda_cfg = cpu_cfg;
  cuda_cfg.backend = LLM_BACKEND_CUDA;
  const std::vector<RunOutput> cpu = RunBatch(dir, prompts, cpu_cfg);
  const std::vector<RunOutput> gpu = RunBatch(dir, prompts, cuda_cfg);
  ExpectDeviceFollowsCpu(cpu, gpu, 2e-2f, false, "FP8 on CUDA vs FP8 on the CPU");
  ExpectChunkedSoloRunsMatch(dir, prompts, cuda_cfg, gpu);
  ExpectMoeKernelsAgree(dir, prompts, cuda_cfg, gpu, 2e-2f, false);
}

std::string Fp8ModelName(const ::testing::TestParamInfo<Fp8Model>& info) {
  std::string n = info.param.name;
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(, CudaFp8MatchesCpu,
                         ::testing::Values(Fp8Model{"tiny_kimi_k2_fp8", "tiny_kimi_k2_fp8.golden.json", false},
                                           Fp8Model{"kimi-k2-kjv-tiny", "kimi_k2_kjv_tiny.golden.json", true},
                                           Fp8Model{"glm4-moe-kjv-tiny", "glm4_moe_kjv_tiny.golden.json", true}),
                         Fp8ModelName);

// CUDA graphs: decode passes replayed from a recording compute what direct passes compute (the
// same launches on the same buffers), so tokens and logits are bit for bit those of a run with
// LLMRT_CUDA_GRAPHS=0, greedy and drawn, and the device's samples are the same; the backend's
// closing log line says how many passes were replayed (none without graphs).
struct LogLines {
  std::vector<std::string> lines;
};
void CollectLog(void* user, llm_log_level, const char* message) {
  static_cast<LogLines*>(user)->lines.emplace_back(message);
}
// The passes the closing line reports as replayed, summed over the run's log (-1: no such line).
int64_t Replayed(const LogLines& log) {
  int64_t total = -1;
  for (const std::string& l : log.lines) {
    const size_t at = l.find(" decode passes replayed from ");
    if (at == std::string::npos) continue;
    const size_t start = l.rfind(' ', at - 1) + 1;
    total = std::max<int64_t>(total, 0) + std::stoll(l.substr(start, at - start));
  }
  return total;
}

class CudaGraphs : public ::testing::TestWithParam<Model> {};

TEST_P(CudaGraphs, ReplaysComputeWhatDirectPassesCompute) {
  const std::string dir = TestData(GetParam().dir);
  if (!CudaRuns(dir)) GTEST_SKIP() << "no CUDA device here: the CUDA backend is LLM_ERR_UNSUPPORTED";
  const std::vector<std::vector<int32_t>> prompts = GoldenPrompts(GetParam().golden);
  for (float temperature : {0.0f, 0.9f}) {
    RunConfig cfg;
    cfg.backend = LLM_BACKEND_CUDA;
    cfg.kv_dtype = LLM_KV_DTYPE_BF16;
    cfg.max_new_tokens = 24;  // decode passes of the same bucket repeat: captured, then replayed
    cfg.temperature = temperature;
    cfg.top_p = 0.9f;
    cfg.seed = 5;
    LogLines with, without;
    ASSERT_EQ(llm_set_log_callback(CollectLog, &with, LLM_LOG_INFO), LLM_OK);
    unsetenv("LLMRT_CUDA_GRAPHS");
    const std::vector<RunOutput> graphs = RunBatch(dir, prompts, cfg);
    ASSERT_EQ(llm_set_log_callback(CollectLog, &without, LLM_LOG_INFO), LLM_OK);
    setenv("LLMRT_CUDA_GRAPHS", "0", 1);
    const std::vector<RunOutput> direct = RunBatch(dir, prompts, cfg);
    unsetenv("LLMRT_CUDA_GRAPHS");
    ASSERT_EQ(llm_set_log_callback(nullptr, nullptr, LLM_LOG_INFO), LLM_OK);
    EXPECT_GT(Replayed(with), 0) << "no decode pass was replayed from a CUDA graph";
    EXPECT_LE(Replayed(without), 0) << "LLMRT_CUDA_GRAPHS=0 still replayed graphs";
    ASSERT_EQ(graphs.size(), direct.size());
    for (size_t i = 0; i < graphs.size(); ++i) {
      EXPECT_EQ(graphs[i].tokens, direct[i].tokens) << "prompt " << i << " temperature " << temperature;
      ASSERT_EQ(graphs[i].logits.size(), direct[i].logits.size());
      for (size_t j = 0; j < graphs[i].logits.size(); ++j) {
        EXPECT_EQ(MaxAbsDiff(graphs[i].logits[j], direct[i].logits[j]), 0.0f) << "prompt " << i << " step " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, CudaGraphs,
                         ::testing::Values(Model{"tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_qlora_yarn.golden.json"},
                                           Model{"tiny_glm4_moe", "tiny_glm4_moe.golden.json"},
                                           Model{"tiny_glm_moe_dsa", "tiny_glm_moe_dsa.golden.json"}),
                         ModelName);

}  // namespace
}  // namespace llmrt::testing
