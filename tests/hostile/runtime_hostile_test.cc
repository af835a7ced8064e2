// Hostile KV blobs, API misuse and concurrency through the public header: an imported session
// can break nothing but itself, and no step's results are ever lost.
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/hostile/hostile_util.h"

namespace llmrt::hostile {
namespace {

const std::string kData = LLMRT_TEST_DATA;
const std::string kModel = kData + "/tiny_kimi_k2_qlora_yarn";  // vocab 256, 3 layers, rows of 48
const uint8_t kKey[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// The documented blob layout (include/llmrt/llmrt.h and src/runtime/kv_blob.h): a fixed 88-byte
// header, then layers x f32 scales, context tokens, pending tokens, rows, an 8-byte FNV-1a.
constexpr size_t kHeader = 88;
constexpr size_t kCodecAt = 20, kPositionsAt = 32, kPendingCountAt = 36, kHasUnfedAt = 40, kUnfedAt = 44, kStateAt = 52;
constexpr uint32_t kLayers = 3, kWidth = 48;

template <typename T>
T Get(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}
template <typename T>
void Put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}
// Recomputes the public checksum, as anyone can.
void Reseal(std::vector<uint8_t>& b) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < b.size() - 8; ++i) h = (h ^ b[i]) * 1099511628211ull;
  Put(b, b.size() - 8, h);
}
size_t PendingAt(const std::vector<uint8_t>& b) { return kHeader + kLayers * 4 + Get<uint32_t>(b, kPositionsAt) * 4; }
size_t RowsAt(const std::vector<uint8_t>& b) { return PendingAt(b) + Get<uint32_t>(b, kPendingCountAt) * 4; }

llm_runtime* Open(int32_t kv_dtype) {
  llm_runtime_options o;
  llm_runtime_options_init(&o);
  o.kv_dtype = kv_dtype;
  o.num_threads = 1;
  o.page_size_tokens = 4;
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create(kModel.c_str(), &o, &rt), LLM_OK) << llm_last_error();
  return rt;
}

std::vector<int32_t> Prompt(int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < 11; ++i) p.push_back((i * 29 + salt * 7 + 5) % 256);
  return p;
}

// Steps until no session is running; returns each session's tokens.
std::map<llm_session*, std::vector<int32_t>> Drive(llm_runtime* rt, size_t /*live*/) {
  std::map<llm_session*, std::vector<int32_t>> out;
  std::vector<llm_step_result> r(64);
  for (int step = 0; step < 200; ++step) {
    size_t n = 0;
    EXPECT_EQ(llm_decode_step(rt, r.data(), r.size(), &n), LLM_OK) << llm_last_error();
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(r[i].status, LLM_OK) << llm_status_string(r[i].status);
      if (r[i].token >= 0) out[r[i].session].push_back(r[i].token);
      any = any || r[i].finish_reason == LLM_FINISH_NONE;
    }
    if (n == 0 || !any) break;
  }
  return out;
}

// A session that decoded its first token, exported (authenticated with kKey if asked).
std::vector<uint8_t> ExportAfterFirstToken(llm_runtime* rt, int salt, bool authenticated = false,
                                           uint32_t max_new = 6) {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = max_new;
  llm_session* s = nullptr;
  EXPECT_EQ(llm_session_create(rt, &so, &s), LLM_OK);
  const std::vector<int32_t> p = Prompt(salt);
  EXPECT_EQ(llm_session_append_tokens(s, p.data(), p.size()), LLM_OK);
  llm_step_result r[4];
  size_t n = 0;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(llm_decode_step(rt, r, 4, &n), LLM_OK);
    if (n > 0 && r[0].token >= 0) break;
  }
  size_t size = 0;
  auto run = [&](void* buf, size_t cap) {
    return authenticated ? llm_session_export_kv_authenticated(s, kKey, sizeof(kKey), buf, cap, &size)
                         : llm_session_export_kv(s, buf, cap, &size);
  };
  run(nullptr, 0);
  std::vector<uint8_t> blob(size);
  EXPECT_EQ(run(blob.data(), blob.size()), LLM_OK) << llm_last_error();
  llm_session_destroy(s);
  return blob;
}

// Sampling options of imported sessions: the exporter's generation of 6 tokens continues.
llm_sampling_options SixTokens() {
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 6;
  return so;
}

llm_status Import(llm_runtime* rt, const std::vector<uint8_t>& blob, llm_session** s) {
  const llm_sampling_options so = SixTokens();
  return llm_session_import_kv(rt, blob.data(), blob.size(), &so, s);
}

uint32_t FreePages(llm_runtime* rt) {
  llm_runtime_info i;
  i.struct_size = sizeof(i);
  llm_runtime_get_info(rt, &i);
  return i.pages_free;
}

// Class 3: a resealed export whose pending, held or context token is out of range, or whose
// state is inconsistent, is refused; the runtime and its other sessions are untouched.
TEST(HostileKvImport, ResealedBadTokensAndStatesAreRefused) {
  EXPECT_EQ(RunIsolated([] {
              llm_runtime* rt = Open(LLM_KV_DTYPE_BF16);
              const std::vector<uint8_t> good = ExportAfterFirstToken(rt, 1);
              std::string err;
              const uint32_t free_before = FreePages(rt);
              struct Case {
                const char* what;
                std::function<void(std::vector<uint8_t>&)> edit;
              };
              const std::vector<Case> cases = {
                  {"pending id past the vocabulary", [](auto& b) { Put<int32_t>(b, PendingAt(b), 256 + 5); }},
                  {"negative pending id", [](auto& b) { Put<int32_t>(b, PendingAt(b), -1); }},
                  {"context id past the vocabulary", [](auto& b) { Put<int32_t>(b, kHeader + kLayers * 4, 1 << 30); }},
                  {"a held token with a decoding state", [](auto& b) { Put<uint32_t>(b, kHasUnfedAt, 1); }},
                  {"the failed state", [](auto& b) { Put<uint32_t>(b, kStateAt, 5); }},
                  {"an unknown state", [](auto& b) { Put<uint32_t>(b, kStateAt, 77); }},
                  {"finished with pending tokens", [](auto& b) { Put<uint32_t>(b, kStateAt, 3); }},
                  {"a NaN in a row", [](auto& b) { Put<uint16_t>(b, RowsAt(b) + 2, 0x7fc0); }},
                  {"an infinity in a row", [](auto& b) { Put<uint16_t>(b, RowsAt(b) + 4, 0x7f80); }},
                  {"an unknown codec", [](auto& b) { Put<uint32_t>(b, kCodecAt, 9); }},
                  {"more positions than the body holds", [](auto& b) { Put<uint32_t>(b, kPositionsAt, 1u << 31); }},
              };
              for (const Case& c : cases) {
                std::vector<uint8_t> b = good;
                c.edit(b);
                Reseal(b);
                llm_session* s = nullptr;
                const llm_status st = Import(rt, b, &s);
                if (st != LLM_ERR_FORMAT || s != nullptr) {
                  err += std::string(c.what) + ": " + llm_status_string(st) + " " + llm_last_error() + "\n";
                }
              }
              // A finished session holding a token out of range.
              std::vector<uint8_t> fin = good;
              Put<uint32_t>(fin, kStateAt, 3);
              Put<uint32_t>(fin, kPendingCountAt, 0);
              fin.erase(fin.begin() + PendingAt(fin), fin.begin() + PendingAt(fin) + 4);
              Put<uint32_t>(fin, kHasUnfedAt, 1);
              Put<int32_t>(fin, kUnfedAt, 4096);
              Reseal(fin);
              llm_session* s = nullptr;
              if (Import(rt, fin, &s) != LLM_ERR_FORMAT) err += "held token out of range accepted\n";
              // Nothing leaked, and a good import and everyone else still run.
              if (FreePages(rt) != free_before) err += "pages leaked\n";
              if (Import(rt, good, &s) != LLM_OK) err += std::string("good import refused: ") + llm_last_error();
              const auto out = Drive(rt, 1);
              if (out.count(s) == 0 || out.at(s).size() != 5) err += "the good import did not finish its generation\n";
              llm_runtime_destroy(rt);
              return err;
            }),
            "");
}

// Class 4: an import cannot change what other sessions compute: no layer scale set on trust,
// huge but finite values saturate in the importer's own rows only, and imported pages never
// enter the prefix cache.
TEST(HostileKvImport, AnImportChangesNoOtherSession) {
  EXPECT_EQ(RunIsolated([] {
              std::string err;
              // A fresh per-layer FP8 runtime has no scales: an unauthenticated import may not set them.
              llm_runtime* bf16 = Open(LLM_KV_DTYPE_BF16);
              std::vector<uint8_t> huge = ExportAfterFirstToken(bf16, 2);
              Put<uint16_t>(huge, RowsAt(huge) + 6, 0x7f7f);  // 3.39e38, finite
              Reseal(huge);
              llm_runtime* fp8 = Open(LLM_KV_DTYPE_FP8_E4M3);
              llm_session* s = nullptr;
              if (Import(fp8, huge, &s) != LLM_ERR_INVALID_STATE) err += "an import calibrated fresh FP8 scales\n";
              // Reference: a session's tokens in a runtime nobody imported into.
              llm_runtime* ref = Open(LLM_KV_DTYPE_FP8_E4M3);
              llm_sampling_options so;
              llm_sampling_options_init(&so);
              so.max_new_tokens = 6;
              auto run_prompt = [&](llm_runtime* rt, int salt) {
                llm_session* x = nullptr;
                llm_session_create(rt, &so, &x);
                const std::vector<int32_t> p = Prompt(salt);
                llm_session_append_tokens(x, p.data(), p.size());
                auto out = Drive(rt, 1);
                llm_session_destroy(x);
                return out[x];
              };
              const std::vector<int32_t> first = run_prompt(ref, 3), want = run_prompt(ref, 4);
              // Same history in `fp8`, then the hostile import (scales now set), then the probe.
              if (run_prompt(fp8, 3) != first) err += "runtimes disagree before any import\n";
              if (Import(fp8, huge, &s) != LLM_OK) err += std::string("finite import refused: ") + llm_last_error() + "\n";
              if (run_prompt(fp8, 4) != want) err += "an import changed another session's tokens\n";
              llm_session_destroy(s);
              // A scale out of bounds in an FP8 blob is refused.
              std::vector<uint8_t> scaled = ExportAfterFirstToken(ref, 5);
              Put<float>(scaled, kHeader, 1e30f);
              Reseal(scaled);
              if (Import(ref, scaled, &s) != LLM_ERR_FORMAT) err += "scale 1e30 accepted\n";
              // Imported pages are not shared: a later session with the same prompt gets no
              // prefix hit from the import.
              llm_runtime* plain = Open(LLM_KV_DTYPE_BF16);
              std::vector<uint8_t> zeros = ExportAfterFirstToken(bf16, 6);
              std::memset(zeros.data() + RowsAt(zeros), 0, zeros.size() - 8 - RowsAt(zeros));
              Reseal(zeros);
              if (Import(plain, zeros, &s) != LLM_OK) err += std::string("zero rows refused: ") + llm_last_error() + "\n";
              const std::vector<int32_t> fresh = run_prompt(bf16, 6);
              llm_runtime* clean = Open(LLM_KV_DTYPE_BF16);
              if (run_prompt(clean, 6) != fresh) err += "runtimes disagree\n";
              llm_runtime_info info;
              info.struct_size = sizeof(info);
              llm_runtime_get_info(plain, &info);
              const uint64_t hits_before = info.prefix_hit_tokens;
              std::vector<int32_t> longer = Prompt(6);
              longer.push_back(9);
              llm_session* probe = nullptr;
              llm_session_create(plain, &so, &probe);
              llm_session_append_tokens(probe, longer.data(), longer.size());
              Drive(plain, 2);
              llm_runtime_get_info(plain, &info);
              if (info.prefix_hit_tokens != hits_before) err += "a later session shared an unauthenticated import's pages\n";
              for (llm_runtime* rt : {bf16, fp8, ref, plain, clean}) llm_runtime_destroy(rt);
              return err;
            }),
            "");
}

