// Weights per phase and the role split: INT4 at load, per-phase expert storage, KV export and
// import between prefill-role and decode-role runtimes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

namespace fs = std::filesystem;

llm_runtime_info InfoOf(const std::string& dir, int32_t prefill, int32_t decode) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.prefill_weights = prefill;
  ro.decode_weights = decode;
  llm_runtime* rt = nullptr;
  llm_runtime_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  if (rt != nullptr) {
    EXPECT_EQ(llm_runtime_get_info(rt, &info), LLM_OK);
  }
  llm_runtime_destroy(rt);
  return info;
}

// INT4 at load (round to nearest, symmetric, bf16 group scales) from the BF16 model reproduces
// the INT4 checkpoint the reference tool quantized the same way: identical logits, hence the
// INT4 golden holds for it too.
TEST(WeightPolicy, Int4AtLoadEqualsTheInt4Checkpoint) {
  const auto prompts = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json");
  RunConfig int4;
  int4.prefill_weights = int4.decode_weights = LLM_WEIGHTS_INT4_G32;
  const auto at_load = RunBatch(TestData("tiny_kimi_k2_quant_base"), prompts, int4);
  const auto native = RunBatch(TestData("tiny_kimi_k2_int4_g32"), prompts, RunConfig{});
  const auto g = LoadGolden(TestData("tiny_kimi_k2_int4_g32.golden.json"));
  ASSERT_EQ(at_load.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(at_load[i].logits, native[i].logits) << "prompt " << i;
    EXPECT_EQ(at_load[i].tokens, g[i].generated) << "prompt " << i;
  }
  // An INT4 g32 checkpoint asked for g32 keeps its tensors; asked for g128 it is requantized.
  const llm_runtime_info same = InfoOf(TestData("tiny_kimi_k2_int4_g32"), LLM_WEIGHTS_INT4_G32, LLM_WEIGHTS_INT4_G32);
  const llm_runtime_info stored = InfoOf(TestData("tiny_kimi_k2_int4_g32"), LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_AS_STORED);
  EXPECT_EQ(same.weight_bytes_int4, stored.weight_bytes_int4);
  const llm_runtime_info g128 = InfoOf(TestData("tiny_kimi_k2_int4_g32"), LLM_WEIGHTS_INT4_G128, LLM_WEIGHTS_INT4_G128);
  EXPECT_LT(g128.weight_bytes_int4, stored.weight_bytes_int4);  // fewer scales
}

// Prefill with the experts as stored (BF16), decode with INT4 g32: both sets resident (memory
// reported by format); prefill logits are exactly the BF16 model's, decode logits those of INT4
// experts over the BF16-prefilled cache.
TEST(WeightPolicy, PrefillAndDecodeUseTheirOwnExpertStorage) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  const auto prompts = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json");
  RunConfig split;
  split.decode_weights = LLM_WEIGHTS_INT4_G32;
  const auto bf16 = RunBatch(base, prompts, RunConfig{});
  const auto mixed = RunBatch(base, prompts, split);
  size_t decode_steps_differing = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(mixed[i].logits.size(), bf16[i].logits.size());
    EXPECT_EQ(mixed[i].logits[0], bf16[i].logits[0]) << "prompt " << i << ": prefill must use the stored experts";
    for (size_t s = 1; s < mixed[i].logits.size(); ++s) decode_steps_differing += mixed[i].logits[s] != bf16[i].logits[s];
  }
  EXPECT_GT(decode_steps_differing, 0u) << "decode never used the INT4 experts";

  const llm_runtime_info one = InfoOf(base, LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_AS_STORED);
  const llm_runtime_info both = InfoOf(base, LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_INT4_G32);
  const llm_runtime_info int4 = InfoOf(base, LLM_WEIGHTS_INT4_G32, LLM_WEIGHTS_INT4_G32);
  // 2 MoE layers x 8 experts x 3 matrices of 128 x 128: BF16 2 B per weight; INT4 half a byte
  // plus a 2-byte scale per 32.
  const uint64_t expert_weights = 2ull * 8 * 3 * 128 * 128;
  EXPECT_EQ(one.weight_bytes_int4, 0u);
  EXPECT_EQ(both.weight_bytes_bf16, one.weight_bytes_bf16);
  EXPECT_EQ(both.weight_bytes_int4, expert_weights / 2 + expert_weights / 32 * 2);
  EXPECT_EQ(int4.weight_bytes_bf16, one.weight_bytes_bf16 - expert_weights * 2);
  EXPECT_EQ(both.prefill_weights, LLM_WEIGHTS_AS_STORED);
  EXPECT_EQ(both.decode_weights, LLM_WEIGHTS_INT4_G32);

  // FP8 checkpoints requantize to INT4 too.
  const llm_runtime_info fp8 = InfoOf(TestData("tiny_kimi_k2_fp8"), LLM_WEIGHTS_AS_STORED, LLM_WEIGHTS_INT4_G128);
  EXPECT_GT(fp8.weight_bytes_fp8, 0u);
  EXPECT_EQ(fp8.weight_bytes_int4, expert_weights / 2 + expert_weights / 128 * 2);

  // Bad values.
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.decode_weights = 9;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(base.c_str(), &ro, &rt), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
}

