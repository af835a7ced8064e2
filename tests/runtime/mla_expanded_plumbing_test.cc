// The model's and runtime's side of Backend::MlaExpandedAttention on every CI machine: a device
// backend stand-in (the CPU backend, registered as CUDA in this executable of its own: the
// registry cannot forget an entry) that takes, in every prefill pass it is offered, the sequences
// that bring at least two tokens (a prompt's chunk), computes them with the absorbed ops
// themselves, and leaves the others (decoding beside the chunk) to the model, their output rows
// NaN. So the tokens and logits must be the CPU's bit for bit (the model hands over the right
// query, kv_b, cache, layer, batch and output, uses what comes back, and computes the rows left
// to it: MlaAbsorbQuery and MlaProjectValue on exactly their rows, MlaAttention with the
// stand-in's skip_seq_tokens), the host facts of each offered pass must be right
// (AttentionBatch::total_ctx the sum of the tokens' contexts, min_seq_tokens the fewest tokens a
// sequence brings, host_seq_tokens and host_seq_ctx each sequence's tokens and last context,
// `decode` set on decode passes, which the stand-in declines as the CUDA backend does), a DSA
// pass with a sparse selection is never offered, and a GQA model never offers any. On a host
// where a real CUDA device runs, these cases do not apply.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/registry.h"
#include "src/quant/kv_codec.h"
#include "src/runtime/runtime.h"

namespace llmrt {
namespace {

struct Offers {
  int64_t offered = 0, decode = 0, taken = 0, split = 0, max_ctx = 0;
  // Rows of the sequences left to the model in split passes, and the rows the model passed to
  // MlaAbsorbQuery and MlaProjectValue there; MlaAttention calls there without the skip.
  int64_t rest_rows = 0, absorbed_rows = 0, projected_rows = 0, unskipped_attention = 0;
  bool total_ctx_right = true, decode_right = true, min_seq_tokens_right = true, host_seqs_right = true;
};
Offers g_offers;

// The stand-in takes the sequences that bring at least kTakeTokens tokens (a prompt's chunk) and
// leaves the others (decoding beside it) to the model.
constexpr int64_t kTakeTokens = 2;

class ExpandingCpu : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  int64_t MlaExpandedAttention(const Tensor& q, const Weight& kv_b, const KvCacheView& cache, int64_t layer,
                               const AttentionBatch& batch, const MlaDims& d, float scale, const Tensor& out) override {
    split_ = false;
    ++g_offers.offered;
    g_offers.max_ctx = std::max(g_offers.max_ctx, batch.max_ctx);
    const int32_t* ctx = batch.token_ctx.data_as<const int32_t>();
    const int32_t* seq = batch.token_seq.data_as<const int32_t>();
    int64_t total = 0, fewest = batch.num_tokens, run = 0;
    bool one_token_each = true;
    for (int64_t t = 0; t < batch.num_tokens; ++t) {
      total += ctx[t];
      if (t > 0 && seq[t] == seq[t - 1]) one_token_each = false;
      run = t > 0 && seq[t] == seq[t - 1] ? run + 1 : 1;  // a sequence's rows are contiguous
      if (t + 1 == batch.num_tokens || seq[t + 1] != seq[t]) fewest = std::min(fewest, run);
    }
    if (total != batch.total_ctx) g_offers.total_ctx_right = false;
    if (fewest != batch.min_seq_tokens) g_offers.min_seq_tokens_right = false;
    // Each sequence's tokens and context, as the host copies give them.
    std::vector<int64_t> tokens(static_cast<size_t>(batch.num_seqs), 0), last(static_cast<size_t>(batch.num_seqs), 0);
    for (int64_t t = 0; t < batch.num_tokens; ++t) {
      if (seq[t] < 0 || seq[t] >= batch.num_seqs) continue;
      ++tokens[seq[t]];
      last[seq[t]] = ctx[t];
    }
    if (batch.host_seq_tokens == nullptr || batch.host_seq_ctx == nullptr) {
      g_offers.host_seqs_right = false;
    } else {
      for (int64_t s = 0; s < batch.num_seqs; ++s) {
        if (batch.host_seq_tokens[s] != tokens[s] || batch.host_seq_ctx[s] != last[s]) g_offers.host_seqs_right = false;
      }
    }
    if (batch.decode && !one_token_each) g_offers.decode_right = false;  // (pad rows are not in these runs)
    if (batch.decode) {
      ++g_offers.decode;
      return 0;
    }
    int64_t rest = 0;
    for (const int64_t n : tokens) rest += n < kTakeTokens ? n : 0;
    if (rest == batch.num_tokens) return 0;  // nothing to take
    ++g_offers.taken;
    // The whole pass absorbed, then only the taken sequences' rows written: the others' are NaN
    // until the model computes them.
    const int64_t T = batch.num_tokens;
    absl::StatusOr<Tensor> q_lat = Allocate(DType::kF32, {T, d.heads * d.kv_lora});
    absl::StatusOr<Tensor> o_lat = Allocate(DType::kF32, {T, d.heads * d.kv_lora});
    absl::StatusOr<Tensor> full = Allocate(DType::kF32, {T, d.heads * d.v});
    if (!q_lat.ok() || !o_lat.ok() || !full.ok()) {
      RecordFailure(absl::ResourceExhaustedError("the stand-in's scratch"));
      return kTakeTokens;
    }
    MlaAbsorbQuery(q, kv_b, d, *q_lat);
    MlaAttention(*q_lat, q, cache, layer, batch, d, scale, nullptr, *o_lat);
    MlaProjectValue(*o_lat, kv_b, d, *full);
    for (int64_t t = 0; t < T; ++t) {
      float* dst = out.data_as<float>() + t * out.row_stride();
      const float* src = full->data_as<const float>() + t * full->row_stride();
      for (int64_t i = 0; i < d.heads * d.v; ++i) dst[i] = tokens[seq[t]] >= kTakeTokens ? src[i] : NAN;
    }
    if (rest > 0) {
      ++g_offers.split;
      g_offers.rest_rows += rest;
      split_ = true;
    }
    return kTakeTokens;
  }
  // The model's calls for the sequences left to it.
  void MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d, const Tensor& q_lat) override {
    if (split_) g_offers.absorbed_rows += q.dim(0);
    CpuBackend::MlaAbsorbQuery(q, kv_b, d, q_lat);
  }
  void MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache, int64_t layer,
                    const AttentionBatch& batch, const MlaDims& d, float scale, const Tensor* selected,
                    const Tensor& out_lat) override {
    if (split_ && batch.skip_seq_tokens != kTakeTokens) ++g_offers.unskipped_attention;
    CpuBackend::MlaAttention(q_lat, q, cache, layer, batch, d, scale, selected, out_lat);
  }
  void MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d, const Tensor& out) override {
    if (split_) g_offers.projected_rows += o_lat.dim(0);
    CpuBackend::MlaProjectValue(o_lat, kv_b, d, out);
  }

 private:
  bool split_ = false;  // the last pass offered left sequences to the model
};