// The authenticated variant: the MAC must verify under the key, keys have a minimum size, the
// two kinds of blob are not interchangeable, and a trusted import may set fresh FP8 scales.
TEST(HostileKvImport, AuthenticatedTransfer) {
  EXPECT_EQ(RunIsolated([] {
              std::string err;
              llm_runtime* fp8a = Open(LLM_KV_DTYPE_FP8_E4M3);
              const std::vector<uint8_t> blob = ExportAfterFirstToken(fp8a, 7, /*authenticated=*/true);
              const std::vector<uint8_t> plain = ExportAfterFirstToken(fp8a, 7);
              llm_runtime* fp8b = Open(LLM_KV_DTYPE_FP8_E4M3);
              llm_session* s = nullptr;
              uint8_t wrong[16];
              std::memcpy(wrong, kKey, 16);
              wrong[3] ^= 1;
              if (llm_session_import_kv_authenticated(fp8b, blob.data(), blob.size(), wrong, 16, nullptr, &s) !=
                  LLM_ERR_FORMAT) {
                err += "a wrong key verified\n";
              }
              std::vector<uint8_t> tampered = blob;
              tampered[tampered.size() / 2] ^= 1;
              if (llm_session_import_kv_authenticated(fp8b, tampered.data(), tampered.size(), kKey, 16, nullptr, &s) !=
                  LLM_ERR_FORMAT) {
                err += "a tampered blob verified\n";
              }
              if (llm_session_import_kv_authenticated(fp8b, blob.data(), blob.size(), kKey, 8, nullptr, &s) !=
                  LLM_ERR_INVALID_ARGUMENT) {
                err += "an 8-byte key was accepted\n";
              }
              if (llm_session_import_kv_authenticated(fp8b, plain.data(), plain.size(), kKey, 16, nullptr, &s) !=
                  LLM_ERR_FORMAT) {
                err += "a checksummed blob passed a keyed import\n";
              }
              if (Import(fp8b, blob, &s) != LLM_ERR_INVALID_ARGUMENT) err += "an authenticated blob passed a plain import\n";
              const llm_sampling_options six = SixTokens();
              if (llm_session_import_kv_authenticated(fp8b, blob.data(), blob.size(), kKey, 16, &six, &s) != LLM_OK) {
                err += std::string("the authenticated import failed: ") + llm_last_error() + "\n";
              }
              llm_runtime_info info;
              info.struct_size = sizeof(info);
              llm_runtime_get_info(fp8b, &info);
              if (info.kv_scale_source != LLM_KV_SCALE_CALIBRATED) err += "scale source\n";
              const auto out = Drive(fp8b, 1);
              if (out.count(s) == 0 || out.at(s).size() != 5) err += "the trusted import did not finish\n";
              llm_runtime_destroy(fp8a);
              llm_runtime_destroy(fp8b);
              return err;
            }),
            "");
}

// Class 9: imports from buffers at odd addresses (UBSan checks every load), NULL and empty
// arguments, truncated blobs at every length.
TEST(HostileKvImport, OddAddressesAndEveryTruncation) {
  EXPECT_EQ(RunIsolated([] {
              std::string err;
              llm_runtime* rt = Open(LLM_KV_DTYPE_BF16);
              const std::vector<uint8_t> blob = ExportAfterFirstToken(rt, 8);
              std::vector<uint8_t> odd(blob.size() + 1);
              std::memcpy(odd.data() + 1, blob.data(), blob.size());
              llm_session* s = nullptr;
              if (llm_session_import_kv(rt, odd.data() + 1, blob.size(), nullptr, &s) != LLM_OK) {
                err += std::string("odd address: ") + llm_last_error() + "\n";
              }
              llm_session_destroy(s);
              for (size_t n = 0; n < blob.size(); n += (n < 200 ? 1 : 97)) {
                s = nullptr;
                const llm_status st = llm_session_import_kv(rt, blob.data(), n, nullptr, &s);
                if (st != LLM_ERR_FORMAT || s != nullptr) err += "truncation to " + std::to_string(n) + " accepted\n";
              }
              if (llm_session_import_kv(rt, nullptr, 0, nullptr, &s) != LLM_ERR_INVALID_ARGUMENT) err += "NULL data\n";
              if (llm_session_import_kv(nullptr, blob.data(), blob.size(), nullptr, &s) != LLM_ERR_INVALID_ARGUMENT) {
                err += "NULL runtime\n";
              }
              if (llm_session_import_kv(rt, blob.data(), blob.size(), nullptr, nullptr) != LLM_ERR_INVALID_ARGUMENT) {
                err += "NULL out\n";
              }
              llm_runtime_destroy(rt);
              return err;
            }),
            "");
}

