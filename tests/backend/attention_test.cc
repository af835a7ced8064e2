// GqaAttention, MlaAttention (dense and sparse) and DsaSelect over paged caches of every codec,
// with and without the phase policy's BF16 rows, several sequences of several pages each, in
// one batch of prefill chunks and decoding tokens. References in double over the values each
// position reads as (attention_scenario.h); tolerances from AttentionTolerance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "tests/backend/attention_scenario.h"
#include "tests/backend/harness.h"
#include "tests/backend/mla_reference.h"
#ifdef LLMRT_WITH_CUDA
#include "src/backend/cuda/cuda_backend.h"
#endif

namespace llmrt::conformance {
namespace {

struct GqaCase {
  int64_t kv_heads, head_dim, heads, page_size;
  KvShape Shape() const { return GqaKvShape(2, kv_heads, head_dim); }
};

// The last case has groups of 20 query heads: on CUDA's tensor cores, a full and a partial tile of
// 16 heads per KV head.
std::vector<GqaCase> GqaCases() { return {{2, 16, 4, 4}, {1, 7, 3, 3}, {2, 16, 2, 5}, {2, 32, 40, 4}}; }

struct MlaCase {
  int64_t kv_lora, rope, index_dim, tile, index_tile, heads, page_size;
  KvShape Shape() const { return MlaKvShape(2, kv_lora, rope, index_dim, tile, index_tile); }
};

std::vector<MlaCase> MlaCases() {
  return {{512, 64, 0, 128, 128, 2, 4},  // Kimi K2 / DeepSeek-V3 rows
          {32, 7, 10, 5, 4, 3, 3},       // odd, partial FP8 tiles, an indexer key after the row (ignored here)
          {33, 7, 9, 5, 4, 2, 3},        // an odd FP8 part before the BF16 rope key
          {64, 16, 0, 32, 32, 20, 4}};   // 20 heads: two tiles of CUDA's tensor-core kernel
}

struct DsaCase {
  int64_t kv_lora, rope, index_dim, tile, index_tile, heads, page_size, top_k;
  bool ties;  // positive queries; every third key all negative (score exactly 0), the other cached keys equal
  bool long_context = false;  // contexts of several hundred positions (scored in chunks)
  // Contexts past 32K positions for three tokens: CUDA's top-k in two stages (DsaTopKCandidateBytes).
  bool very_long = false;
  KvShape Shape() const { return MlaKvShape(2, kv_lora, rope, index_dim, tile, index_tile); }
};

class AttentionOps : public BackendTest {
 protected:
  // The relative error per product that the backend's attention adds to float32's: CUDA's
  // tensor-core kernels carry the query and the probabilities as bfloat16 parts (two: 2^-16;
  // one: 2^-8, kernels/kernels.h), the CPU and CUDA's scalar kernel compute in float32.
  double ProductEps() const {
    if (GetParam() != BackendKind::kCuda) return 0.0;
    if (eps_override_ >= 0) return eps_override_;
    switch (cuda_attention_) {
      case BackendOptions::DeviceAttention::kTensorCore: return 0x1p-16;
      case BackendOptions::DeviceAttention::kTensorCoreBf16: return 0x1p-8;
      case BackendOptions::DeviceAttention::kWgmma: return 0x1p-8;
      case BackendOptions::DeviceAttention::kScalar: return 0.0;
    }
    return 0.0;
  }
  // Replaces the backend by one running `attention` (CUDA).
  void UseCudaAttention(BackendOptions::DeviceAttention attention, int stages = 0, bool query_registers = true,
                        int tiles = 0) {
    MustOk(be().Synchronize(), "Synchronize");
    BackendOptions options;
    options.device_attention = attention;
    options.device_attention_stages = stages;
    options.device_attention_query_registers = query_registers;
    options.device_attention_tiles_per_block = tiles;
    be_ = Must(CreateBackend(GetParam(), options), "CreateBackend");
    cuda_attention_ = attention;
  }
  BackendOptions::DeviceAttention cuda_attention_ = BackendOptions::DeviceAttention::kTensorCore;
  double eps_override_ = -1;  // >= 0: ProductEps on CUDA (a path other than cuda_attention_'s)

  // seqs: (history, new tokens) per sequence; empty: MixedSeqs(page_size).
  void CheckGqa(const KvCodec* codec, const GqaCase& c, bool fresh, std::mt19937& rng,
                std::vector<std::pair<int64_t, int64_t>> seqs = {});
  void CheckMla(const KvCodec* codec, const MlaCase& c, bool fresh, bool sparse, std::mt19937& rng,
                std::vector<std::pair<int64_t, int64_t>> seqs = {});
  void CheckDsa(const KvCodec* codec, const DsaCase& c, bool fresh, std::mt19937& rng);
  void CheckEveryDsaCase();
};

// One query's softmax attention in double over `positions`: scores[i] with magnitudes mags[i]
// (sum of |products| times the scale) from dot products of dot_len terms, values[i] of dv
// elements. Appends dv outputs and their tolerances. `eps`: a relative error per product of the
// scores and of the weighted sum beyond float32's (ProductEps): eps * mags[i] more on a score,
// and 2 eps * sum_p prob_p |v_p| on an output (the factor 2 as AttentionTolerance's headroom).
void ReferenceAttention(const std::vector<double>& scores, const std::vector<double>& mags, int64_t dot_len,
                        const std::vector<const float*>& values, int64_t dv, std::vector<double>* out,
                        std::vector<double>* tol, double eps) {
  const size_t n = scores.size();
  const double mx = *std::max_element(scores.begin(), scores.end());
  std::vector<double> prob(n);
  double sum = 0, max_err = 0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(scores[i] - mx);
    sum += prob[i];
    max_err = std::max(max_err, ((dot_len + 4) * kU + eps) * mags[i]);
  }
  for (double& p : prob) p /= sum;
  for (int64_t j = 0; j < dv; ++j) {
    double o = 0, wabs = 0;
    for (size_t i = 0; i < n; ++i) {
      o += prob[i] * values[i][j];
      wabs += prob[i] * std::fabs(values[i][j]);
    }
    out->push_back(o);
    tol->push_back(AttentionTolerance(wabs, max_err, static_cast<int64_t>(n)) + 2.0 * eps * wabs);
  }
}

double Dot(const float* a, const float* b, int64_t n, double* mag) {
  double s = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += static_cast<double>(a[i]) * b[i];
    m += std::fabs(static_cast<double>(a[i]) * b[i]);
  }
  *mag = m;
  return s;
}