absl::StatusOr<std::unique_ptr<Backend>> CreateExpandingCpu(const BackendOptions& o) {
  return std::unique_ptr<Backend>(new ExpandingCpu(o));
}

std::string Model(const std::string& name) { return std::string(LLMRT_TEST_DATA) + "/" + name; }

struct Trace {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;
};

// A session a prompt of each length, in chunks of at most 16 tokens a step, then decoding
// together: prefill passes (some mixing a chunk with decoding tokens) and decode passes.
Trace RunModel(const std::string& model, BackendKind kind, uint32_t codec, std::vector<int> lengths = {5, 13, 21}) {
  RuntimeOptions o;
  o.num_threads = 2;
  o.backend = kind;
  o.max_tokens_per_step = 16;
  o.policy.kv_codec = codec;
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(Model(model), o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  Trace t;
  if (!rt.ok()) return t;
  SessionOptions so;
  so.max_new_tokens = 6;
  std::vector<Session*> ss;
  for (size_t i = 0; i < lengths.size(); ++i) {
    ss.push_back(*(*rt)->CreateSession(so));
    std::vector<int32_t> prompt;
    for (int j = 0; j < lengths[i]; ++j) prompt.push_back(static_cast<int32_t>((j * 37 + i * 11 + 3) % 200));
    EXPECT_TRUE((*rt)->Append(ss.back(), prompt).ok());
  }
  t.tokens.resize(ss.size());
  std::vector<StepResult> results;
  for (int step = 0; step < 20; ++step) {
    results.clear();
    size_t needed = 0;
    EXPECT_TRUE((*rt)->Step(&results, 16, &needed).ok());
    for (const StepResult& r : results) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      if (r.token < 0) continue;
      for (size_t i = 0; i < ss.size(); ++i) {
        if (ss[i] == r.session) t.tokens[i].push_back(r.token);
      }
      std::vector<float> row(static_cast<size_t>((*rt)->Info().vocab_size));
      size_t count = 0;
      EXPECT_TRUE((*rt)->CopyLogits(r.session, row.data(), row.size(), &count).ok());
      t.logits.push_back(std::move(row));
    }
  }
  for (Session* s : ss) (*rt)->DestroySession(s);
  return t;
}