// Class 8: one thread steps with a results array sized for the sessions it knows of while another
// creates and feeds sessions. A step either runs with room for every result or refuses before
// running (LLM_ERR_BUFFER_TOO_SMALL with the count); every generated token is reported.
TEST(HostileConcurrency, NoStepLosesResultsWhileSessionsAppear) {
  EXPECT_EQ(RunIsolated([] {
              std::string err;
              llm_runtime_options o;
              llm_runtime_options_init(&o);
              o.num_threads = 2;
              llm_runtime* rt = nullptr;
              if (llm_runtime_create(kModel.c_str(), &o, &rt) != LLM_OK) return std::string(llm_last_error());
              constexpr int kSessions = 40;
              constexpr uint32_t kNew = 4;
              std::atomic<int> created{0};
              std::vector<llm_session*> all(kSessions, nullptr);
              std::thread maker([&] {
                llm_sampling_options so;
                llm_sampling_options_init(&so);
                so.max_new_tokens = kNew;
                for (int i = 0; i < kSessions; ++i) {
                  llm_session* s = nullptr;
                  if (llm_session_create(rt, &so, &s) != LLM_OK) continue;
                  const std::vector<int32_t> p = Prompt(i);
                  llm_session_append_tokens(s, p.data(), p.size());
                  all[i] = s;
                  created.fetch_add(1);
                  std::this_thread::yield();
                }
              });
              std::map<llm_session*, uint32_t> tokens;
              size_t capacity = 1;
              int refused = 0;
              for (int step = 0; step < 200000; ++step) {
                std::vector<llm_step_result> r(capacity);
                size_t n = 0;
                const llm_status st = llm_decode_step(rt, r.data(), r.size(), &n);
                if (st == LLM_ERR_BUFFER_TOO_SMALL) {
                  ++refused;
                  capacity = n;  // the live count at that moment; more may appear before the retry
                  continue;
                }
                if (st != LLM_OK) {
                  err += std::string("step: ") + llm_status_string(st) + " " + llm_last_error() + "\n";
                  break;
                }
                for (size_t i = 0; i < n; ++i) {
                  if (r[i].token >= 0) ++tokens[r[i].session];
                }
                if (n == 0) std::this_thread::yield();
                uint32_t done = 0;
                for (const auto& [s, c] : tokens) done += c == kNew ? 1 : 0;
                if (created.load() == kSessions && done == kSessions) break;
              }
              maker.join();
              for (llm_session* s : all) {
                if (s != nullptr && tokens[s] != kNew) {
                  err += "a session reported " + std::to_string(tokens[s]) + " of " + std::to_string(kNew) + " tokens\n";
                }
              }
              if (refused == 0) err += "the race was never exercised (no refused step)\n";
              for (llm_session* s : all) llm_session_destroy(s);
              llm_runtime_destroy(rt);
              return err;
            },
            /*timeout_s=*/120),
            "");
}

// A KV budget so large that cache slots would overflow their int32 indices is refused before
// anything is allocated for it.
TEST(HostileOptions, KvBudgetBeyondTheSlotRangeIsRefused) {
  EXPECT_EQ(RunIsolated([] {
              llm_runtime_options o;
              llm_runtime_options_init(&o);
              o.kv_budget_bytes = uint64_t{1} << 40;  // 2^40 / 288 bytes per token: ~3.8e9 slots
              llm_runtime* rt = nullptr;
              const llm_status st = llm_runtime_create(kModel.c_str(), &o, &rt);
              llm_runtime_destroy(rt);
              return ExpectStatus(st, LLM_ERR_OUT_OF_RANGE, "a 1 TiB KV budget");
            }),
            "");
}

}  // namespace
}  // namespace llmrt::hostile
