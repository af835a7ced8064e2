// Tensor parallelism through the runtime: layer 0's cached rows are computed before any cross-rank
// sum can reorder an addition (the embedding's all-reduce adds zeros), so at every degree they equal
// the one-rank rows bit for bit; later layers differ only in float32 summation order. MLA caches
// the same rows on every rank, so a split runtime exports them like a one-rank one, and an import
// lands on every rank. A GQA runtime whose KV heads are split refuses export clearly.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/quant/kv_codec.h"
#include "src/runtime/kv_blob.h"
#include "src/runtime/runtime.h"

namespace llmrt {
namespace {

std::string Model(const std::string& name) { return std::string(LLMRT_TEST_DATA) + "/" + name; }

// Prefills a 41-token prompt on a runtime of `tp` ranks and returns its exported blob.
std::vector<uint8_t> PrefillAndExport(const std::string& dir, int tp, Session** out = nullptr,
                                      std::unique_ptr<Runtime>* keep = nullptr) {
  RuntimeOptions o;
  o.policy.kv_codec = kKvCodecF32;
  o.tensor_parallel = tp;
  auto rt = Runtime::Create(dir, o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  SessionOptions so;
  so.max_new_tokens = 1;
  Session* s = *(*rt)->CreateSession(so);
  std::vector<int32_t> prompt = {0};
  for (int k = 0; k < 40; ++k) prompt.push_back((k * 37 + 11) % 256);
  EXPECT_TRUE((*rt)->Append(s, prompt).ok());
  std::vector<StepResult> results;
  size_t needed = 0;
  EXPECT_TRUE((*rt)->Step(&results, 8, &needed).ok());
  std::vector<uint8_t> blob;
  const absl::Status st = (*rt)->ExportKv(s, {}, &blob);
  EXPECT_TRUE(st.ok()) << st;
  if (out != nullptr) *out = s;
  if (keep != nullptr) *keep = std::move(*rt);
  return blob;
}

TEST(ParallelKv, LayerZeroRowsEqualOneRankBitForBitAndTheRestAreClose) {
  for (const char* name : {"tiny_kimi_k2_qlora_yarn", "tiny_glm_moe_dsa", "tiny_kimi_k2_tp8"}) {
    // The parsed blob's rows are a view of the blob: keep it alive.
    const std::vector<uint8_t> one_blob = PrefillAndExport(Model(name), 1);
    const auto one = ParseKvBlob(one_blob, {});
    ASSERT_TRUE(one.ok()) << one.status();
    const size_t P = one->context.size(), L = one->layers;
    const size_t per_layer = one->rows.size() / L;
    ASSERT_EQ(per_layer, P * one->width * sizeof(float));
    for (int tp : {2, 4, 8}) {
      if (tp == 8 && std::string(name) != "tiny_kimi_k2_tp8") continue;
      const std::vector<uint8_t> split_blob = PrefillAndExport(Model(name), tp);
      const auto split = ParseKvBlob(split_blob, {});
      ASSERT_TRUE(split.ok()) << split.status();
      ASSERT_EQ(split->rows.size(), one->rows.size());
      EXPECT_EQ(std::memcmp(split->rows.data(), one->rows.data(), per_layer), 0) << name << " TP " << tp << " layer 0";
      float worst = 0;
      const float* a = reinterpret_cast<const float*>(split->rows.data());
      const float* b = reinterpret_cast<const float*>(one->rows.data());
      for (size_t i = 0; i < one->rows.size() / sizeof(float); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
      EXPECT_LE(worst, 1e-4f) << name << " TP " << tp;
    }
  }
}

TEST(ParallelKv, ImportLandsOnEveryRankAndGqaSplitsRefuseTransfer) {
  // One export imported into a one-rank and a two-rank runtime: both continue alike.
  const std::vector<uint8_t> blob = PrefillAndExport(Model("tiny_kimi_k2_qlora_yarn"), 1);
  SessionOptions so;
  so.max_new_tokens = 6;
  std::vector<std::vector<int32_t>> tokens;
  for (int tp : {1, 2}) {
    RuntimeOptions o;
    o.policy.kv_codec = kKvCodecF32;
    o.tensor_parallel = tp;
    auto rt = Runtime::Create(Model("tiny_kimi_k2_qlora_yarn"), o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    auto s = (*rt)->ImportKv(blob, {}, so);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*rt)->Append(*s, {5, 6}).ok());  // the imported session holds a finished turn
    std::vector<int32_t> t;
    std::vector<StepResult> r;
    size_t needed = 0;
    for (int step = 0; step < 8; ++step) {
      r.clear();
      ASSERT_TRUE((*rt)->Step(&r, 8, &needed).ok());
      for (const auto& x : r) {
        ASSERT_TRUE(x.status.ok()) << x.status;
        if (x.token >= 0) t.push_back(x.token);
      }
    }
    tokens.push_back(t);
  }
  EXPECT_GE(tokens[0].size(), 2u);
  EXPECT_EQ(tokens[0], tokens[1]);

  RuntimeOptions o;
  o.policy.kv_codec = kKvCodecF32;
  o.tensor_parallel = 2;
  auto g = Runtime::Create(Model("tiny_glm4_moe"), o);
  ASSERT_TRUE(g.ok());
  Session* s = *(*g)->CreateSession(so);
  std::vector<uint8_t> out;
  const absl::Status st = (*g)->ExportKv(s, {}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("KV heads are split over tensor_parallel 2"), std::string::npos) << st;
}

// Option checks before anything loads: world size 0, a rank outside the world, a degree of 0, a
// degree that does not divide the heads (named), a multi-process world with several local ranks.
TEST(ParallelOptions, BadDegreesAndWorldsAreRefusedClearly) {
  auto create = [](auto edit) {
    RuntimeOptions o;
    edit(o);
    return Runtime::Create(Model("tiny_kimi_k2_qlora_yarn"), o).status();
  };
  absl::Status st = create([](RuntimeOptions& o) { o.world_size = 0; });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("world_size 0"), std::string::npos) << st;
  st = create([](RuntimeOptions& o) {
    o.world_size = 2;
    o.rank = 2;
  });
  EXPECT_NE(st.message().find("rank 2 is outside the world of 2"), std::string::npos) << st;
  st = create([](RuntimeOptions& o) { o.tensor_parallel = 0; });
  EXPECT_NE(st.message().find("tensor_parallel 0"), std::string::npos) << st;
  st = create([](RuntimeOptions& o) { o.tensor_parallel = 3; });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not divisible by tensor_parallel 3"), std::string::npos) << st;
  st = create([](RuntimeOptions& o) {
    o.tensor_parallel = 8;
    o.expert_parallel = true;
  });
  EXPECT_NE(st.message().find("num_attention_heads 4"), std::string::npos) << st;
  st = create([](RuntimeOptions& o) {
    o.world_size = 2;
    o.tensor_parallel = 4;
  });
  EXPECT_NE(st.message().find("one rank per process"), std::string::npos) << st;
  st = create([](RuntimeOptions& o) { o.collective_timeout_ms = 0; });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmrt
