// KV integrity, prefix sharing, pressure policies and concurrency, through the C ABI.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

const char* kModel = "tiny_kimi_k2_qlora_yarn";

struct Options {
  int32_t integrity = LLM_KV_INTEGRITY_TAGS;
  int32_t pressure = LLM_KV_PRESSURE_FAIL;
  uint32_t page_size = 4;
  uint64_t budget = 0;
  int32_t prefix_sharing = 1;
  const llm_kv_tracker* tracker = nullptr;
  uint32_t tensor_parallel = 1;
  uint32_t max_tokens_per_step = 0;
};

llm_runtime* Open(const Options& o) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = LLM_KV_DTYPE_F32;
  ro.kv_integrity = o.integrity;
  ro.kv_pressure = o.pressure;
  ro.page_size_tokens = o.page_size;
  ro.kv_budget_bytes = o.budget;
  ro.prefix_sharing = o.prefix_sharing;
  ro.tracker = o.tracker;
  ro.tensor_parallel = o.tensor_parallel;
  ro.max_tokens_per_step = o.max_tokens_per_step;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(TestData(kModel).c_str(), &ro, &rt), LLM_OK) << llm_last_error();
  return rt;
}

uint64_t Id(llm_session* s) {
  llm_session_info i;
  i.struct_size = sizeof(i);
  EXPECT_EQ(llm_session_get_info(s, &i), LLM_OK);
  return i.id;
}

llm_runtime_info Info(llm_runtime* rt) {
  llm_runtime_info i;
  i.struct_size = sizeof(i);
  EXPECT_EQ(llm_runtime_get_info(rt, &i), LLM_OK);
  return i;
}

// Sessions driven to completion, with per-session tokens and the status of any failure.
struct Driver {
  llm_runtime* rt;
  std::vector<llm_session*> sessions;
  std::map<llm_session*, std::vector<int32_t>> tokens;
  std::map<llm_session*, llm_status> failure;
  std::map<llm_session*, int> first_token_step;
  int steps = 0;
  bool destroy_finished = false;  // as a server would: free a finished session's pages at once

  llm_session* Add(const std::vector<int32_t>& prompt, uint32_t max_new) {
    llm_sampling_options so;
    llm_sampling_options_init(&so);
    so.max_new_tokens = max_new;
    llm_session* s = nullptr;
    EXPECT_EQ(llm_session_create(rt, &so, &s), LLM_OK) << llm_last_error();
    EXPECT_EQ(llm_session_append_tokens(s, prompt.data(), prompt.size()), LLM_OK) << llm_last_error();
    sessions.push_back(s);
    return s;
  }
  // One step; returns the number of results.
  size_t Step() {
    std::vector<llm_step_result> r(std::max<size_t>(sessions.size(), 1) + 8);
    size_t n = 0;
    EXPECT_EQ(llm_decode_step(rt, r.data(), r.size(), &n), LLM_OK) << llm_last_error();
    ++steps;
    for (size_t i = 0; i < n; ++i) {
      if (r[i].status != LLM_OK) {
        failure[r[i].session] = r[i].status;
        continue;
      }
      if (r[i].token != LLM_TOKEN_NONE) {
        if (!first_token_step.count(r[i].session)) first_token_step[r[i].session] = steps;
        tokens[r[i].session].push_back(r[i].token);
      }
      if (destroy_finished && r[i].finish_reason != LLM_FINISH_NONE) {
        llm_session_destroy(r[i].session);
        sessions.erase(std::find(sessions.begin(), sessions.end(), r[i].session));
      }
    }
    return n;
  }
  void RunToEnd() {
    for (int i = 0; i < 5000 && Step() > 0; ++i) {
    }
  }
  void DestroyAll() {
    for (auto* s : sessions) llm_session_destroy(s);
    sessions.clear();
  }
};

std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, uint32_t max_new) {
  RunConfig cfg;
  cfg.max_new_tokens = max_new;
  return RunBatch(TestData(kModel), {prompt}, cfg)[0].tokens;
}

// ---- fault injection ----------------------------------------------------------------------

struct FaultCase {
  const char* name;
  int32_t op;
};

class FaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultTest, DetectedBeforeTheNextTokenAndNoOneElseIsAffected) {
  const auto g = LoadGolden(TestData(std::string(kModel) + ".golden.json"));
  llm_runtime* rt = Open(Options{});
  ASSERT_NE(rt, nullptr);
  Driver d{rt};
  llm_session* victim = d.Add(g[2].prompt, 9);  // 41 tokens: 11 pages of 4
  llm_session* other = d.Add(g[0].prompt, 9);
  llm_session* third = d.Add(g[1].prompt, 9);
  d.Step();  // all prefilled, first tokens out
  d.Step();
  const size_t victim_tokens = d.tokens[victim].size();
  std::vector<int64_t> args;
  switch (GetParam().op) {
    case LLM_TESTCTL_KV_FREE_MAPPED_PAGE: args = {static_cast<int64_t>(Id(victim)), 3}; break;
    case LLM_TESTCTL_KV_CORRUPT_ENTRY: args = {static_cast<int64_t>(Id(victim)), 5, 0}; break;
    case LLM_TESTCTL_KV_SWAP_PAGES: args = {static_cast<int64_t>(Id(victim)), 2, static_cast<int64_t>(Id(third)), 0}; break;
  }
  ASSERT_EQ(llm_test_control(rt, GetParam().op, args.data(), args.size()), LLM_OK) << llm_last_error();
  d.RunToEnd();
  // The victim was stopped before emitting another token.
  EXPECT_EQ(d.failure[victim], LLM_ERR_KV_INTEGRITY);
  EXPECT_EQ(d.tokens[victim].size(), victim_tokens);
  uint32_t pages[16];
  size_t count = 0;
  ASSERT_EQ(llm_session_get_failed_pages(victim, pages, 16, &count), LLM_OK);
  EXPECT_EQ(count, 1u);
  llm_session_info si;
  si.struct_size = sizeof(si);
  llm_session_get_info(victim, &si);
  EXPECT_EQ(si.state, LLM_SESSION_FAILED);
  EXPECT_EQ(si.num_pages, 0u);
  // Everyone else produced exactly what they would have.
  EXPECT_EQ(d.tokens[other], g[0].generated);
  if (GetParam().op == LLM_TESTCTL_KV_SWAP_PAGES) {
    EXPECT_EQ(d.failure[third], LLM_ERR_KV_INTEGRITY);  // its mapping was corrupted too
  } else {
    EXPECT_EQ(d.tokens[third], g[1].generated);
    EXPECT_FALSE(d.failure.count(third));
  }
  EXPECT_FALSE(d.failure.count(other));
  EXPECT_GE(Info(rt).integrity_violations, 1u);
  // No page leaked, none double-freed.
  d.DestroyAll();
  const auto info = Info(rt);
  EXPECT_EQ(info.pages_free, info.pages_total);
  llm_runtime_destroy(rt);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultTest,
                         ::testing::Values(FaultCase{"free_mapped_page", LLM_TESTCTL_KV_FREE_MAPPED_PAGE},
                                           FaultCase{"corrupt_entry", LLM_TESTCTL_KV_CORRUPT_ENTRY},
                                           FaultCase{"swap_pages", LLM_TESTCTL_KV_SWAP_PAGES}),
                         [](const auto& info) { return std::string(info.param.name); });