// One batch: a prefill from scratch, a decoding token with three pages of history, a prefill
// chunk crossing page boundaries after a partial page, a short decode.
std::vector<std::pair<int64_t, int64_t>> MixedSeqs(int64_t ps) {
  return {{0, 4}, {2 * ps + 1, 1}, {ps - 1, ps + 2}, {5, 1}};
}

// out[t, h] = softmax(q[t, h] . K(h / group) * scale) V(h / group) over positions 0 .. ctx(t) - 1.
void AttentionOps::CheckGqa(const KvCodec* codec, const GqaCase& c, bool fresh, std::mt19937& rng,
                            std::vector<std::pair<int64_t, int64_t>> seqs) {
  ScenarioBuilder builder(be());
  ScenarioSpec spec;
  spec.codec = codec;
  spec.shape = c.Shape();
  spec.page_size = c.page_size;
  spec.seqs = seqs.empty() ? MixedSeqs(c.page_size) : seqs;
  spec.fresh = fresh;
  const Scenario sc = builder.Build(spec, rng);
  const int64_t T = sc.hb.num_tokens(), D = c.head_dim, H = c.heads, group = c.heads / c.kv_heads;
  const std::vector<float> q = RandomNormal(static_cast<size_t>(T * H * D), rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor out = NewTensor(DType::kF32, {T, H * D});
  be().GqaAttention(F32(q, {T, H * D}), sc.view(), spec.layer, sc.batch, H, c.kv_heads, D, scale, out);
  std::vector<double> want, tol;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = sc.hb.token_seq[t], ctx = sc.hb.token_ctx[t];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      std::vector<double> scores, mags;
      std::vector<const float*> values;
      for (int64_t p = 0; p < ctx; ++p) {
        const float* row = sc.read[s][p].data();
        double mag = 0;
        scores.push_back(Dot(q.data() + (t * H + h) * D, row + g * D, D, &mag) * scale);
        mags.push_back(mag * scale);
        values.push_back(row + (c.kv_heads + g) * D);
      }
      ReferenceAttention(scores, mags, D, values, D, &want, &tol, ProductEps());
    }
  }
  EXPECT_TRUE(AllNear(ReadF32(out), want, tol)) << spec.Describe() << " heads " << H << " kv_heads " << c.kv_heads
                                                << " head_dim " << D;
}

TEST_P(AttentionOps, GqaAttention) {
  std::mt19937 rng(50);
  for (const KvCodec* codec : KvCodecs()) {
    for (const GqaCase& c : GqaCases()) {
      for (bool fresh : {false, true}) {
        if (fresh && !codec->lossy()) continue;
        CheckGqa(codec, c, fresh, rng);
      }
    }
  }
}

// A `selected` row for each token (I32 [T, k]): ascending subsets padded with -1, a shuffled
// one, one with valid-looking positions after its first -1 (ignored: "up to the first -1"),
// and full rows.
std::vector<int32_t> MakeSelection(const HostBatch& hb, int64_t k, std::mt19937& rng,
                                   std::vector<std::vector<int64_t>>* attended) {
  const int64_t T = hb.num_tokens();
  std::vector<int32_t> sel(static_cast<size_t>(T * k), -1);
  attended->assign(static_cast<size_t>(T), {});
  for (int64_t t = 0; t < T; ++t) {
    const int64_t ctx = hb.token_ctx[t];
    std::vector<int32_t> all(static_cast<size_t>(ctx));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    int32_t* row = sel.data() + t * k;
    int64_t n = std::min(k, ctx);
    switch (t % 4) {
      case 0: n = std::max<int64_t>(1, n - 1); break;  // padded
      case 1: break;                                   // full (or the whole context)
      case 2: n = std::min<int64_t>(n, 2); break;      // garbage after the -1
      default: break;
    }
    std::vector<int32_t> chosen(all.begin(), all.begin() + n);
    if (t % 4 != 3) std::sort(chosen.begin(), chosen.end());  // t % 4 == 3: any order
    std::copy(chosen.begin(), chosen.end(), row);
    if (t % 4 == 2 && n + 1 < k) row[n + 1] = all[static_cast<size_t>(ctx) - 1];
    for (int32_t p : chosen) (*attended)[t].push_back(p);
  }
  return sel;
}

// The MLA dimensions of a case (nope and v matter only to the expanded form).
MlaDims DimsOf(const MlaCase& c) {
  MlaDims d;
  d.heads = c.heads;
  d.nope = 5;
  d.rope = c.rope;
  d.v = 3;
  d.kv_lora = c.kv_lora;
  return d;
}