llm_runtime* OpenRole(const std::string& dir, int32_t kv, int32_t decode_weights, uint64_t budget = 0) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = kv;
  ro.decode_weights = decode_weights;
  ro.kv_budget_bytes = budget;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  return rt;
}

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// Steps `rt` until session `s` finishes (or `stop_after_first` and it produced its first token).
void RunSession(llm_runtime* rt, llm_session* s, Trace* t, bool stop_after_first = false) {
  llm_step_result res[4];
  size_t n = 0;
  std::vector<float> row(256);
  for (int guard = 0; guard < 100; ++guard) {
    ASSERT_EQ(llm_decode_step(rt, res, 4, &n), LLM_OK) << llm_last_error();
    bool finished = false;
    for (size_t i = 0; i < n; ++i) {
      if (res[i].session != s || res[i].token == LLM_TOKEN_NONE) continue;
      size_t count = 0;
      ASSERT_EQ(llm_session_get_logits(s, row.data(), row.size(), &count), LLM_OK);
      t->tokens.push_back(res[i].token);
      t->logits.push_back(row);
      finished = res[i].finish_reason != LLM_FINISH_NONE;
    }
    if (finished || (stop_after_first && !t->tokens.empty())) return;
  }
  FAIL() << "the session did not finish";
}

// The key of authenticated transfers in these tests.
const uint8_t kKey[32] = {7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2, 3, 5, 3, 6, 0, 2, 8, 7, 4, 7, 1, 3, 5, 2, 6, 6};

// Exports `s`, authenticated with kKey when `authenticated`.
std::vector<uint8_t> Export(llm_session* s, bool authenticated = false) {
  size_t size = 0;
  auto run = [&](void* buf, size_t cap) {
    return authenticated ? llm_session_export_kv_authenticated(s, kKey, sizeof(kKey), buf, cap, &size)
                         : llm_session_export_kv(s, buf, cap, &size);
  };
  EXPECT_EQ(run(nullptr, 0), LLM_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> blob(size);
  EXPECT_EQ(run(blob.data(), blob.size()), LLM_OK) << llm_last_error();
  return blob;
}

// Role split: a prefill-role runtime prefills and exports; a decode-role runtime (INT4 decode
// experts) imports and decodes. Tokens and logits equal one runtime with the same policies,
// for the BF16 and FP8 codecs.
TEST(KvExport, RoleSplitEqualsOneRuntimeWithTheSamePolicies) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  const auto prompts = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json");
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 8;
  so.temperature = 0.9f;  // sampling: the generator state travels with the export
  so.seed = 11;
  for (int32_t kv : {LLM_KV_DTYPE_BF16, LLM_KV_DTYPE_FP8_E4M3, LLM_KV_DTYPE_FP8_E4M3_TILED}) {
    llm_runtime* one = OpenRole(base, kv, LLM_WEIGHTS_INT4_G32);
    llm_runtime* prefill = OpenRole(base, kv, LLM_WEIGHTS_AS_STORED);
    llm_runtime* decode = OpenRole(base, kv, LLM_WEIGHTS_INT4_G32);
    for (const auto& prompt : prompts) {
      Trace want, got;
      llm_session* s = nullptr;
      ASSERT_EQ(llm_session_create(one, &so, &s), LLM_OK);
      ASSERT_EQ(llm_session_append_tokens(s, prompt.data(), prompt.size()), LLM_OK);
      RunSession(one, s, &want);
      llm_session_destroy(s);

      llm_session* p = nullptr;
      ASSERT_EQ(llm_session_create(prefill, &so, &p), LLM_OK);
      ASSERT_EQ(llm_session_append_tokens(p, prompt.data(), prompt.size()), LLM_OK);
      RunSession(prefill, p, &got, /*stop_after_first=*/true);
      // The decode runtime adopts the prefill runtime's FP8 layer scales: shared state, which
      // only an authenticated import may set.
      const std::vector<uint8_t> blob = Export(p, /*authenticated=*/true);
      llm_session_destroy(p);
      llm_session* d = nullptr;
      ASSERT_EQ(llm_session_import_kv_authenticated(decode, blob.data(), blob.size(), kKey, sizeof(kKey), &so, &d),
                LLM_OK)
          << llm_last_error();
      RunSession(decode, d, &got);
      llm_session_destroy(d);
      EXPECT_EQ(got.tokens, want.tokens) << "kv " << kv;
      EXPECT_EQ(got.logits, want.logits) << "kv " << kv;
    }
    llm_runtime_destroy(one);
    llm_runtime_destroy(prefill);
    llm_runtime_destroy(decode);
  }
}

