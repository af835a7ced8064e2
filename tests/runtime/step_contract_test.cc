// The step contract (README, "Architecture") on the CPU backend, through the runtime itself:
// a step allocates no backend memory, padded decode batches change nothing, and the status
// channel turns a failing pass into per-session errors.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/quant/kv_codec.h"
#include "src/runtime/runtime.h"

namespace llmrt {
namespace {

std::string Model(const std::string& name) { return std::string(LLMRT_TEST_DATA) + "/" + name; }

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11 + 3) % 200);
  return p;
}

struct Trace {
  std::vector<std::vector<int32_t>> tokens;  // per session
  std::vector<std::vector<float>> logits;    // every sampled row, in result order
};

// Runs `sessions` sessions with prompts of different lengths for `steps` steps; returns every
// sampled token and logit row. Staggered: a new prompt every third step, so prefill chunks mix
// with decodes; else every prompt arrives at once and the sessions decode together.
Trace RunSessions(Runtime& rt, int sessions, int steps, bool staggered = true) {
  std::vector<Session*> ss;
  SessionOptions so;
  so.max_new_tokens = staggered ? 6 : 12;
  for (int i = 0; i < sessions; ++i) ss.push_back(*rt.CreateSession(so));
  if (!staggered) {
    for (int i = 0; i < sessions; ++i) EXPECT_TRUE(rt.Append(ss[i], Prompt(3 + 4 * i, i)).ok());
  }
  Trace t;
  t.tokens.resize(sessions);
  std::vector<StepResult> results;
  for (int step = 0; step < steps; ++step) {
    // A new prompt every few steps, of varying length: prefill chunks mix with decodes.
    if (staggered && step % 3 == 0) {
      Session* s = ss[(step / 3) % sessions];
      const SessionState st = rt.Snapshot(s).state;
      if (st == SessionState::kIdle || st == SessionState::kFinished) {
        EXPECT_TRUE(rt.Append(s, Prompt(3 + step % 11, step)).ok());
      }
    }
    results.clear();
    size_t needed = 0;
    EXPECT_TRUE(rt.Step(&results, 64, &needed).ok());
    for (const StepResult& r : results) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      if (r.token < 0) continue;
      for (int i = 0; i < sessions; ++i) {
        if (ss[i] == r.session) t.tokens[i].push_back(r.token);
      }
      std::vector<float> row(static_cast<size_t>(rt.Info().vocab_size));
      size_t count = 0;
      EXPECT_TRUE(rt.CopyLogits(r.session, row.data(), row.size(), &count).ok());
      t.logits.push_back(std::move(row));
    }
  }
  for (Session* s : ss) rt.DestroySession(s);
  return t;
}

struct Case {
  const char* model;
  uint32_t codec;
};

class StepContract : public ::testing::TestWithParam<Case> {};

// Every buffer of a pass comes from memory allocated when the runtime was created: 50 steps of
// mixed prefill chunks and decodes perform no backend allocation at all.
TEST_P(StepContract, FiftyMixedStepsAllocateNothing) {
  RuntimeOptions o;
  o.num_threads = 2;
  o.max_tokens_per_step = 8;  // prompts arrive in several chunks
  o.policy.kv_codec = GetParam().codec;
  auto rt = Runtime::Create(Model(GetParam().model), o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const uint64_t at_creation = (*rt)->backend().allocation_count();
  const Trace t = RunSessions(**rt, 5, 50);
  EXPECT_GT(t.logits.size(), 40u);
  EXPECT_EQ((*rt)->backend().allocation_count(), at_creation);
  EXPECT_GT((*rt)->workspace_bytes(), 0u);
}

// Decode passes padded to power-of-two buckets (what a device backend replays a captured graph
// per bucket for) give the same tokens and bit-identical logits.
TEST_P(StepContract, PaddedDecodeBatchesChangeNothing) {
  RuntimeOptions o;
  o.num_threads = 2;
  o.max_tokens_per_step = 8;
  o.policy.kv_codec = GetParam().codec;
  auto plain = Runtime::Create(Model(GetParam().model), o);
  o.pad_decode_to_power_of_two = true;
  auto padded = Runtime::Create(Model(GetParam().model), o);
  ASSERT_TRUE(plain.ok() && padded.ok());
  // Three sessions decoding together pad to four rows, five to eight.
  Trace a = RunSessions(**plain, 3, 20, /*staggered=*/false), b = RunSessions(**padded, 3, 20, false);
  const Trace a5 = RunSessions(**plain, 5, 20, false), b5 = RunSessions(**padded, 5, 20, false);
  a.logits.insert(a.logits.end(), a5.logits.begin(), a5.logits.end());
  b.logits.insert(b.logits.end(), b5.logits.begin(), b5.logits.end());
  EXPECT_EQ((*plain)->Info().padded_tokens, 0u);
  EXPECT_GE((*padded)->Info().padded_tokens, 5u);  // padding did happen
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a5.tokens, b5.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_EQ(a.logits[i], b.logits[i]) << "row " << i;
}

INSTANTIATE_TEST_SUITE_P(Models, StepContract,
                         ::testing::Values(Case{"tiny_kimi_k2_qlora_yarn", kKvCodecBf16},
                                           Case{"tiny_kimi_k2_qlora_yarn", kKvCodecFp8},
                                           Case{"tiny_glm4_moe", kKvCodecFp8Tiled},
                                           Case{"tiny_glm_moe_dsa", kKvCodecBf16},
                                           Case{"tiny_kimi_k2_int4_g32", kKvCodecF32}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.model) + "_codec" + std::to_string(i.param.codec);
                         });

// The results bound is checked with the plan, under the lock: too small a capacity fails
// before anything runs, and reports the number of live sessions.
TEST(StepContract, ResultsCapacityIsCheckedBeforeTheStep) {
  RuntimeOptions o;
  o.num_threads = 1;
  auto rt = Runtime::Create(Model("tiny_kimi_k2_qlora_yarn"), o);
  ASSERT_TRUE(rt.ok());
  Session* a = *(*rt)->CreateSession({});
  Session* b = *(*rt)->CreateSession({});
  ASSERT_TRUE((*rt)->Append(a, Prompt(5, 1)).ok());
  ASSERT_TRUE((*rt)->Append(b, Prompt(5, 2)).ok());
  std::vector<StepResult> results;
  size_t needed = 0;
  const absl::Status st = (*rt)->Step(&results, 1, &needed);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(needed, 2u);
  EXPECT_TRUE(results.empty());
  EXPECT_EQ((*rt)->Snapshot(a).num_pending, 5u);  // nothing ran
  EXPECT_TRUE((*rt)->Step(&results, 2, &needed).ok());
  EXPECT_EQ(results.size(), 2u);
}

}  // namespace
}  // namespace llmrt