// score(t, p) = (q_lat[t, h] . c_p + q_rope[t, h] . kr_p) * scale over the causal context (or
// the selected positions), out_lat[t, h] = sum_p prob * c_p.
void AttentionOps::CheckMla(const KvCodec* codec, const MlaCase& c, bool fresh, bool sparse, std::mt19937& rng,
                            std::vector<std::pair<int64_t, int64_t>> seqs) {
  ScenarioBuilder builder(be());
  ScenarioSpec spec;
  spec.codec = codec;
  spec.shape = c.Shape();
  spec.page_size = c.page_size;
  spec.seqs = seqs.empty() ? MixedSeqs(c.page_size) : seqs;
  spec.fresh = fresh;
  const Scenario sc = builder.Build(spec, rng);
  const MlaDims d = DimsOf(c);
  const int64_t T = sc.hb.num_tokens(), H = d.heads, L = d.kv_lora, qw = d.nope + d.rope, W = L + d.rope;
  const std::vector<float> q_lat = RandomNormal(static_cast<size_t>(T * H * L), rng);
  const std::vector<float> q = RandomNormal(static_cast<size_t>(T * H * qw), rng);
  const float scale = 0.07f;
  std::vector<std::vector<int64_t>> attended;
  Tensor out = NewTensor(DType::kF32, {T, H * L});
  if (sparse) {
    const int64_t k = 6;
    const std::vector<int32_t> sel = MakeSelection(sc.hb, k, rng, &attended);
    Tensor selected = NewTensor(DType::kI32, {T, k});
    MustOk(be().Upload(sel.data(), sel.size() * sizeof(int32_t), selected), "Upload");
    be().MlaAttention(F32(q_lat, {T, H * L}), F32(q, {T, H * qw}), sc.view(), spec.layer, sc.batch, d, scale,
                      &selected, out);
  } else {
    for (int64_t t = 0; t < T; ++t) {
      attended.emplace_back(static_cast<size_t>(sc.hb.token_ctx[t]));
      std::iota(attended.back().begin(), attended.back().end(), 0);
    }
    be().MlaAttention(F32(q_lat, {T, H * L}), F32(q, {T, H * qw}), sc.view(), spec.layer, sc.batch, d, scale,
                      nullptr, out);
  }
  std::vector<double> want, tol;
  std::vector<float> qc(static_cast<size_t>(W));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = sc.hb.token_seq[t];
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(q_lat.data() + (t * H + h) * L, L, qc.data());
      std::copy_n(q.data() + (t * H + h) * qw + d.nope, d.rope, qc.data() + L);
      std::vector<double> scores, mags;
      std::vector<const float*> values;
      for (int64_t p : attended[t]) {
        const float* row = sc.read[s][p].data();
        double mag = 0;
        scores.push_back(Dot(qc.data(), row, W, &mag) * scale);
        mags.push_back(mag * scale);
        values.push_back(row);
      }
      ReferenceAttention(scores, mags, W, values, L, &want, &tol, ProductEps());
    }
  }
  EXPECT_TRUE(AllNear(ReadF32(out), want, tol)) << spec.Describe() << (sparse ? " sparse" : " dense");
}

TEST_P(AttentionOps, MlaAttention) {
  std::mt19937 rng(51);
  for (const KvCodec* codec : KvCodecs()) {
    for (const MlaCase& c : MlaCases()) {
      for (bool fresh : {false, true}) {
        if (fresh && !codec->lossy()) continue;
        for (bool sparse : {false, true}) CheckMla(codec, c, fresh, sparse, rng);
      }
    }
  }
}

// AttentionBatch::skip_seq_tokens (the sequences a backend took in expanded form): the tokens of
// the sequences that bring at least that many tokens are left alone (their rows keep what they
// held), the others get the whole batch's results: its bits on the CPU; on a device, whose grid
// then covers the other tokens alone and may split their contexts over the KV length otherwise
// (another float32 summation order of the same softmax), within 2^-16 of the row's largest value.
// Short contexts, and long ones (split and combined on a device) with the last sequence skipped.
TEST_P(AttentionOps, MlaAttentionLeavesTheSkippedSequences) {
  std::mt19937 rng(58);
  for (const KvCodec* codec : KvCodecs()) {
    for (const bool long_contexts : {false, true}) {
      const MlaCase c = MlaCases()[0];
      ScenarioBuilder builder(be());
      ScenarioSpec spec;
      spec.codec = codec;
      spec.shape = c.Shape();
      spec.page_size = c.page_size;
      spec.seqs = MixedSeqs(c.page_size);  // 4, 1, page_size + 2 and 1 tokens
      if (long_contexts) spec.seqs = {{300, 1}, {0, 6}, {700, 1}, {5, 4}};
      const Scenario sc = builder.Build(spec, rng);
      const MlaDims d = DimsOf(c);
      const int64_t T = sc.hb.num_tokens(), H = d.heads, L = d.kv_lora, qw = d.nope + d.rope;
      const Tensor q_lat = F32(RandomNormal(static_cast<size_t>(T * H * L), rng), {T, H * L});
      const Tensor q = F32(RandomNormal(static_cast<size_t>(T * H * qw), rng), {T, H * qw});
      Tensor whole = NewTensor(DType::kF32, {T, H * L});
      be().MlaAttention(q_lat, q, sc.view(), spec.layer, sc.batch, d, 0.07f, nullptr, whole);
      const std::vector<float> sentinel(static_cast<size_t>(T * H * L), 7.25f);
      const Tensor part = F32(sentinel, {T, H * L});
      AttentionBatch skipping = sc.batch;
      skipping.skip_seq_tokens = 4;
      be().MlaAttention(q_lat, q, sc.view(), spec.layer, skipping, d, 0.07f, nullptr, part);
      const std::vector<float> w = ReadF32(whole), got = ReadF32(part);
      const bool bits = GetParam() == BackendKind::kCpu;
      int64_t bad = 0;
      for (int64_t t = 0; t < T; ++t) {
        const bool skipped = spec.seqs[sc.hb.token_seq[t]].second >= 4;
        float largest = 0.0f;
        for (int64_t i = 0; i < H * L; ++i) largest = std::max(largest, std::fabs(w[t * H * L + i]));
        for (int64_t i = 0; i < H * L; ++i) {
          const float want = skipped ? 7.25f : w[t * H * L + i], g = got[t * H * L + i];
          if (skipped || bits) {
            bad += std::memcmp(&g, &want, sizeof(float)) != 0;
          } else {
            bad += !(std::fabs(g - want) <= 0x1p-16f * largest);
          }
        }
      }
      EXPECT_EQ(bad, 0) << spec.Describe();
    }
  }
}

// Long contexts with few (token, head) pairs: a device backend splits each one's positions over
// several blocks and combines the parts (kernels/attention.cu); the result is the same softmax.
// Decoding tokens with 700 and 1500 cached positions and a short prefill chunk after 300. The
// Kimi-shaped MLA rows and the GQA heads of 128 make these contexts larger than the CPU backend
// decodes at once (1 MiB of float32 rows), so its chunked path runs too.
TEST_P(AttentionOps, LongContextsMatchTheReference) {
  std::mt19937 rng(53);
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{700, 1}, {1500, 1}, {300, 2}};
  for (const KvCodec* codec : KvCodecs()) {
    for (bool fresh : {false, true}) {
      if (fresh && !codec->lossy()) continue;
      CheckGqa(codec, GqaCases()[0], fresh, rng, seqs);
      CheckGqa(codec, GqaCase{2, 128, 4, 16}, fresh, rng, seqs);
      CheckMla(codec, MlaCases()[0], fresh, /*sparse=*/false, rng, seqs);
      CheckMla(codec, MlaCases()[1], fresh, /*sparse=*/true, rng, seqs);
    }
  }
}

// CUDA's other attention kernels (the default, kTensorCore, runs every test above): the scalar
// float32 kernel and the tensor-core kernel with one bfloat16 part, over the same cases (the
// warpgroup kernel, which takes Kimi K2's rows only, has its own test below).
TEST_P(AttentionOps, EveryCudaAttentionKernelMatchesTheReference) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's attention kernels";
  std::mt19937 rng(54);
  for (const auto attention :
       {BackendOptions::DeviceAttention::kScalar, BackendOptions::DeviceAttention::kTensorCoreBf16}) {
    UseCudaAttention(attention);
    for (const KvCodec* codec : KvCodecs()) {
      for (bool fresh : {false, true}) {
        if (fresh && !codec->lossy()) continue;
        for (const GqaCase& c : GqaCases()) CheckGqa(codec, c, fresh, rng);
        for (const MlaCase& c : MlaCases()) {
          for (bool sparse : {false, true}) CheckMla(codec, c, fresh, sparse, rng);
        }
        CheckMla(codec, MlaCases()[0], fresh, /*sparse=*/false, rng, {{700, 1}, {1500, 1}, {300, 2}});
      }
    }
  }
}

// The tensor-core kernel's forms on the device (the emulation checks their indexing; this, the
// real cp.async, barriers and shared memory limits): one load stage and two, the query's
// fragments in registers and read from shared memory every chunk, one and two head tiles a
// block, in the default kernel's bound.
TEST_P(AttentionOps, CudaAttentionStagesAndQueryPlacement) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's attention kernels";
  std::mt19937 rng(55);
  for (const int stages : {1, 2}) {
    for (const bool query_registers : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "stages " << stages << (query_registers ? "" : ", query in shared memory"));
      UseCudaAttention(BackendOptions::DeviceAttention::kTensorCore, stages, query_registers);
      for (const KvCodec* codec : KvCodecs()) {
        for (bool fresh : {false, true}) {
          if (fresh && !codec->lossy()) continue;
          for (const GqaCase& c : GqaCases()) CheckGqa(codec, c, fresh, rng);
          for (const MlaCase& c : MlaCases()) CheckMla(codec, c, fresh, /*sparse=*/false, rng);
          CheckMla(codec, MlaCases()[0], fresh, /*sparse=*/false, rng, {{700, 1}, {1500, 1}, {300, 2}});
        }
      }
    }
  }
  // One and two head tiles a block (Kimi K2's rows; 18 heads: a second tile of 2 heads; 32: of 16).
  for (const int tiles : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << tiles << " head tiles a block");
    UseCudaAttention(BackendOptions::DeviceAttention::kTensorCore, 0, true, tiles);
    for (const KvCodec* codec : KvCodecs()) {
      for (bool fresh : {false, true}) {
        if (fresh && !codec->lossy()) continue;
        CheckMla(codec, {512, 64, 0, 128, 128, 18, 4}, fresh, /*sparse=*/false, rng);
        CheckMla(codec, {512, 64, 0, 128, 128, 32, 16}, fresh, /*sparse=*/false, rng, {{700, 1}, {300, 2}});
      }
    }
  }
}

// The warpgroup kernel on Hopper (the emulation checks its descriptors and fragments against
// the PTX ISA's rules; this, the hardware's): Kimi K2's BF16 and flat FP8 rows (with and without
// the phase policy's BF16 fresh rows) with 64 heads (one block a token), 18 (rows past the heads
// zero) and 130 (three blocks), dense and selected positions; contexts of several splits.
TEST_P(AttentionOps, CudaWarpgroupAttention) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's attention kernels";
  std::mt19937 rng(56);
  UseCudaAttention(BackendOptions::DeviceAttention::kWgmma);
  for (const uint32_t id : {kKvCodecBf16, kKvCodecFp8}) {
    const KvCodec* codec = FindKvCodec(id);
    for (bool fresh : {false, true}) {
      if (fresh && !codec->lossy()) continue;
      for (const int64_t heads : {64, 18, 130}) {
        SCOPED_TRACE(::testing::Message() << codec->name() << (fresh ? " fresh " : " ") << heads << " heads");
        for (bool sparse : {false, true}) CheckMla(codec, {512, 64, 0, 128, 128, heads, 16}, fresh, sparse, rng);
      }
      // Several splits of several chunks (the double reference's work kept to one block a token).
      CheckMla(codec, {512, 64, 0, 128, 128, 64, 64}, fresh, false, rng, {{700, 1}, {1500, 1}, {300, 2}, {3000, 1}});
    }
  }
}

MlaDims BackendDims(const testing_mla::Dims& d, int64_t heads) {
  MlaDims md;
  md.heads = heads;
  md.nope = d.nope;
  md.rope = d.rope;
  md.v = d.v;
  md.kv_lora = d.kv_lora;
  return md;
}

