// Fuzz target for KV import: the blob parser and every validation behind it, then a step of the
// imported session (a blob that passed validation must never make a forward pass fail or
// crash). Inputs whose last byte is odd get their checksum resealed first, so mutations reach
// the checks behind the checksum as a tampering peer's would.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/runtime/runtime.h"
#include "tests/fuzz/fuzz_targets.h"

namespace llmrt::fuzz {
namespace {

Runtime* Rt() {
  static std::unique_ptr<Runtime> rt = [] {
    RuntimeOptions o;
    o.num_threads = 1;
    o.page_size = 4;
    o.kv_budget_bytes = 1 << 20;
    auto r = Runtime::Create(std::string(LLMRT_TEST_DATA) + "/tiny_kimi_k2_qlora_yarn", o);
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return rt.get();
}

void Reseal(std::vector<uint8_t>& b) {
  if (b.size() < 8) return;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < b.size() - 8; ++i) h = (h ^ b[i]) * 1099511628211ull;
  std::memcpy(b.data() + b.size() - 8, &h, sizeof(h));
}

}  // namespace

int KvImport(const uint8_t* data, size_t size) {
  Runtime* rt = Rt();
  if (rt == nullptr) return 0;
  std::vector<uint8_t> blob(data, data + size);
  if (!blob.empty() && (blob.back() & 1)) Reseal(blob);
  SessionOptions so;
  so.max_new_tokens = 2;
  absl::StatusOr<Session*> s = rt->ImportKv(blob, {}, so);
  if (!s.ok()) return 0;
  std::vector<StepResult> results;
  size_t needed = 0;
  for (int i = 0; i < 2; ++i) {
    results.clear();
    const absl::Status st = rt->Step(&results, 8, &needed);
    for (const StepResult& r : results) {
      // A validated import must run: a forward failure here is a finding.
      if (!r.status.ok() && r.status.code() != absl::StatusCode::kUnavailable) __builtin_trap();
    }
    if (!st.ok()) __builtin_trap();
  }
  rt->DestroySession(*s);
  return 0;
}

}  // namespace llmrt::fuzz