class MlaExpandedPlumbing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    real_devices_ = BackendDeviceCount(BackendKind::kCuda);
    if (real_devices_ > 0) return;
    BackendEntry e;
    e.kind = BackendKind::kCuda;
    e.available = [] { return true; };
    e.create = CreateExpandingCpu;
    e.device_count = [] { return 1; };
    RegisterBackend(e);
  }
  void SetUp() override {
    if (real_devices_ > 0) GTEST_SKIP() << "a real CUDA device runs here: the stand-in is not registered";
    g_offers = Offers{};
  }
  static int real_devices_;
};
int MlaExpandedPlumbing::real_devices_ = 0;

TEST_F(MlaExpandedPlumbing, TakenPrefillPassesGiveTheCpusBits) {
  for (const uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
    SCOPED_TRACE(FindKvCodec(codec)->name());
    g_offers = Offers{};
    const Trace cpu = RunModel("tiny_kimi_k2_qlora_yarn", BackendKind::kCpu, codec);
    EXPECT_EQ(g_offers.offered, 0);  // the CPU backend is not the stand-in
    const Trace dev = RunModel("tiny_kimi_k2_qlora_yarn", BackendKind::kCuda, codec);
    EXPECT_GT(g_offers.taken, 0);
    EXPECT_GT(g_offers.split, 0);  // prompts' chunks beside decoding sequences
    EXPECT_EQ(g_offers.absorbed_rows, g_offers.rest_rows);
    EXPECT_EQ(g_offers.projected_rows, g_offers.rest_rows);
    EXPECT_EQ(g_offers.unskipped_attention, 0);
    EXPECT_GT(g_offers.decode, 0);  // decode passes are offered too, and declined
    EXPECT_TRUE(g_offers.total_ctx_right);
    EXPECT_TRUE(g_offers.min_seq_tokens_right);
    EXPECT_TRUE(g_offers.host_seqs_right);
    EXPECT_TRUE(g_offers.decode_right);
    EXPECT_EQ(dev.tokens, cpu.tokens);
    ASSERT_EQ(dev.logits.size(), cpu.logits.size());
    EXPECT_GT(cpu.logits.size(), 10u);
    for (size_t i = 0; i < cpu.logits.size(); ++i) ASSERT_EQ(dev.logits[i], cpu.logits[i]) << "row " << i;
  }
}

// GLM-5's DSA: a pass where some context exceeds index_topk (8 in this model) attends over
// selected positions and is never offered; the dense passes before are (prompts of 3, 5 and 7
// tokens: the first pass is dense, decoding past 8 positions is sparse), with the CPU's bits.
TEST_F(MlaExpandedPlumbing, SparsePassesAreNotOffered) {
  const Trace cpu = RunModel("tiny_glm_moe_dsa", BackendKind::kCpu, kKvCodecBf16, {3, 5, 7});
  g_offers = Offers{};
  const Trace dev = RunModel("tiny_glm_moe_dsa", BackendKind::kCuda, kKvCodecBf16, {3, 5, 7});
  EXPECT_GT(g_offers.taken, 0);
  EXPECT_LE(g_offers.max_ctx, 8);
  EXPECT_EQ(dev.tokens, cpu.tokens);
  ASSERT_EQ(dev.logits.size(), cpu.logits.size());
  for (size_t i = 0; i < cpu.logits.size(); ++i) ASSERT_EQ(dev.logits[i], cpu.logits[i]) << "row " << i;
}

TEST_F(MlaExpandedPlumbing, GqaModelsOfferNone) {
  RunModel("tiny_glm4_moe", BackendKind::kCuda, kKvCodecBf16);
  EXPECT_EQ(g_offers.offered, 0);
}

}  // namespace
}  // namespace llmrt