// MLA prefill in expanded form (BackendOptions::device_mla_expanded_min_tokens) on CUDA: a pass of
// prefill chunks and a decode token with Kimi K2's and GLM-5's heads over BF16, flat FP8 and tiled FP8 rows
// (with and without fresh rows) and a BF16 or F32 kv_b, against the absorbed form in float64
// over the values each position reads as (tests/backend/mla_reference.h). Each output is held to
// that header's rigorous bound, which is loose (it adds every rounding's worst case), and the
// whole to a relative RMS error under 2^-6, where the roundings of a correct kernel (the query,
// latent, expanded keys and values and probabilities to bfloat16: 2^-9 relative each) give a
// few times 2^-9 and an indexing error gives order 1. The decoding sequence beside the prompts'
// chunks brings fewer tokens than the option's 2: it is left to the absorbed ops (its rows not
// written; the call returns the minimum it took). Passes it does not take return 0 with nothing
// enqueued: F32 rows, and fewer tokens a sequence than the option asks for.
TEST_P(AttentionOps, CudaExpandedMla) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's expanded MLA";
  std::mt19937 rng(57);
  MustOk(be().Synchronize(), "Synchronize");
  BackendOptions options;
  options.device_mla_expanded_min_tokens = 2;
  be_ = Must(CreateBackend(GetParam(), options), "CreateBackend");
  const int64_t H = 3;
  // Kimi K2's heads (the query's fragments in registers), then GLM-5's (read from shared memory;
  // its 8-warp blocks of 128 tokens).
  for (const testing_mla::Dims d : {testing_mla::Dims{128, 64, 128, 512}, testing_mla::Dims{192, 64, 256, 512}}) {
    const int64_t qw = d.nope + d.rope, hw = d.nope + d.v;
    const MlaDims md = BackendDims(d, H);
    const float scale = 1.0f / std::sqrt(static_cast<float>(qw));
    for (const KvCodec* codec : KvCodecs()) {
      for (bool fresh : {false, true}) {
        if (fresh && !codec->lossy()) continue;
        for (WeightFormatId format : {kWeightBf16, kWeightF32}) {
          if (d.v == 256 && format == kWeightF32) continue;  // (the BF16 copy is the Kimi case's)
          ScenarioBuilder builder(be());
          ScenarioSpec spec;
          spec.codec = codec;
          spec.shape = MlaKvShape(2, d.kv_lora, d.rope, 0, 128, 128);
          spec.page_size = 16;
          spec.seqs = {{0, 70}, {40, 1}, {130, 20}, {3, 64}};
          spec.fresh = fresh;
          const Scenario sc = builder.Build(spec, rng);
          const int64_t T = sc.hb.num_tokens();
          const HostMatrix kv_b = MakeHostMatrix(format, H * hw, d.kv_lora, {}, rng);
          Weight w;
          if (!Prepare(kv_b, &w)) continue;
          const std::vector<float> q = RandomNormal(static_cast<size_t>(T * H * qw), rng);
          Tensor out = F32(std::vector<float>(static_cast<size_t>(T * H * d.v), 7.25f), {T, H * d.v});
          const int64_t taken = be().MlaExpandedAttention(F32(q, {T, H * qw}), w, sc.view(), spec.layer, sc.batch,
                                                          md, scale, out);
          SCOPED_TRACE(::testing::Message() << spec.Describe() << " kv_b " << kv_b.Describe());
          if (codec->id() == kKvCodecF32) {
            EXPECT_EQ(taken, 0) << "F32 rows keep the absorbed float32 path";
            continue;
          }
          ASSERT_EQ(taken, 2);  // the prompts' chunks; the decoding sequence is left to the absorbed ops
          const std::vector<float> got = ReadF32(out);
          double err2 = 0, want2 = 0;
          int64_t bad = 0;
          std::vector<double> want(static_cast<size_t>(d.v));
          // Per sequence, position and head.
          std::vector<std::vector<testing_mla::RowMagnitudes>> mags(sc.read.size());
          for (size_t s = 0; s < sc.read.size(); ++s) {
            for (const std::vector<float>& row : sc.read[s]) {
              for (int64_t h = 0; h < H; ++h) {
                mags[s].push_back(testing_mla::Magnitudes(kv_b.dense.data() + h * hw * d.kv_lora, row.data(), d));
              }
            }
          }
          for (int64_t t = 0; t < T; ++t) {
            const int64_t s = sc.hb.token_seq[t];
            if (spec.seqs[s].second < taken) {  // not taken: not written
              for (int64_t i = 0; i < H * d.v; ++i) bad += got[t * H * d.v + i] != 7.25f;
              continue;
            }
            for (int64_t h = 0; h < H; ++h) {
              std::vector<const float*> rows;
              std::vector<const testing_mla::RowMagnitudes*> row_mags;
              for (int64_t p = 0; p < sc.hb.token_ctx[t]; ++p) {
                rows.push_back(sc.read[s][p].data());
                row_mags.push_back(&mags[s][p * H + h]);
              }
              double tol = 0;
              testing_mla::AbsorbedMla(q.data() + (t * H + h) * qw, kv_b.dense.data() + h * hw * d.kv_lora, rows,
                                       row_mags, d, scale, want.data(), &tol);
              for (int64_t j = 0; j < d.v; ++j) {
                const double e = got[(t * H + h) * d.v + j] - want[j];
                err2 += e * e;
                want2 += want[j] * want[j];
                bad += !(std::fabs(e) <= tol);
              }
            }
          }
          EXPECT_EQ(bad, 0);
          EXPECT_LT(std::sqrt(err2 / want2), 0x1p-6);
          std::printf("[expanded MLA] heads %lld + %lld, %lld; %s, kv_b %s: relative RMS error %.3g\n",
                      static_cast<long long>(d.nope), static_cast<long long>(d.rope), static_cast<long long>(d.v),
                      codec->name(), kv_b.Describe().c_str(), std::sqrt(err2 / want2));
        }
      }
    }
  }
  const testing_mla::Dims d{128, 64, 128, 512};
  const int64_t qw = d.nope + d.rope, hw = d.nope + d.v;
  const MlaDims md = BackendDims(d, H);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qw));
  // Fewer tokens a sequence than the option's 2 (the decode token alone): not taken.
  ScenarioBuilder builder(be());
  ScenarioSpec spec;
  spec.codec = FindKvCodec(kKvCodecBf16);
  spec.shape = MlaKvShape(2, d.kv_lora, d.rope, 0, 128, 128);
  spec.page_size = 16;
  spec.seqs = {{40, 1}};
  const Scenario sc = builder.Build(spec, rng);
  const HostMatrix kv_b = MakeHostMatrix(kWeightBf16, H * hw, d.kv_lora, {}, rng);
  Weight w;
  ASSERT_TRUE(Prepare(kv_b, &w));
  Tensor out = NewTensor(DType::kF32, {1, H * d.v});
  EXPECT_EQ(be().MlaExpandedAttention(F32(RandomNormal(static_cast<size_t>(H * qw), rng), {1, H * qw}), w,
                                      sc.view(), spec.layer, sc.batch, md, scale, out),
            0);
  MustOk(be().Synchronize(), "Synchronize");
}