// Many injections of every kind at random points: every one is detected, nothing else is
// flagged. Prints the detection table.
TEST(FaultCampaign, EveryInjectionDetectedNoFalseAlarms) {
  std::mt19937 rng(2024);
  const int kRounds = 12;
  std::printf("| fault | injections | detected before next token | false alarms |\n|---|---:|---:|---:|\n");
  for (int32_t op : {LLM_TESTCTL_KV_FREE_MAPPED_PAGE, LLM_TESTCTL_KV_CORRUPT_ENTRY, LLM_TESTCTL_KV_SWAP_PAGES}) {
    int injected = 0, detected = 0, false_alarms = 0;
    for (int round = 0; round < kRounds; ++round) {
      llm_runtime* rt = Open(Options{});
      Driver d{rt};
      std::vector<llm_session*> ss;
      for (int i = 0; i < 4; ++i) {
        std::vector<int32_t> p(8 + rng() % 24);
        for (auto& t : p) t = static_cast<int32_t>(rng() % 256);
        ss.push_back(d.Add(p, 12));
      }
      const int at = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < at; ++i) d.Step();
      llm_session* v = ss[rng() % ss.size()];
      llm_session* w = ss[rng() % ss.size()];
      while (w == v) w = ss[rng() % ss.size()];
      llm_session_info vi, wi;
      vi.struct_size = wi.struct_size = sizeof(vi);
      llm_session_get_info(v, &vi);
      llm_session_get_info(w, &wi);
      if (vi.state != LLM_SESSION_DECODING || wi.state != LLM_SESSION_DECODING) {
        llm_runtime_destroy(rt);
        continue;
      }
      std::vector<int64_t> args;
      const int64_t ev = rng() % vi.num_pages, ew = rng() % wi.num_pages;
      if (op == LLM_TESTCTL_KV_FREE_MAPPED_PAGE) args = {static_cast<int64_t>(vi.id), ev};
      if (op == LLM_TESTCTL_KV_CORRUPT_ENTRY) args = {static_cast<int64_t>(vi.id), ev, static_cast<int64_t>(rng() % Info(rt).pages_total)};
      if (op == LLM_TESTCTL_KV_SWAP_PAGES) args = {static_cast<int64_t>(vi.id), ev, static_cast<int64_t>(wi.id), ew};
      // A remap onto the very page the entry already names is no corruption; skip such draws.
      ASSERT_EQ(llm_test_control(rt, op, args.data(), args.size()), LLM_OK);
      const size_t before = d.tokens[v].size();
      d.RunToEnd();
      const bool noop = op == LLM_TESTCTL_KV_CORRUPT_ENTRY && d.failure.count(v) == 0 && d.tokens[v].size() > before;
      if (noop) {
        llm_runtime_destroy(rt);
        continue;
      }
      ++injected;
      if (d.failure[v] == LLM_ERR_KV_INTEGRITY && d.tokens[v].size() == before) ++detected;
      for (auto* s : ss) {
        if (s == v || (op == LLM_TESTCTL_KV_SWAP_PAGES && s == w)) continue;
        if (d.failure.count(s)) ++false_alarms;
      }
      d.DestroyAll();
      const auto info = Info(rt);
      EXPECT_EQ(info.pages_free, info.pages_total);
      llm_runtime_destroy(rt);
    }
    const char* name = op == LLM_TESTCTL_KV_FREE_MAPPED_PAGE ? "free mapped page"
                       : op == LLM_TESTCTL_KV_CORRUPT_ENTRY  ? "corrupt entry"
                                                             : "swap pages";
    std::printf("| %s | %d | %d | %d |\n", name, injected, detected, false_alarms);
    EXPECT_GT(injected, kRounds / 2);
    EXPECT_EQ(detected, injected);
    EXPECT_EQ(false_alarms, 0);
  }
}

// ---- stress: no false alarms, batched == solo ------------------------------------------------

