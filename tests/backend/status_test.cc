// The status channel (ops do not return statuses: a failure is recorded, later ops are skipped,
// Synchronize returns it once and the backend stays usable) and allocation counting.
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "src/kv/kv_store.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

class StatusChannel : public BackendTest {};

// Observed on the CPU backend: an op whose internal check fails records INTERNAL "<Op>: internal
// check failed at <file>:<line>: <condition>" (the messages are recorded as test properties
// failure_0 ...); the ops enqueued after it do nothing (their outputs keep their old
// contents) until Synchronize, which returns that first failure (a second failing op is skipped
// too, so its failure is never reported) and clears it; the next Synchronize is OK and later ops
// run normally.
TEST_P(StatusChannel, AFailedOpIsReportedOnceAndLaterOpsAreSkippedUntilSynchronize) {
  std::mt19937 rng(70);
  const Tensor a = F32(RandomNormal(6, rng), {2, 3}), b = F32(RandomNormal(9, rng), {3, 3});
  const HostMatrix m = MakeHostMatrix(kWeightF32, 4, 5, {}, rng);
  Weight w;
  ASSERT_TRUE(Prepare(m, &w));
  Tensor victim = NewTensor(DType::kF32, {4});
  Tensor out = NewTensor(DType::kF32, {2, 3});
  // Inconsistent shapes, each a check inside an op.
  const std::vector<std::pair<const char*, std::function<void()>>> failing = {
      {"Add [2,3] + [3,3]", [&] { be().Add(a, b, out); }},
      {"MatMul x [2,3] by w [4,5]", [&] { be().MatMul(a, w, NewTensor(DType::kF32, {2, 4})); }},
      {"SiluMul [2,3] * [3,3]", [&] { be().SiluMul(a, b, out); }},
      {"RmsNorm w [4] on rows of 3", [&] { be().RmsNorm(a, Vector({1, 2, 3, 4}, false), 1e-6f, out); }},
      {"GatherRows out [1,3] for 2 rows", [&] { be().GatherRows(a, I32({0, 1}), NewTensor(DType::kF32, {1, 3})); }},
  };
  int index = 0;
  for (const auto& [what, op] : failing) {
    be().Fill(victim, 1.0f);
    MustOk(be().Synchronize(), "Fill");
    op();
    be().Fill(victim, 7.0f);  // skipped: a failure is pending
    op();                     // fails again, skipped as well
    const absl::Status first = be().Synchronize();
    EXPECT_FALSE(first.ok()) << what << ": the failure was not reported";
    RecordProperty("failure_" + std::to_string(index++), std::string(what) + ": " + first.ToString());
    EXPECT_TRUE(be().Synchronize().ok()) << what << ": the failure was reported twice";
    EXPECT_TRUE(AllBitEqual(ReadF32(victim), std::vector<float>(4, 1.0f))) << what << ": an op after the failure ran";
    be().Fill(victim, 7.0f);  // runs again
    EXPECT_TRUE(AllBitEqual(ReadF32(victim), std::vector<float>(4, 7.0f))) << what << ": the backend stayed failed";
  }
  // And a real op still computes right after all that.
  be().Add(a, a, out);
  std::vector<float> av = ReadF32(a), want(6);
  for (int i = 0; i < 6; ++i) want[i] = av[i] + av[i];
  EXPECT_TRUE(AllBitEqual(ReadF32(out), want));
}

// Allocate counts one per successful call (zero-sized tensors too); a refused shape (negative
// dimension, rank outside 1..4) counts nothing; ops, uploads and downloads allocate nothing.
TEST_P(StatusChannel, AllocationCount) {
  std::mt19937 rng(71);
  const uint64_t c0 = be().allocation_count();
  Tensor x = NewTensor(DType::kF32, {3, 7});
  EXPECT_EQ(be().allocation_count(), c0 + 1);
  NewTensor(DType::kI32, {2, 5, 1});
  NewTensor(DType::kU8, {0});
  EXPECT_EQ(be().allocation_count(), c0 + 3);
  EXPECT_FALSE(be().Allocate(DType::kF32, {4, -1}).ok());
  EXPECT_FALSE(be().Allocate(DType::kF32, {1, 1, 1, 1, 1}).ok());
  EXPECT_EQ(be().allocation_count(), c0 + 3);
  const HostMatrix m = MakeHostMatrix(kWeightBf16, 5, 7, {}, rng);
  Weight w;
  ASSERT_TRUE(Prepare(m, &w));
  Tensor out = NewTensor(DType::kF32, {3, 5});
  const std::vector<float> xv = RandomNormal(21, rng);
  MustOk(be().Upload(xv.data(), xv.size() * sizeof(float), x), "Upload");
  const Weight norm = Vector(std::vector<float>(7, 1.0f), true);
  const uint64_t c1 = be().allocation_count();
  be().MatMul(x, w, out);
  be().Add(out, out, out);
  be().RmsNorm(x, norm, 1e-6f, x);
  ReadF32(out);
  EXPECT_EQ(be().allocation_count(), c1);
}

// Indices read from backend memory (a device backend checks them in its kernels): a token id
// outside the table, a row outside the source, a KV slot outside the cache, an expert outside
// the bank. Each is reported by the next Synchronize, nothing outside the buffers is touched,
// and the backend stays usable.
TEST_P(StatusChannel, IndicesOutOfRangeAreReportedAndTheBackendStaysUsable) {
  std::mt19937 rng(72);
  const HostMatrix table = MakeHostMatrix(kWeightF32, 5, 3, {}, rng);
  Weight w;
  ASSERT_TRUE(Prepare(table, &w));
  Tensor out = NewTensor(DType::kF32, {2, 3});
  const std::vector<std::pair<const char*, std::function<void()>>> failing = {
      {"Embedding id 5 of 5", [&] { be().Embedding(w, I32({1, 5}), out); }},
      {"Embedding id -1", [&] { be().Embedding(w, I32({-1, 0}), out); }},
      {"GatherRows row 2 of 2", [&] { be().GatherRows(out, I32({2}), NewTensor(DType::kF32, {1, 3})); }},
  };
  for (const auto& [what, op] : failing) {
    op();
    const absl::Status s = be().Synchronize();
    EXPECT_FALSE(s.ok()) << what << ": not reported";
    RecordProperty(what, s.ToString());
    EXPECT_TRUE(be().Synchronize().ok()) << what << ": reported twice";
    Tensor v = NewTensor(DType::kF32, {3});
    be().Fill(v, 2.0f);
    EXPECT_TRUE(AllBitEqual(ReadF32(v), std::vector<float>(3, 2.0f))) << what << ": the backend stayed failed";
  }
}

// A KV codec the backend has no kernels for is refused when the store is created, with
// UNSUPPORTED naming the codec (the CPU runs them all; the CUDA backend runs F32 and BF16).
TEST_P(StatusChannel, RefusedKvCodecsAreUnsupportedAtStoreCreation) {
  for (const KvCodec* c : AllKvCodecs()) {
    if (be().SupportsKvCodec(*c)) continue;
    KvStoreOptions o;
    o.codec = c;
    o.shape = MlaKvShape(2, 32, 8, 0);
    o.page_size = 4;
    o.num_pages = 3;
    absl::StatusOr<std::unique_ptr<KvStore>> store = KvStore::Create(be(), o);
    ASSERT_FALSE(store.ok()) << c->name();
    EXPECT_EQ(store.status().code(), absl::StatusCode::kUnimplemented) << store.status();
    EXPECT_NE(store.status().message().find(c->name()), absl::string_view::npos) << store.status();
  }
}

LLMRT_BACKEND_SUITE(StatusChannel);

}  // namespace
}  // namespace llmrt::conformance