// By count (LLMRT_CUDA_MLA_PREFILL=expanded): a prompt of 300 tokens is taken, the decoding
// sequences beside it (longer contexts) are not, and their rows are left as they were.
TEST_P(AttentionOps, CudaExpandedMlaByCountTakesThePromptAlone) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's expanded MLA";
  std::mt19937 rng(59);
  MustOk(be().Synchronize(), "Synchronize");
  BackendOptions options;
  options.device_mla_expanded_min_tokens = BackendOptions::kMlaExpandedByCount;
  be_ = Must(CreateBackend(GetParam(), options), "CreateBackend");
  const int64_t H = 3;
  const testing_mla::Dims d{128, 64, 128, 512};
  const int64_t qw = d.nope + d.rope, hw = d.nope + d.v;
  const MlaDims md = BackendDims(d, H);
  ScenarioBuilder builder(be());
  ScenarioSpec spec;
  spec.codec = FindKvCodec(kKvCodecBf16);
  spec.shape = MlaKvShape(2, d.kv_lora, d.rope, 0, 128, 128);
  spec.page_size = 16;
  spec.seqs = {{900, 1}, {0, 300}, {40, 1}};
  const Scenario sc = builder.Build(spec, rng);
  const int64_t T = sc.hb.num_tokens();
  const HostMatrix kv_b = MakeHostMatrix(kWeightBf16, H * hw, d.kv_lora, {}, rng);
  Weight w;
  ASSERT_TRUE(Prepare(kv_b, &w));
  Tensor out = F32(std::vector<float>(static_cast<size_t>(T * H * d.v), 7.25f), {T, H * d.v});
  EXPECT_EQ(be().MlaExpandedAttention(F32(RandomNormal(static_cast<size_t>(T * H * qw), rng), {T, H * qw}), w,
                                      sc.view(), spec.layer, sc.batch, md, 1.0f / std::sqrt(static_cast<float>(qw)),
                                      out),
            300);
  const std::vector<float> got = ReadF32(out);
  int64_t written = 0, kept = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < H * d.v; ++i) {
      const bool same = got[t * H * d.v + i] == 7.25f;
      if (sc.hb.token_seq[t] == 1) {
        written += !same;
      } else {
        kept += same;
      }
    }
  }
  EXPECT_EQ(kept, 2 * H * d.v);
  EXPECT_EQ(written, 300 * H * d.v);
  MustOk(be().Synchronize(), "Synchronize");
}

// GQA prefill on FlashAttention tiles (CUDA, BackendOptions::device_gqa_flash_min_tokens): the
// contexts' rows gathered as bfloat16, 64 query tokens of one sequence and head a block, the
// query and the probabilities as bfloat16. Every product then carries two bfloat16 roundings
// (query and key, probability and value; keys and values are exact in bfloat16 for BF16 rows,
// FP8 ones are rounded once after their scale), 2^-9 relative each: ProductEps 2^-8 (the first
// order; the second, 2^-18, is within the bound's float32 terms). GLM-4.5's heads (128, groups of
// 12), groups of 3 at head size 32, and one KV head per query head; the same batch through the
// token-by-token kernel must differ (the pass was taken: its roundings are other ones), except on
// F32 rows, which keep the float32 path, bit for bit. Decode passes, and the tokens of sequences
// that bring fewer tokens than the minimum (decoding beside a prompt's chunk), must be the token
// kernel's bit for bit.
TEST_P(AttentionOps, CudaGqaFlashPrefill) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's GQA prefill on FlashAttention tiles";
  std::mt19937 rng(58);
  MustOk(be().Synchronize(), "Synchronize");
  const auto with_min_tokens = [&](int64_t n) {
    BackendOptions options;
    options.device_gqa_flash_min_tokens = n;
    return Must(CreateBackend(GetParam(), options), "CreateBackend");
  };
  be_ = with_min_tokens(2);
  const std::unique_ptr<Backend> tokens = with_min_tokens(0);
  // The output of GqaAttention on `be` over the scenario and query that `r` makes (`decode`: the
  // pass marked a decode pass).
  const auto run = [](Backend& be, const ScenarioSpec& spec, const GqaCase& c, bool decode, std::mt19937 r) {
    ScenarioBuilder builder(be);
    const Scenario sc = builder.Build(spec, r);
    const int64_t T = sc.hb.num_tokens(), H = c.heads, D = c.head_dim;
    const std::vector<float> q = RandomNormal(static_cast<size_t>(T * H * D), r);
    Tensor qt = Must(be.Allocate(DType::kF32, {T, H * D}), "Allocate");
    Tensor out = Must(be.Allocate(DType::kF32, {T, H * D}), "Allocate");
    MustOk(be.Upload(q.data(), q.size() * sizeof(float), qt), "Upload");
    AttentionBatch batch = sc.batch;
    batch.decode = decode;
    be.GqaAttention(qt, sc.view(), spec.layer, batch, H, c.kv_heads, D, 1.0f / std::sqrt(static_cast<float>(D)), out);
    MustOk(be.Synchronize(), "GqaAttention");
    std::vector<float> v(static_cast<size_t>(T * H * D));
    MustOk(be.Download(out, v.data(), v.size() * sizeof(float)), "Download");
    return v;
  };
  eps_override_ = 0x1p-8;
  // A batch of prompts' chunks, and one of chunks beside decoding sequences (their one token
  // stays on the token kernel: the same bits as without the option, since contexts under 128
  // positions are never split, whichever tokens the grid lists).
  const std::vector<std::pair<int64_t, int64_t>> batches[] = {{{0, 70}, {40, 2}, {130, 20}, {3, 64}},
                                                               {{90, 1}, {0, 70}, {120, 1}, {40, 20}}};
  for (const GqaCase& c : {GqaCase{2, 128, 24, 16}, GqaCase{2, 32, 6, 4}, GqaCase{3, 64, 3, 8}}) {
    for (const KvCodec* codec : KvCodecs()) {
      for (bool fresh : {false, true}) {
        for (const auto& seqs : batches) {
          if (fresh && !codec->lossy()) continue;
          ScenarioSpec spec;
          spec.codec = codec;
          spec.shape = c.Shape();
          spec.page_size = c.page_size;
          spec.seqs = seqs;
          spec.fresh = fresh;
          const std::mt19937 again = rng;  // the same rows and query for the token-by-token kernel
          CheckGqa(codec, c, fresh, rng, spec.seqs);
          SCOPED_TRACE(::testing::Message() << spec.Describe() << " heads " << c.heads << " head_dim " << c.head_dim);
          const std::vector<float> flash = run(*be_, spec, c, false, again), plain = run(*tokens, spec, c, false, again);
          // Token by token: each sequence's rows, taken (2 tokens or more) or not.
          const int64_t row = c.heads * c.head_dim;
          int64_t t0 = 0;
          for (const auto& [history, n] : seqs) {
            const std::vector<float> a(flash.begin() + t0 * row, flash.begin() + (t0 + n) * row);
            const std::vector<float> b(plain.begin() + t0 * row, plain.begin() + (t0 + n) * row);
            if (codec->id() == kKvCodecF32 || n < 2) {
              EXPECT_TRUE(AllBitEqual(a, b)) << "sequence of " << n << " tokens after " << history
                                             << ": F32 rows and decoding tokens keep the token kernel";
            } else {
              EXPECT_FALSE(AllBitEqual(a, b)) << "sequence of " << n << " tokens after " << history
                                              << ": ran token by token";
            }
            t0 += n;
          }
        }
      }
    }
  }
  eps_override_ = -1;
  // A decode pass stays on the token kernel, bit for bit, though every sequence's one token meets
  // a minimum of 1.
  const std::unique_ptr<Backend> every = with_min_tokens(1);
  const GqaCase c{2, 32, 6, 4};
  ScenarioSpec spec;
  spec.codec = FindKvCodec(kKvCodecBf16);
  spec.shape = c.Shape();
  spec.page_size = c.page_size;
  spec.seqs = {{40, 1}, {9, 1}, {70, 1}};
  EXPECT_TRUE(AllBitEqual(run(*every, spec, c, true, rng), run(*tokens, spec, c, true, rng))) << "a decode pass";
  MustOk(be().Synchronize(), "Synchronize");
}