TEST(Stress, SixtyFourSessionsWithChecksMatchSoloRuns) {
  std::mt19937 rng(77);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<uint32_t> lens;
  std::vector<int32_t> common(13);
  for (auto& t : common) t = static_cast<int32_t>(rng() % 256);
  for (int i = 0; i < 64; ++i) {
    // Half share a 13-token prefix (prefix sharing on), lengths 1..40, outputs 1..12.
    std::vector<int32_t> p;
    if (i % 2 == 0) p = common;
    const size_t extra = 1 + rng() % 28;
    for (size_t k = 0; k < extra; ++k) p.push_back(static_cast<int32_t>(rng() % 256));
    prompts.push_back(p);
    lens.push_back(1 + rng() % 12);
  }
  Options o;
  o.page_size = 4;
  llm_runtime* rt = Open(o);
  Driver d{rt};
  std::vector<llm_session*> ss;
  // Sessions arrive over time: 8 new ones every step.
  size_t next = 0;
  while (next < prompts.size() || d.Step() > 0) {
    for (int k = 0; k < 8 && next < prompts.size(); ++k, ++next) ss.push_back(d.Add(prompts[next], lens[next]));
    if (next >= prompts.size()) continue;
    d.Step();
  }
  d.RunToEnd();
  EXPECT_TRUE(d.failure.empty());
  const auto info = Info(rt);
  EXPECT_EQ(info.integrity_violations, 0u);
  EXPECT_GT(info.prefix_hit_tokens, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(d.tokens[ss[i]], Solo(prompts[i], lens[i])) << "session " << i;
  }
  d.DestroyAll();
  EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
  llm_runtime_destroy(rt);
}

TEST(PrefixSharing, SharedPagesGiveIdenticalTokens) {
  const auto g = LoadGolden(TestData(std::string(kModel) + ".golden.json"));
  llm_runtime* rt = Open(Options{});
  Driver d{rt};
  llm_session* a = d.Add(g[2].prompt, 9);
  d.Step();  // a's prompt is now in the cache
  llm_session* b = d.Add(g[2].prompt, 9);
  d.Step();
  auto info = Info(rt);
  EXPECT_EQ(info.prefix_hit_tokens, 40u);  // 10 full pages of 4; the last token is computed
  EXPECT_EQ(info.pages_shared, 10u);
  d.RunToEnd();
  EXPECT_EQ(d.tokens[a], g[2].generated);
  EXPECT_EQ(d.tokens[b], g[2].generated);
  d.DestroyAll();
  EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
  llm_runtime_destroy(rt);
}

llm_session_info SessionInfo(llm_session* s) {
  llm_session_info i;
  i.struct_size = sizeof(i);
  EXPECT_EQ(llm_session_get_info(s, &i), LLM_OK);
  return i;
}

// A prompt that would start on cached pages but is not admitted (LLM_KV_PRESSURE_FAIL: KV
// exhausted) or whose pass fails is left as it was: no context, no pages, no shared page, and
// the prefix counters count only the lookups of passes that ran (once per prompt, not once per
// step it was retried).
TEST(PrefixSharing, APromptNotRunLeavesNoSharedPagesAndIsCountedOnce) {
  Options o;
  o.budget = 10ull * 4 * 3 * 48 * 4;  // 10 pages of 4 tokens
  llm_runtime* rt = Open(o);
  Driver d{rt};
  std::vector<int32_t> q(12);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int32_t>(40 + 3 * i);
  d.Add(q, 2);
  llm_session* c = d.Add({7, 8, 9, 10, 11}, 1);
  d.RunToEnd();  // both finished: 4 pages and 2; q's 3 full blocks are in the prefix cache
  const llm_runtime_info before = Info(rt);
  EXPECT_EQ(before.prefix_lookup_tokens, 17u);
  std::vector<int32_t> p(q.begin(), q.begin() + 8);  // two cached blocks, then 20 tokens of its own
  for (int i = 0; i < 20; ++i) p.push_back(100 + i);
  llm_session* b = d.Add(p, 2);  // 7 pages for its prompt, 5 of them new: 4 are free
  for (int step = 0; step < 3; ++step) {
    d.Step();
    EXPECT_EQ(d.failure[b], LLM_ERR_KV_EXHAUSTED);
    const llm_session_info bi = SessionInfo(b);
    EXPECT_EQ(bi.num_tokens, 0u);
    EXPECT_EQ(bi.num_pending, p.size());
    EXPECT_EQ(bi.num_pages, 0u);
    const llm_runtime_info now = Info(rt);
    EXPECT_EQ(now.pages_free, before.pages_free);
    EXPECT_EQ(now.pages_shared, 0u);
    EXPECT_EQ(now.prefix_lookup_tokens, before.prefix_lookup_tokens);
    EXPECT_EQ(now.prefix_hit_tokens, before.prefix_hit_tokens);
  }
  // A pass that fails after the prompt was admitted onto the cached pages: the same.
  llm_session_destroy(c);
  d.sessions.erase(std::find(d.sessions.begin(), d.sessions.end(), c));
  const int64_t rank = 0;
  ASSERT_EQ(llm_test_control(rt, LLM_TESTCTL_RANK_FAIL_NEXT_PASS, &rank, 1), LLM_OK);
  d.failure.clear();
  d.Step();
  EXPECT_EQ(d.failure.count(b), 1u);
  EXPECT_EQ(SessionInfo(b).num_tokens, 0u);
  EXPECT_EQ(SessionInfo(b).num_pages, 0u);
  EXPECT_EQ(Info(rt).prefix_lookup_tokens, before.prefix_lookup_tokens);
  d.failure.clear();
  d.RunToEnd();
  EXPECT_TRUE(d.failure.empty());
  EXPECT_EQ(d.tokens[b], Solo(p, 2));
  EXPECT_EQ(Info(rt).prefix_lookup_tokens, before.prefix_lookup_tokens + p.size());
  EXPECT_EQ(Info(rt).prefix_hit_tokens, before.prefix_hit_tokens + 8);
  d.DestroyAll();
  EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
  llm_runtime_destroy(rt);
}