// BF16 -> FP8 on import, and every way an import can be refused.
TEST(KvExport, ConvertsOnImportAndRefusesBadBlobs) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  const std::vector<int32_t> prompt = GoldenPrompts("tiny_kimi_k2_int4_g32.golden.json")[2];  // 41 tokens
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 6;
  llm_runtime* bf16 = OpenRole(base, LLM_KV_DTYPE_BF16, LLM_WEIGHTS_AS_STORED);
  llm_session* p = nullptr;
  ASSERT_EQ(llm_session_create(bf16, &so, &p), LLM_OK);
  ASSERT_EQ(llm_session_append_tokens(p, prompt.data(), prompt.size()), LLM_OK);
  Trace first;
  RunSession(bf16, p, &first, true);
  const std::vector<uint8_t> blob = Export(p);
  const std::vector<uint8_t> signed_blob = Export(p, /*authenticated=*/true);
  // The same session continued in place, as the reference for the converted import.
  Trace in_place;
  RunSession(bf16, p, &in_place);
  llm_session_destroy(p);

  llm_runtime* fp8 = OpenRole(base, LLM_KV_DTYPE_FP8_E4M3, LLM_WEIGHTS_AS_STORED);
  llm_session* d = nullptr;
  // The fresh FP8 runtime has no layer scales: an unauthenticated import may not set them.
  EXPECT_EQ(llm_session_import_kv(fp8, blob.data(), blob.size(), &so, &d), LLM_ERR_INVALID_STATE);
  EXPECT_EQ(d, nullptr);
  ASSERT_EQ(llm_session_import_kv_authenticated(fp8, signed_blob.data(), signed_blob.size(), kKey, sizeof(kKey), &so,
                                                &d),
            LLM_OK)
      << llm_last_error();
  Trace converted;
  RunSession(fp8, d, &converted);
  ASSERT_EQ(converted.tokens.size(), in_place.tokens.size());
  // FP8 rows (3 mantissa bits) against BF16 ones: the first decode step's logits stay close.
  EXPECT_LT(MaxAbsDiff(converted.logits[0], in_place.logits[0]), 0.5f);
  EXPECT_EQ(converted.tokens[0], in_place.tokens[0]);
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(fp8, &info);
  EXPECT_EQ(info.kv_scale_source, LLM_KV_SCALE_CALIBRATED);
  llm_session_destroy(d);

  // Altered, truncated, foreign, too large for the pool, NULLs.
  const uint32_t free_before = [&] {
    llm_runtime_get_info(fp8, &info);
    return info.pages_free;
  }();
  std::vector<uint8_t> bad = blob;
  bad[bad.size() / 2] ^= 0x01;
  EXPECT_EQ(llm_session_import_kv(fp8, bad.data(), bad.size(), &so, &d), LLM_ERR_FORMAT);
  EXPECT_NE(std::string(llm_last_error()).find("checksum"), std::string::npos) << llm_last_error();
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(llm_session_import_kv(fp8, blob.data(), blob.size() - 9, &so, &d), LLM_ERR_FORMAT);
  EXPECT_EQ(llm_session_import_kv(fp8, blob.data(), 5, &so, &d), LLM_ERR_FORMAT);
  llm_runtime* glm = OpenRole(TestData("tiny_glm4_moe"), LLM_KV_DTYPE_BF16, LLM_WEIGHTS_AS_STORED);
  EXPECT_EQ(llm_session_import_kv(glm, blob.data(), blob.size(), &so, &d), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_destroy(glm);
  // A pool of one 16-token page cannot hold 42 positions; nothing leaks.
  llm_runtime* tiny = OpenRole(base, LLM_KV_DTYPE_BF16, LLM_WEIGHTS_AS_STORED, 16ull * 3 * 144 * 2);
  llm_runtime_get_info(tiny, &info);
  const uint32_t tiny_free = info.pages_free;
  EXPECT_EQ(llm_session_import_kv(tiny, blob.data(), blob.size(), &so, &d), LLM_ERR_KV_EXHAUSTED);
  llm_runtime_get_info(tiny, &info);
  EXPECT_EQ(info.pages_free, tiny_free);
  EXPECT_EQ(info.num_sessions, 0u);
  llm_runtime_destroy(tiny);
  llm_runtime_get_info(fp8, &info);
  EXPECT_EQ(info.pages_free, free_before);
  size_t size = 0;
  EXPECT_EQ(llm_session_import_kv(fp8, nullptr, 10, &so, &d), LLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(llm_session_export_kv(nullptr, nullptr, 0, &size), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_destroy(fp8);
  llm_runtime_destroy(bf16);
}

}  // namespace
}  // namespace llmrt::testing