// I(t, p) = sum_h w[t, h] relu(q[t, h] . k_p * key_scale); selected[t] = the top_k positions by
// I (ties to the earlier position) ascending, or 0 .. ctx - 1 then -1 when ctx <= top_k. The
// reference checks its own data is decisive: every selected / unselected pair is separated by
// more than both scores' error bounds, or exactly tied (every head's dot product certainly
// negative, further below 0 than its error bound, so relu gives exactly 0 in any float32 order;
// or the same key as read) with the earlier one selected.
void AttentionOps::CheckDsa(const KvCodec* codec, const DsaCase& c, bool fresh, std::mt19937& rng) {
  ScenarioBuilder builder(be());
  const int64_t ko = c.kv_lora + c.rope, Di = c.index_dim, Hi = c.heads, k = c.top_k;
  ScenarioSpec spec;
  spec.codec = codec;
  spec.shape = c.Shape();
  spec.page_size = c.page_size;
  // Contexts shorter than, equal to and longer than top_k, several pages.
  spec.seqs = {{0, 3}, {k - 1, 1}, {3 * c.page_size + 1, 2}, {2, 5}};
  if (c.long_context) spec.seqs = {{600, 1}, {0, 2}, {254, 4}};  // 601 and 255..258 positions
  if (c.very_long) spec.seqs = {{33000, 1}, {40000, 2}};          // 33,001 and 40,001..40,002
  spec.fresh = fresh;
  std::vector<float> shared = RandomNormal(static_cast<size_t>(Di), rng);
  for (float& x : shared) x = std::fabs(x) + 0.01f;  // positive: with positive queries, a decisive score
  if (c.ties) {
    const auto seqs = spec.seqs;
    spec.shape_values = [=](int64_t s, int64_t p, float* row) {
      if (p % 3 == 1) {
        for (int64_t i = 0; i < Di; ++i) row[ko + i] = -std::fabs(row[ko + i]) - 0.01f;
      } else if (p < seqs[s].first) {  // the other cached rows share one key
        std::copy_n(shared.data(), Di, row + ko);
      }
    };
  }
  const Scenario sc = builder.Build(spec, rng);
  const int64_t T = sc.hb.num_tokens();
  std::vector<float> q = RandomNormal(static_cast<size_t>(T * Hi * Di), rng);
  if (c.ties) {
    for (float& x : q) x = std::fabs(x) + 0.01f;
  }
  std::vector<float> w = RandomNormal(static_cast<size_t>(T * Hi), rng);
  if (c.very_long) {  // positive weights: the top scores positive, not a tie of zeros
    for (float& x : w) x = std::fabs(x) + 0.01f;
  }
  const float key_scale = 1.0f / std::sqrt(static_cast<float>(Di));
  Tensor selected = NewTensor(DType::kI32, {T, k});
  be().DsaSelect(F32(q, {T, Hi * Di}), F32(w, {T, Hi}), sc.view(), spec.layer, sc.batch, Hi, Di, ko, key_scale, k,
                 selected);
  std::vector<int32_t> want(static_cast<size_t>(T * k), -1);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = sc.hb.token_seq[t], ctx = sc.hb.token_ctx[t];
    int32_t* row = want.data() + t * k;
    if (ctx <= k) {
      std::iota(row, row + ctx, 0);
      continue;
    }
    std::vector<double> score(static_cast<size_t>(ctx)), err(static_cast<size_t>(ctx));
    std::vector<bool> zero(static_cast<size_t>(ctx), true);
    for (int64_t p = 0; p < ctx; ++p) {
      const float* key = sc.read[s][p].data() + ko;
      double sum = 0, e = 0, relu_mag = 0;
      const double terms = Di + 4;
      for (int64_t h = 0; h < Hi; ++h) {
        const float* qh = q.data() + (t * Hi + h) * Di;
        double mag = 0;
        const double dot = Dot(qh, key, Di, &mag) * key_scale;
        // Certainly negative in any float32 order: relu gives exactly 0.
        zero[p] = zero[p] && dot + terms * kU * mag * key_scale < 0.0;
        const double wh = w[t * Hi + h];
        if (dot > 0) sum += wh * dot;
        relu_mag += std::fabs(wh) * std::max(dot, 0.0);
        e += std::fabs(wh) * terms * kU * mag * key_scale;
      }
      score[p] = sum;
      err[p] = e + (Hi + 2) * kU * relu_mag;
    }
    std::vector<int32_t> order(static_cast<size_t>(ctx));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
    auto same_key = [&](int64_t a, int64_t b) {
      return std::memcmp(sc.read[s][a].data() + ko, sc.read[s][b].data() + ko, Di * sizeof(float)) == 0;
    };
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = k; j < ctx; ++j) {
        const int32_t a = order[i], b = order[j];
        const bool tie = (zero[a] && zero[b]) || same_key(a, b);
        ASSERT_TRUE(score[a] - score[b] > err[a] + err[b] || (tie && a < b))
            << "test data not decisive: " << spec.Describe() << " t=" << t << " positions " << a << ", " << b << " (scores " << score[a] << ", " << score[b] << ")";
      }
    }
    std::copy(order.begin(), order.begin() + k, row);
    std::sort(row, row + k);
  }
  EXPECT_TRUE(AllEqual(ReadI32(selected), want)) << spec.Describe() << " top_k " << k << " ties " << c.ties;
}