// ---- pressure policies -----------------------------------------------------------------------

std::vector<std::vector<int32_t>> PressurePrompts() {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> q(10 + 3 * i);
    for (size_t k = 0; k < q.size(); ++k) q[k] = static_cast<int32_t>((i * 53 + k * 29 + 7) % 256);
    p.push_back(q);
  }
  return p;
}

TEST(Pressure, QueueKeepsArrivalOrderAndCompletesEveryone) {
  Options o;
  o.pressure = LLM_KV_PRESSURE_QUEUE;
  o.budget = 14ull * 4 * 3 * 48 * 4;  // 14 pages of 4 tokens: about two sessions at a time
  o.prefix_sharing = 0;
  llm_runtime* rt = Open(o);
  Driver d{rt};
  d.destroy_finished = true;
  const auto prompts = PressurePrompts();
  std::vector<llm_session*> ss;
  for (const auto& p : prompts) ss.push_back(d.Add(p, 8));
  d.RunToEnd();
  // Sessions that do not fit wait; the waiting ones are admitted in creation order.
  EXPECT_TRUE(d.failure.empty());
  for (size_t i = 0; i < ss.size(); ++i) {
    EXPECT_EQ(d.tokens[ss[i]].size(), 8u) << i;
    if (i > 0) {
      EXPECT_LE(d.first_token_step[ss[i - 1]], d.first_token_step[ss[i]]) << i;
    }
  }
  EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
  llm_runtime_destroy(rt);
}

// Under kQueue a prompt admitted in one step keeps the pages reserved for all of it (prompt plus
// max_new_tokens) through a later chunk's failed pass: the failure takes back that pass's work
// only. (It gave the reservation back; a decoding session took the pages at the rerun and the
// prompt waited for as long as that session ran.)
TEST(Pressure, QueueKeepsAPromptsReservationThroughAFailedPass) {
  Options o;
  o.pressure = LLM_KV_PRESSURE_QUEUE;
  o.budget = 6ull * 4 * 3 * 48 * 4;  // 6 pages of 4 tokens
  o.prefix_sharing = 0;
  o.max_tokens_per_step = 5;
  llm_runtime* rt = Open(o);
  Driver d{rt};
  llm_session* b = d.Add({11, 12, 13}, 0);  // decodes without a limit, a page at a time
  d.Step();
  const std::vector<int32_t> prompt = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
  llm_session* a = d.Add(prompt, 8);  // 5 pages reserved when admitted: 20 positions
  d.Step();                           // a's first chunk
  const int64_t rank = 0;
  ASSERT_EQ(llm_test_control(rt, LLM_TESTCTL_RANK_FAIL_NEXT_PASS, &rank, 1), LLM_OK);
  d.Step();  // fails
  ASSERT_EQ(d.failure.count(a), 1u);
  d.failure.clear();
  for (int i = 0; i < 40 && d.tokens[a].size() < 8; ++i) d.Step();
  EXPECT_TRUE(d.failure.empty());
  EXPECT_EQ(d.tokens[a], Solo(prompt, 8));
  EXPECT_GT(d.tokens[b].size(), 0u);
  d.DestroyAll();
  EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
  llm_runtime_destroy(rt);
}

TEST(Pressure, QueueWithFinishedSessionsHoldingPagesReportsExhaustion) {
  Options o;
  o.pressure = LLM_KV_PRESSURE_QUEUE;
  o.budget = 8ull * 4 * 3 * 48 * 4;  // 8 pages
  llm_runtime* rt = Open(o);
  Driver d{rt};
  std::vector<int32_t> p(24, 5);
  llm_session* a = d.Add(p, 2);  // 7 pages when finished
  d.RunToEnd();
  llm_session* b = d.Add(std::vector<int32_t>(20, 9), 2);
  d.Step();
  EXPECT_EQ(d.failure[b], LLM_ERR_KV_EXHAUSTED);  // a is idle, nothing will free pages
  llm_session_destroy(a);
  d.sessions.erase(d.sessions.begin());
  d.failure.clear();
  d.RunToEnd();
  EXPECT_TRUE(d.failure.empty());
  EXPECT_EQ(d.tokens[b].size(), 2u);
  d.DestroyAll();
  llm_runtime_destroy(rt);
}

TEST(Pressure, PreemptionRecomputesAndChangesNoToken) {
  Options o;
  o.pressure = LLM_KV_PRESSURE_PREEMPT;
  o.budget = 16ull * 4 * 3 * 48 * 4;  // 16 pages
  o.prefix_sharing = 0;
  llm_runtime* rt = Open(o);
  Driver d{rt};
  d.destroy_finished = true;
  const auto prompts = PressurePrompts();
  std::vector<llm_session*> ss;
  for (const auto& p : prompts) ss.push_back(d.Add(p, 10));
  d.RunToEnd();
  EXPECT_TRUE(d.failure.empty());
  EXPECT_GT(Info(rt).preemptions, 0u);
  for (size_t i = 0; i < ss.size(); ++i) EXPECT_EQ(d.tokens[ss[i]], Solo(prompts[i], 10)) << i;
  EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
  llm_runtime_destroy(rt);
}

// The same preemptions with the model split over ranks: the page tables, preemption and
// recomputation stay on the host thread while every rank keeps its own KV store (MLA's latent
// replicated, so a page holds the same bytes on every rank). Tokens must be those of one rank.
TEST(Pressure, PreemptionUnderTensorParallelismChangesNoToken) {
  const auto prompts = PressurePrompts();
  std::vector<std::vector<int32_t>> solo;
  for (const auto& p : prompts) solo.push_back(Solo(p, 10));
  for (uint32_t tp : {2u, 4u}) {
    Options o;
    o.pressure = LLM_KV_PRESSURE_PREEMPT;
    o.budget = 16ull * 4 * 3 * 48 * 4;  // 16 pages on each rank
    o.prefix_sharing = 0;
    o.tensor_parallel = tp;
    llm_runtime* rt = Open(o);
    ASSERT_NE(rt, nullptr);
    Driver d{rt};
    d.destroy_finished = true;
    std::vector<llm_session*> ss;
    for (const auto& p : prompts) ss.push_back(d.Add(p, 10));
    d.RunToEnd();
    EXPECT_TRUE(d.failure.empty()) << "TP " << tp;
    EXPECT_GT(Info(rt).preemptions, 0u) << "TP " << tp;
    for (size_t i = 0; i < ss.size(); ++i) EXPECT_EQ(d.tokens[ss[i]], solo[i]) << "TP " << tp << " prompt " << i;
    EXPECT_EQ(Info(rt).pages_free, Info(rt).pages_total);
    llm_runtime_destroy(rt);
  }
}