std::vector<DsaCase> DsaCases() {
  return {{32, 7, 10, 5, 4, 3, 4, 4, false},       {32, 7, 10, 5, 4, 3, 4, 6, true},
          {512, 64, 128, 128, 128, 2, 5, 6, false}, {33, 7, 9, 5, 4, 2, 3, 5, true},
          {32, 7, 10, 5, 4, 2, 16, 8, false, true}, {32, 7, 10, 5, 4, 2, 16, 8, true, true},
          // GLM-5's 32 indexer heads over several of CUDA's tiled blocks of 256 positions, an
          // index key of two chunks of its columns (a head dimension of 128 makes the scores of
          // random data too close for the reference's error bounds to decide).
          {64, 16, 40, 32, 40, 32, 16, 8, false, true},
          {32, 7, 10, 5, 4, 2, 16, 8, false, false, true}};
}

// Cases run with a seed of their own (DsaSelect's data keep theirs): 40 heads (CUDA's
// tensor-core scores: four m16 tiles) over an index key of 64 in tiles of 32 (two scale groups
// under the tiled codec).
std::vector<DsaCase> DsaManyHeadCases() { return {{64, 16, 64, 32, 32, 40, 16, 8, false, true}}; }
constexpr uint32_t kDsaManyHeadSeed = 53;

// Every DSA case over every codec (fresh rows for the lossy ones), each set with its seed.
void AttentionOps::CheckEveryDsaCase() {
  for (const auto& [cases, seed] : {std::pair{DsaCases(), 52u}, std::pair{DsaManyHeadCases(), kDsaManyHeadSeed}}) {
    std::mt19937 rng(seed);
    for (const KvCodec* codec : KvCodecs()) {
      for (const DsaCase& c : cases) {
        for (bool fresh : {false, true}) {
          if (fresh && !codec->lossy()) continue;
          CheckDsa(codec, c, fresh, rng);
        }
      }
    }
  }
}

TEST_P(AttentionOps, DsaSelect) { CheckEveryDsaCase(); }

// CUDA's DSA scoring kernels (BackendOptions::device_dsa_scores; the default, tiled in
// registers, runs the test above): staged in shared memory, one thread a position, and the
// tensor cores select alike over the same cases and data (the seed of DsaSelect, whose data the
// CPU's run of that test shows decisive by float32's bound, (head_dim + 4) u sum |q k| a dot).
// The tensor cores' dot: the query in three bfloat16 parts, so every product is exact; each of
// the 3 kp / 16 MMAs (kp: head_dim rounded up to 16) sums its 16 products and the accumulator
// at once, within about 2u of their magnitude, so the dot is within (3 kp / 8) u sum |q k| plus a
// rounding per scale group and for the scale, inside float32's bound for these head dimensions
// (9 to 128). Cases its shapes or scale groups do not fit fall back to the tiled kernel.
TEST_P(AttentionOps, EveryCudaDsaScoringKernelSelectsTheTopScores) {
  if (GetParam() != BackendKind::kCuda) GTEST_SKIP() << "the CUDA backend's DSA scoring kernels";
  for (const int form : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "device_dsa_scores " << form);
    MustOk(be().Synchronize(), "Synchronize");
    BackendOptions options;
    options.device_dsa_scores = form;
    be_ = Must(CreateBackend(GetParam(), options), "CreateBackend");
    CheckEveryDsaCase();
#ifdef LLMRT_WITH_CUDA
    const auto* cuda = dynamic_cast<const CudaBackend*>(&be());
    ASSERT_NE(cuda, nullptr);
    // (The tensor cores take the cases their shapes and scale groups fit: most of them.)
    if (form == 3) {
      EXPECT_GT(cuda->dsa_tensor_core_passes(), 0) << "the tensor-core scores never ran";
    } else {
      EXPECT_EQ(cuda->dsa_tensor_core_passes(), 0);
    }
#endif
  }
}

// The tiled FP8 codec's layout keeps every load aligned whatever the shape: BF16 segments start
// on even bytes, tile scales on multiples of four, rows are multiples of four bytes (the odd
// shapes of the cases above, GQA head_dim 7 and MLA kv_lora 33 among them, run in every test).
TEST_P(AttentionOps, TiledFp8RowsAreAlignedForEveryShape) {
  const KvCodec* tiled = FindKvCodec(kKvCodecFp8Tiled);
  ASSERT_NE(tiled, nullptr);
  std::vector<KvShape> shapes;
  for (const GqaCase& c : GqaCases()) shapes.push_back(c.Shape());
  for (const MlaCase& c : MlaCases()) shapes.push_back(c.Shape());
  for (const DsaCase& c : DsaCases()) shapes.push_back(c.Shape());
  for (const KvShape& shape : shapes) {
    const KvRowLayout l = tiled->Layout(shape);
    EXPECT_EQ(l.row_bytes % 4, 0) << l.row_bytes;
    EXPECT_EQ(l.scale_offset % 4, 0) << l.scale_offset;
    for (const KvSegment& seg : l.segments) {
      if (seg.bf16) {
        EXPECT_EQ(seg.byte_offset % 2, 0) << seg.byte_offset;
      }
    }
  }
}

LLMRT_BACKEND_SUITE(AttentionOps);

}  // namespace
}  // namespace llmrt::conformance