// ---- tracker callbacks ------------------------------------------------------------------------

struct Counts {
  std::atomic<int> alloc{0}, free{0}, share{0}, verify{0}, violation{0}, destroyed{0};
  uint64_t veto_session = 0;
};

// A tracker whose struct_size cannot be read fails creation with INVALID_ARGUMENT, and the
// runtime pointer is still set to NULL (as on every failed creation).
TEST(Tracker, AnUnreadableTrackerFailsCreationAndClearsTheOutput) {
  for (uint32_t size : {0u, 2u, (1u << 16) + 1}) {
    llm_kv_tracker t;
    std::memset(&t, 0, sizeof(t));
    t.struct_size = size;
    llm_runtime_options ro;
    llm_runtime_options_init(&ro);
    ro.tracker = &t;
    auto* rt = reinterpret_cast<llm_runtime*>(uintptr_t{0x1});  // a stale value the call must clear
    EXPECT_EQ(llm_runtime_create(TestData(kModel).c_str(), &ro, &rt), LLM_ERR_INVALID_ARGUMENT) << size;
    EXPECT_EQ(rt, nullptr) << "struct_size " << size;
    EXPECT_NE(std::string(llm_last_error()).find("tracker"), std::string::npos) << llm_last_error();
  }
}

TEST(Tracker, CallbacksSeeTheLifeCycleAndCanVeto) {
  Counts c;
  llm_kv_tracker t;
  std::memset(&t, 0, sizeof(t));
  t.struct_size = sizeof(t);
  t.user_data = &c;
  t.on_alloc = [](void* u, uint64_t, uint32_t, uint64_t) { static_cast<Counts*>(u)->alloc++; };
  t.on_free = [](void* u, uint64_t, uint32_t, uint64_t) { static_cast<Counts*>(u)->free++; };
  t.on_share = [](void* u, uint64_t, uint64_t, uint32_t, uint64_t) { static_cast<Counts*>(u)->share++; };
  t.on_verify = [](void* u, uint64_t s, const uint32_t*, const uint64_t*, size_t) -> int32_t {
    auto* c = static_cast<Counts*>(u);
    c->verify++;
    return s == c->veto_session ? 1 : 0;
  };
  t.on_violation = [](void* u, uint64_t, uint32_t, uint32_t, uint64_t, uint64_t) { static_cast<Counts*>(u)->violation++; };
  t.destroy = [](void* u) { static_cast<Counts*>(u)->destroyed++; };
  Options o;
  o.integrity = LLM_KV_INTEGRITY_OFF;  // a tracker turns checking on by itself
  o.tracker = &t;
  llm_runtime* rt = Open(o);
  Driver d{rt};
  std::vector<int32_t> p(9, 3);
  llm_session* a = d.Add(p, 3);
  d.Step();
  llm_session* b = d.Add(p, 3);  // shares a's 2 full pages
  c.veto_session = Id(b);
  d.RunToEnd();
  EXPECT_EQ(d.failure[b], LLM_ERR_KV_INTEGRITY);
  EXPECT_EQ(d.tokens[a].size(), 3u);
  EXPECT_GT(c.alloc.load(), 0);
  EXPECT_EQ(c.share.load(), 2);
  EXPECT_GT(c.verify.load(), 3);
  EXPECT_EQ(c.violation.load(), 0);
  d.DestroyAll();
  EXPECT_EQ(c.destroyed.load(), 0);
  llm_runtime_destroy(rt);
  EXPECT_EQ(c.destroyed.load(), 1);
  EXPECT_GT(c.free.load(), 0);
}

// llm_score's pages come and go within the call, reported under session id UINT64_MAX (no
// session has it; 0 is the orphans reclaimed after an integrity failure), every alloc with its
// free.
TEST(Tracker, ScoringReportsItsPagesUnderAnIdOfItsOwn) {
  struct Events {
    std::vector<std::pair<uint64_t, uint32_t>> alloc, free;
  } ev;
  llm_kv_tracker t;
  std::memset(&t, 0, sizeof(t));
  t.struct_size = sizeof(t);
  t.user_data = &ev;
  t.on_alloc = [](void* u, uint64_t s, uint32_t p, uint64_t) { static_cast<Events*>(u)->alloc.push_back({s, p}); };
  t.on_free = [](void* u, uint64_t s, uint32_t p, uint64_t) { static_cast<Events*>(u)->free.push_back({s, p}); };
  Options o;
  o.tracker = &t;
  llm_runtime* rt = Open(o);
  std::vector<int32_t> seq(19);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>(5 + 7 * i);
  std::vector<float> lp(seq.size() - 1);
  ASSERT_EQ(llm_score(rt, seq.data(), seq.size(), lp.data(), nullptr), LLM_OK) << llm_last_error();
  EXPECT_EQ(ev.alloc.size(), 5u);  // 19 positions in pages of 4
  std::multiset<uint32_t> allocated, freed;
  for (const auto& [s, p] : ev.alloc) {
    EXPECT_EQ(s, UINT64_MAX);
    allocated.insert(p);
  }
  for (const auto& [s, p] : ev.free) {
    EXPECT_EQ(s, UINT64_MAX);
    freed.insert(p);
  }
  EXPECT_EQ(allocated, freed);
  llm_runtime_destroy(rt);
}

// ---- concurrency (run under ThreadSanitizer in CI's sanitizer job) ---------------------------

TEST(Concurrency, SessionsChangeWhileStepsRun) {
  const auto g = LoadGolden(TestData(std::string(kModel) + ".golden.json"));
  Options o;
  llm_runtime* rt = Open(o);
  ASSERT_NE(rt, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> churned{0};
  // Keepers run to completion and must produce the golden tokens.
  std::vector<llm_session*> keepers;
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 9;
  for (int i = 0; i < 3; ++i) {
    llm_session* s = nullptr;
    ASSERT_EQ(llm_session_create(rt, &so, &s), LLM_OK);
    ASSERT_EQ(llm_session_append_tokens(s, g[i].prompt.data(), g[i].prompt.size()), LLM_OK);
    keepers.push_back(s);
  }
  std::map<llm_session*, std::vector<int32_t>> got;
  std::thread churn([&] {
    std::mt19937 rng(5);
    while (!stop.load()) {
      llm_session* s = nullptr;
      if (llm_session_create(rt, &so, &s) != LLM_OK) continue;
      std::vector<int32_t> p(1 + rng() % 30);
      for (auto& t : p) t = static_cast<int32_t>(rng() % 256);
      llm_session_append_tokens(s, p.data(), p.size());
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      if (rng() % 2) llm_session_cancel(s);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      llm_session_destroy(s);
      churned++;
    }
  });
  std::vector<llm_step_result> r(64);
  int finished = 0;
  for (int iter = 0; iter < 20000 && (finished < 3 || churned.load() < 20); ++iter) {
    size_t n = 0;
    llm_status st = llm_decode_step(rt, r.data(), r.size(), &n);
    if (st == LLM_ERR_BUFFER_TOO_SMALL) continue;  // the churn thread added sessions meanwhile
    ASSERT_EQ(st, LLM_OK) << llm_last_error();
    for (size_t i = 0; i < n; ++i) {
      if (std::find(keepers.begin(), keepers.end(), r[i].session) == keepers.end()) continue;
      EXPECT_EQ(r[i].status, LLM_OK);
      if (r[i].token != LLM_TOKEN_NONE) got[r[i].session].push_back(r[i].token);
      if (r[i].finish_reason != LLM_FINISH_NONE) ++finished;
    }
  }
  stop = true;
  churn.join();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[keepers[i]], g[i].generated) << i;
  for (auto* s : keepers) llm_session_destroy(s);
  const auto info = Info(rt);
  EXPECT_EQ(info.num_sessions, 0u);
  EXPECT_EQ(info.pages_free, info.pages_total);
  llm_runtime_destroy(rt);
}

}  // namespace
}  // namespace llmrt::testing
