// MLA's expanded-form kernels (kernels/mla_expanded_kernel.cuh) run on the host
// (cuda_emulation.h), the tensor-core MMA computed from the PTX ISA's fragment tables:
//   - the gather writes each sequence's context rows (cache pages, or the pass's fresh rows) as
//     the codec decodes them, rounded to bfloat16, and zeros past the context;
//   - the attention kernel, fed the expansion the backend's GEMM makes, gives FlashAttention's
//     result over each token's causal context: within the rounding of the probabilities to
//     bfloat16 of a float64 reference over the same bfloat16 operands, and, end to end, within
//     the bfloat16 roundings of the whole path of the absorbed form the CPU engine computes
//     (MlaAbsorbQuery + MlaAttention + MlaProjectValue, in float64 here), and to a relative
//     RMS error under 2^-6 overall.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/quant/kv_codec.h"
#include "tests/backend/mla_reference.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "tests/cuda_emulation/fragment_emulation.h"
#include "tests/cuda_emulation/paged_layer.h"

namespace llmrt::cuda::xp {
inline void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emulation::Mma16816Bf16(d, a, b0, b1); }
using emulation::CpAsync16;
using emulation::CpAsyncWaitAll;
using emulation::LdMatrixTrans2;
}  // namespace llmrt::cuda::xp

#include "kernels/mla_expanded_kernel.cuh"

namespace llmrt::cuda {
namespace {

struct Case {
  int64_t heads, nope, rope, v, kv_lora;
  uint32_t codec;
  bool fresh;
  int64_t page_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (cached history, new tokens)
  std::string Describe() const {
    std::string s = "heads " + std::to_string(heads) + " nope " + std::to_string(nope) + " rope " + std::to_string(rope) +
                    " v " + std::to_string(v) + " kv_lora " + std::to_string(kv_lora) + " " +
                    FindKvCodec(codec)->name() + (fresh ? " fresh" : "") +
                    (emulation::g_landing == emulation::Landing::kAtWait ? " (copies land at the wait)"
                                                                          : " (copies land at once)") +
                    " seqs";
    for (const auto& [c, n] : seqs) s += " (" + std::to_string(c) + ", " + std::to_string(n) + ")";
    return s;
  }
};

float Bf16(float x) { return Bf16ToF32(F32ToBf16(x)); }

// min_tokens > 0: only the sequences of at least that many tokens (MlaExpandedArgs::min_seq_tokens),
// their rows gathered in order at a stride of their longest context; the others' outputs are not
// written.
void Check(const Case& cs, std::mt19937& rng, int64_t min_tokens = 0) {
  SCOPED_TRACE(cs.Describe() + " min tokens " + std::to_string(min_tokens));
  std::normal_distribution<float> normal;
  const int64_t H = cs.heads, L = cs.kv_lora, R = cs.rope, nope = cs.nope, V = cs.v;
  const int64_t qw = nope + R, hw = nope + V, N = H * hw;
  const KvCodec& codec = *FindKvCodec(cs.codec);
  KvShape shape;  // MlaKvShape's rows: latent in tiles of up to 128, a BF16 rope key, an indexer key
  shape.num_layers = PagedLayer::kLayers;
  shape.parts = {{L, std::min<int64_t>(L, 128), false}, {R, 128, true}, {16, 8, false}};
  PagedLayer pl;
  pl.Build(codec, shape, cs.page_size, cs.seqs, cs.fresh, /*spare_pages=*/2, rng);
  const int64_t S = static_cast<int64_t>(cs.seqs.size()), T = pl.T, layer = PagedLayer::kLayer;
  const std::vector<int32_t>& token_seq = pl.token_seq;
  const std::vector<int32_t>& token_ctx = pl.token_ctx;
  const std::vector<std::vector<std::vector<float>>>& read = pl.read;
  const KvRef& kv = pl.kv;
  const BatchRef& batch = pl.batch;

  // The sequences taken, in order (row0[s]: the first gathered row of sequence s, -1 if not
  // taken), at the stride of their longest context.
  std::vector<int64_t> row0(static_cast<size_t>(S), -1);
  int64_t taken = 0, max_ctx = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (cs.seqs[s].second < min_tokens) continue;
    row0[s] = taken++;
    max_ctx = std::max(max_ctx, cs.seqs[s].first + cs.seqs[s].second);
  }
  for (int64_t& r : row0) r = r < 0 ? -1 : r * max_ctx;

  // 1. The gather: every taken context row as read, in bfloat16; zeros past each context.
  const int64_t rows = taken * max_ctx;
  std::vector<uint16_t> latent(static_cast<size_t>(rows * L), 0x7fff), rope_keys(static_cast<size_t>(rows * R), 0x7fff);
  int32_t err = 0;
  emulation::RunGrid({static_cast<unsigned>((rows + 7) / 8), 1, 1}, 256, 0, [&] {
    xp::GatherLatentKernel(kv, layer, batch, S, L, R, max_ctx, latent.data(), rope_keys.data(), &err, min_tokens,
                           taken);
  });
  EXPECT_EQ(err, 0);
  int64_t gather_bad = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (row0[s] < 0) continue;
    const int64_t len = cs.seqs[s].first + cs.seqs[s].second;
    for (int64_t p = 0; p < max_ctx; ++p) {
      const int64_t r = row0[s] + p;
      for (int64_t i = 0; i < L + R; ++i) {
        const uint16_t want = p < len ? F32ToBf16(read[s][p][i]) : 0;
        const uint16_t got = i < L ? latent[r * L + i] : rope_keys[r * R + i - L];
        gather_bad += got != want;
      }
    }
  }
  EXPECT_EQ(gather_bad, 0);

  // 2. The expansion (the backend's GEMM, then rounded to bfloat16).
  std::vector<float> kv_b(static_cast<size_t>(N * L));  // BF16 values, 1/sqrt(L) scale
  for (float& x : kv_b) x = Bf16(normal(rng) / std::sqrt(static_cast<float>(L)));
  std::vector<uint16_t> kvx(static_cast<size_t>(rows * N));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < L; ++k) acc += Bf16ToF32(latent[r * L + k]) * kv_b[n * L + k];
      kvx[r * N + n] = F32ToBf16(acc);
    }
  }

  // 3. The attention.
  std::vector<float> q(static_cast<size_t>(T * H * qw));
  for (float& x : q) x = normal(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qw));
  std::vector<float> out(static_cast<size_t>(T * H * V), 1234.5f);
  MlaExpandedArgs a{};
  a.batch = batch;
  a.num_seqs = S;
  a.heads = H;
  a.nope = nope;
  a.rope = R;
  a.v = V;
  a.q = q.data();
  a.q_ld = H * qw;
  a.kvx = kvx.data();
  a.kvx_ld = N;
  a.k_head_step = a.v_head_step = hw;
  a.v_off = nope;
  a.rope_keys = rope_keys.data();
  a.ctx_stride = max_ctx;
  a.scale = scale;
  a.out = out.data();
  a.out_ld = H * V;
  a.min_seq_tokens = min_tokens;
  MlaExpandedPlan plan;
  ASSERT_TRUE(xp::PlanOf(nope, R, V, &plan));
  const unsigned tiles = static_cast<unsigned>((T + plan.rows - 1) / plan.rows + S);
  const auto run = [&](auto kernel, int warps) {
    emulation::RunGrid({tiles, static_cast<unsigned>(H), 1}, static_cast<unsigned>(32 * warps),
                       static_cast<size_t>(plan.shared_bytes), [&] {
                         kernel(a);
                         emulation::ExpectCopiesAwaited();  // a block ends with every copy it issued awaited
                       });
  };
  // The instance the plan names.
  xp::VisitInstance(nope, R, V, [&](auto in) {
    using I = decltype(in);
    run(xp::ExpandedAttentionKernel<I::kQk, I::kDv, I::kQReg, I::kWarps>, I::kWarps);
  });

  // References: (a) over the kernel's bfloat16 operands in float64, bound: the probabilities'
  // rounding to bfloat16 (2^-9 relative each, so 2^-9 of the largest |value| after
  // normalizing) plus float32 sums; (b) the absorbed form over the values as read and kv_b,
  // within the bound of tests/backend/mla_reference.h.
  std::vector<testing_mla::RowMagnitudes> mags(static_cast<size_t>(rows * H));
  for (int64_t s = 0; s < S; ++s) {
    if (row0[s] < 0) continue;
    for (int64_t p = 0; p < cs.seqs[s].first + cs.seqs[s].second; ++p) {
      for (int64_t h = 0; h < H; ++h) {
        mags[(row0[s] + p) * H + h] = testing_mla::Magnitudes(kv_b.data() + h * hw * L, read[s][p].data(), {nope, R, V, L});
      }
    }
  }
  int64_t bad_a = 0, bad_b = 0;
  double worst_a = 0, worst_b = 0, err2 = 0, want2 = 0;
  int64_t untouched_bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = token_seq[t], ctx = token_ctx[t];
    if (row0[s] < 0) {  // not taken: not written
      for (int64_t i = 0; i < H * V; ++i) untouched_bad += out[t * H * V + i] != 1234.5f;
      continue;
    }
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (t * H + h) * qw;
      // (a)
      std::vector<double> sc(static_cast<size_t>(ctx));
      double mx = -INFINITY, vmax = 0;
      for (int64_t p = 0; p < ctx; ++p) {
        const int64_t r = row0[s] + p;
        double d = 0;
        for (int64_t i = 0; i < nope; ++i) d += double(Bf16(qh[i])) * Bf16ToF32(kvx[r * N + h * hw + i]);
        for (int64_t i = 0; i < R; ++i) d += double(Bf16(qh[nope + i])) * Bf16ToF32(rope_keys[r * R + i]);
        sc[p] = d * scale;
        mx = std::max(mx, sc[p]);
        for (int64_t j = 0; j < V; ++j) vmax = std::max(vmax, std::fabs(double(Bf16ToF32(kvx[r * N + h * hw + nope + j]))));
      }
      double l = 0;
      for (double& x : sc) l += (x = std::exp(x - mx));
      for (int64_t j = 0; j < V; ++j) {
        double o = 0;
        for (int64_t p = 0; p < ctx; ++p) o += sc[p] * Bf16ToF32(kvx[(row0[s] + p) * N + h * hw + nope + j]);
        o /= l;
        const double got = out[(t * H + h) * V + j], e = std::fabs(got - o);
        worst_a = std::max(worst_a, e);
        if (!(e <= 0x1p-9 * vmax * 1.01 + 1e-5)) ++bad_a;
      }
      // (b)
      std::vector<const float*> ctx_rows;
      std::vector<const testing_mla::RowMagnitudes*> ctx_mags;
      for (int64_t p = 0; p < ctx; ++p) {
        ctx_rows.push_back(read[s][p].data());
        ctx_mags.push_back(&mags[(row0[s] + p) * H + h]);
      }
      std::vector<double> want(static_cast<size_t>(V));
      double tol = 0;
      testing_mla::AbsorbedMla(qh, kv_b.data() + h * hw * L, ctx_rows, ctx_mags, {nope, R, V, L}, scale, want.data(),
                               &tol);
      for (int64_t j = 0; j < V; ++j) {
        const double e = out[(t * H + h) * V + j] - want[j];
        err2 += e * e;
        want2 += want[j] * want[j];
      }
      for (int64_t j = 0; j < V; ++j) {
        const double e = std::fabs(out[(t * H + h) * V + j] - want[j]);
        worst_b = std::max(worst_b, e / tol);
        if (!(e <= tol)) ++bad_b;
      }
    }
  }
  EXPECT_EQ(untouched_bad, 0) << "outputs of sequences not taken were written";
  EXPECT_EQ(bad_a, 0) << "largest error against the bf16-operand reference " << worst_a;
  EXPECT_EQ(bad_b, 0) << "largest error against the absorbed form, in bounds " << worst_b;
  // The bound adds every rounding at its worst; the roundings of a correct kernel give a relative
  // RMS error of a few times 2^-9 (an indexing error gives order 1).
  EXPECT_LT(std::sqrt(err2 / want2), 0x1p-6);
}

TEST(MlaExpandedEmulated, MatchesTheAbsorbedForm) {
  std::mt19937 rng(71);
  // Several tiles of one sequence, a one-token sequence (a decode token), prefixes of several
  // chunks, a sequence of exactly 64 tokens, on every codec the path takes, with fresh rows.
  // The copies land at the wait (a tile read before its copies were awaited and published reads
  // stale bytes) and at once (a copy into a tile another warp still reads overwrites it).
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{0, 70}, {5, 1}, {130, 20}, {3, 64}};
  for (emulation::Landing landing : {emulation::Landing::kAtWait, emulation::Landing::kAtIssue}) {
    emulation::g_landing = landing;
    for (uint32_t codec : {kKvCodecBf16, kKvCodecFp8, kKvCodecFp8Tiled}) {
      for (bool fresh : {false, true}) {
        if (fresh && codec == kKvCodecBf16) continue;
        Check({3, 16, 8, 16, 32, codec, fresh, 4, seqs}, rng);
      }
    }
  }
  emulation::g_landing = emulation::Landing::kAtWait;
}

// A prompt's chunks beside decoding sequences with longer contexts (continuous batching), as
// CudaBackend::MlaExpandedAttention takes them: only the sequences of at least min_tokens tokens,
// their latent and rope rows gathered in order at the stride of their longest context, the
// others' outputs left to the absorbed ops (not written); a sequence exactly at the minimum.
TEST(MlaExpandedEmulated, PromptsBesideDecodingSequences) {
  std::mt19937 rng(76);
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{90, 1}, {0, 70}, {120, 1}, {40, 20}, {7, 1}};
  for (emulation::Landing landing : {emulation::Landing::kAtWait, emulation::Landing::kAtIssue}) {
    emulation::g_landing = landing;
    Check({3, 16, 8, 16, 32, kKvCodecFp8Tiled, true, 4, seqs}, rng, 16);
  }
  emulation::g_landing = emulation::Landing::kAtWait;
  Check({3, 16, 8, 16, 32, kKvCodecBf16, false, 4, seqs}, rng, 20);
  Check({2, 16, 8, 16, 32, kKvCodecFp8, false, 4, {{90, 1}, {40, 20}, {120, 2}, {0, 70}, {7, 19}}}, rng, 20);
}

// DeepSeek-V3 / Kimi K2's heads (nope 128, rope 64, v 128) over a latent of 512, one head.
TEST(MlaExpandedEmulated, KimiK2Heads) {
  std::mt19937 rng(72);
  Check({1, 128, 64, 128, 512, kKvCodecBf16, false, 16, {{10, 70}}}, rng);
  Check({1, 128, 64, 128, 512, kKvCodecFp8, true, 16, {{40, 30}, {0, 2}}}, rng);
}

// GLM-5's heads (nope 192, rope 64, v 256): the query read from shared memory, 8 warps and 128
// query tokens a block (a sequence of 150 tokens: a full tile and a partial one).
TEST(MlaExpandedEmulated, Glm5Heads) {
  std::mt19937 rng(73);
  Check({1, 192, 64, 256, 512, kKvCodecBf16, false, 16, {{20, 150}, {0, 3}}}, rng);
  emulation::g_landing = emulation::Landing::kAtIssue;
  Check({1, 192, 64, 256, 512, kKvCodecFp8, true, 16, {{70, 40}}}, rng);
  emulation::g_landing = emulation::Landing::kAtWait;
}

// GQA prefill on the same kernel (CudaBackend::GqaFlashAttention): the cache rows [K of kv heads |
// V of kv heads] (tiles of one head each, as GLM-4.5's KV shape makes them) gathered whole as
// bfloat16, query head h reading KV head h / group, the whole key in the nope columns (no rope
// part). Held to FlashAttention over the gathered bfloat16 operands and the bfloat16-rounded
// query in float64, within the probabilities' rounding (2^-9 of the largest |value|), and to the
// float32-exact attention the CPU computes over the values as read, to a relative RMS error under
// 2^-6 (the bfloat16 query, keys and probabilities).
// min_tokens > 0: only the sequences of at least that many tokens (MlaExpandedArgs::min_seq_tokens),
// their rows gathered in order at a stride of their longest context; the others' outputs are not
// written.
void CheckGqa(int64_t heads, int64_t kv_heads, int64_t D, uint32_t codec_id, bool fresh,
              const std::vector<std::pair<int64_t, int64_t>>& seqs, std::mt19937& rng, int64_t min_tokens = 0) {
  const KvCodec& codec = *FindKvCodec(codec_id);
  SCOPED_TRACE(::testing::Message() << "heads " << heads << " kv heads " << kv_heads << " head_dim " << D << " "
                                    << codec.name() << (fresh ? " fresh" : "") << " min tokens " << min_tokens);
  std::normal_distribution<float> normal;
  KvShape shape;
  shape.num_layers = PagedLayer::kLayers;
  shape.parts = {{kv_heads * D, D, false}, {kv_heads * D, D, false}};
  PagedLayer pl;
  pl.Build(codec, shape, /*page_size=*/8, seqs, fresh, /*spare_pages=*/1, rng);
  const int64_t S = static_cast<int64_t>(seqs.size()), T = pl.T, W = 2 * kv_heads * D;
  ASSERT_EQ(pl.layout.width, W);
  // The sequences taken, in order (row[s]: the first gathered row of sequence s, -1 if not taken).
  std::vector<int64_t> row(static_cast<size_t>(S), -1);
  int64_t taken = 0, stride = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (seqs[s].second < min_tokens) continue;
    row[s] = taken++;
    stride = std::max(stride, seqs[s].first + seqs[s].second);
  }
  for (int64_t& r : row) r = r < 0 ? -1 : r * stride;
  std::vector<uint16_t> rows(static_cast<size_t>(taken * stride * W), 0x7fff);
  int32_t err = 0;
  emulation::RunGrid({static_cast<unsigned>((taken * stride + 7) / 8), 1, 1}, 256, 0, [&] {
    xp::GatherLatentKernel(pl.kv, PagedLayer::kLayer, pl.batch, S, W, 0, stride, rows.data(), rows.data(), &err,
                           min_tokens, taken);
  });
  EXPECT_EQ(err, 0);
  std::vector<float> q(static_cast<size_t>(T * heads * D));
  for (float& x : q) x = normal(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> out(static_cast<size_t>(T * heads * D), 1234.5f);
  MlaExpandedArgs a{};
  a.batch = pl.batch;
  a.num_seqs = S;
  a.heads = heads;
  a.nope = D;
  a.rope = 0;
  a.v = D;
  a.q = q.data();
  a.q_ld = heads * D;
  a.kvx = rows.data();
  a.kvx_ld = W;
  a.group = heads / kv_heads;
  a.k_head_step = a.v_head_step = D;
  a.v_off = kv_heads * D;
  a.rope_keys = rows.data();
  a.ctx_stride = stride;
  a.scale = scale;
  a.out = out.data();
  a.out_ld = heads * D;
  a.min_seq_tokens = min_tokens;
  MlaExpandedPlan plan;
  ASSERT_TRUE(xp::PlanOf(D, 0, D, &plan));
  const unsigned tiles = static_cast<unsigned>((T + plan.rows - 1) / plan.rows + S);
  xp::VisitInstance(D, 0, D, [&](auto in) {
    using I = decltype(in);
    emulation::RunGrid({tiles, static_cast<unsigned>(heads), 1}, static_cast<unsigned>(32 * I::kWarps),
                       static_cast<size_t>(plan.shared_bytes), [&] {
                         xp::ExpandedAttentionKernel<I::kQk, I::kDv, I::kQReg, I::kWarps>(a);
                         emulation::ExpectCopiesAwaited();
                       });
  });
  int64_t bad = 0;
  double worst = 0, err2 = 0, want2 = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t sq = pl.token_seq[t], ctx = pl.token_ctx[t];
    if (row[sq] < 0) {  // not taken: not written
      for (int64_t i = 0; i < heads * D; ++i) bad += out[t * heads * D + i] != 1234.5f;
      continue;
    }
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kh = h / (heads / kv_heads);
      const float* qh = q.data() + (t * heads + h) * D;
      // Over the kernel's operands (the gathered rows) and over the values as read, in float64.
      for (const bool as_read : {false, true}) {
        const auto key = [&](int64_t p, int64_t i) -> double {
          return as_read ? pl.read[sq][p][kh * D + i] : Bf16ToF32(rows[(row[sq] + p) * W + kh * D + i]);
        };
        const auto value = [&](int64_t p, int64_t i) -> double {
          return as_read ? pl.read[sq][p][(kv_heads + kh) * D + i]
                         : Bf16ToF32(rows[(row[sq] + p) * W + (kv_heads + kh) * D + i]);
        };
        std::vector<double> sc(static_cast<size_t>(ctx));
        double mx = -INFINITY, vmax = 0;
        for (int64_t p = 0; p < ctx; ++p) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += (as_read ? double(qh[i]) : double(Bf16(qh[i]))) * key(p, i);
          sc[p] = d * scale;
          mx = std::max(mx, sc[p]);
          for (int64_t i = 0; i < D; ++i) vmax = std::max(vmax, std::fabs(value(p, i)));
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - mx));
        for (int64_t i = 0; i < D; ++i) {
          double o = 0;
          for (int64_t p = 0; p < ctx; ++p) o += sc[p] * value(p, i);
          o /= l;
          const double got = out[(t * heads + h) * D + i];
          if (as_read) {
            err2 += (got - o) * (got - o);
            want2 += o * o;
          } else {
            worst = std::max(worst, std::fabs(got - o));
            if (!(std::fabs(got - o) <= 0x1p-9 * vmax * 1.01 + 1e-5)) ++bad;
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "largest error against the bf16-operand reference " << worst;
  EXPECT_LT(std::sqrt(err2 / want2), 0x1p-6);
  // The gather: every taken context row as read, in bfloat16; zeros past each context.
  int64_t gather_bad = 0;
  for (int64_t sq = 0; sq < S; ++sq) {
    if (row[sq] < 0) continue;
    const int64_t len = seqs[sq].first + seqs[sq].second;
    for (int64_t p = 0; p < stride; ++p) {
      for (int64_t i = 0; i < W; ++i) {
        gather_bad += rows[(row[sq] + p) * W + i] != (p < len ? F32ToBf16(pl.read[sq][p][i]) : 0);
      }
    }
  }
  EXPECT_EQ(gather_bad, 0);
}

// Groups of 3, 1, 4 and 2, GLM-4.5's head size of 128 and 96 (padded to the instance's 128),
// several tiles and a one-token sequence, BF16 and both FP8 codecs, fresh rows; copies landing at
// the wait and at once.
TEST(MlaExpandedEmulated, GqaPrefill) {
  std::mt19937 rng(74);
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{0, 70}, {9, 1}, {40, 20}};
  for (emulation::Landing landing : {emulation::Landing::kAtWait, emulation::Landing::kAtIssue}) {
    emulation::g_landing = landing;
    CheckGqa(6, 2, 32, kKvCodecBf16, false, seqs, rng);
    CheckGqa(2, 2, 64, kKvCodecFp8, true, seqs, rng);
  }
  emulation::g_landing = emulation::Landing::kAtWait;
  CheckGqa(4, 1, 128, kKvCodecFp8Tiled, false, {{30, 66}}, rng);
  CheckGqa(4, 2, 96, kKvCodecBf16, false, {{5, 17}, {0, 3}}, rng);  // a head size the instance pads (to 128)
  // Beside decoding sequences (longer contexts than the prompts'), which are left alone: the
  // prompts' rows gathered in order at the stride of their longest context.
  CheckGqa(6, 2, 32, kKvCodecFp8, true, {{90, 1}, {0, 70}, {120, 1}, {40, 20}, {7, 1}}, rng, 16);
  CheckGqa(6, 2, 32, kKvCodecBf16, false, {{90, 1}, {0, 70}, {120, 1}, {40, 20}, {7, 1}}, rng, 21);
  CheckGqa(6, 2, 32, kKvCodecBf16, false, {{90, 1}, {40, 20}, {120, 1}, {0, 70}, {7, 19}}, rng, 20);  // on the minimum
}

// Which sequences CudaBackend::MlaExpandedAttention takes (ChooseMlaExpanded), for Kimi K2's
// heads (kv_lora 512, nope 128, rope 64, v 128): by a number of tokens, and by count.
TEST(MlaExpandedEmulated, TheChoiceOfSequences) {
  const auto choose = [](std::vector<int32_t> tokens, std::vector<int32_t> ctx, int64_t mode,
                         int64_t max_rows = int64_t{1} << 40) {
    return ChooseMlaExpanded(tokens.data(), ctx.data(), static_cast<int64_t>(tokens.size()), 512, 128, 64, 128, mode,
                             max_rows);
  };
  const auto same = [](const MlaExpandedChoice& c, int64_t threshold, int64_t taken, int64_t stride) {
    return c.threshold == threshold && c.taken == taken && c.stride == stride;
  };
  // By tokens: the sequences of at least N, at the stride of their longest context (rounded up to
  // 256); none where none qualifies or the rows exceed the most allowed.
  EXPECT_TRUE(same(choose({1, 70, 1, 20}, {900, 70, 5000, 60}, 16), 16, 2, 256));
  EXPECT_TRUE(same(choose({1, 70, 1, 20}, {900, 70, 5000, 300}, 20), 20, 2, 512));
  EXPECT_TRUE(same(choose({1, 70, 1, 20}, {900, 70, 5000, 300}, 71), 0, 0, 0));
  EXPECT_TRUE(same(choose({1, 70, 1, 20}, {900, 70, 5000, 300}, 20, 1023), 0, 0, 0));
  EXPECT_TRUE(same(choose({1, 1}, {900, 5000}, 1), 1, 2, 5120));
  EXPECT_TRUE(same(choose({5}, {5}, 0), 0, 0, 0));  // 0: never
  // By count: a 4,096-token prompt is taken, a 2-token one is not (its 256 gathered rows cost more
  // than its three pairs absorbed), decoding tokens alone never are.
  EXPECT_TRUE(same(choose({4096}, {4096}, -1), 4096, 1, 4096));
  EXPECT_TRUE(same(choose({2}, {2}, -1), 0, 0, 0));
  EXPECT_TRUE(same(choose({1, 1, 1}, {5000, 300, 20000}, -1), 0, 0, 0));
  // A 512-token chunk after 30,000 positions beside 63 decoding sequences of 8,000: the chunk
  // alone (its stride is its own context, not the decoders').
  std::vector<int32_t> tokens(64, 1), ctx(64, 8000);
  tokens[17] = 512;
  ctx[17] = 30512;
  EXPECT_TRUE(same(choose(tokens, ctx, -1), 512, 1, 30720));
  // ... unless its rows exceed the most allowed.
  EXPECT_TRUE(same(choose(tokens, ctx, -1, 30719), 0, 0, 0));
  // A short prompt beside a long one stays absorbed (taken, its rows would be expanded to the long
  // one's stride); beside one of its own length it is taken with it.
  EXPECT_TRUE(same(choose({300, 4096, 1}, {300, 4096, 9000}, -1), 4096, 1, 4096));
  EXPECT_TRUE(same(choose({400, 450, 1}, {400, 450, 9000}, -1), 400, 2, 512));
  // (AttentionOps.CudaExpandedMlaByCountTakesThePromptAlone's batch.)
  EXPECT_TRUE(same(choose({1, 300, 1}, {901, 300, 41}, -1), 300, 1, 512));
  // A threshold takes every sequence with as many tokens: two of 200, one after 40,000
  // positions, are taken together or not at all (here not: the second's stride), never one.
  EXPECT_TRUE(same(choose({200, 200}, {200, 40000}, -1), 0, 0, 0));
  // Past 256 tokens a fresh prompt's rows round up to 512: from 257 to about 280 it stays absorbed.
  EXPECT_TRUE(same(choose({256}, {256}, -1), 256, 1, 256));
  EXPECT_TRUE(same(choose({260}, {260}, -1), 0, 0, 0));
  EXPECT_TRUE(same(choose({300}, {300}, -1), 300, 1, 512));
}

// The plan: which heads take which instance, and which none.
TEST(MlaExpandedEmulated, ThePlanPicksTheInstance) {
  MlaExpandedPlan p;
  ASSERT_TRUE(xp::PlanOf(128, 64, 128, &p));  // Kimi K2
  EXPECT_EQ(p.qk, 192);
  EXPECT_EQ(p.dv, 128);
  EXPECT_TRUE(p.query_in_registers);
  EXPECT_EQ(p.rows, 64);
  EXPECT_EQ(p.shared_bytes, 2 * 64 * (200 + 136) * 2);
  ASSERT_TRUE(xp::PlanOf(192, 64, 256, &p));  // GLM-5
  EXPECT_EQ(p.qk, 256);
  EXPECT_EQ(p.dv, 256);
  EXPECT_FALSE(p.query_in_registers);
  EXPECT_EQ(p.warps, 8);
  EXPECT_EQ(p.shared_bytes, (2 * 64 * (264 + 264) + 128 * 264) * 2);
  ASSERT_TRUE(xp::PlanOf(16, 8, 16, &p));
  EXPECT_EQ(p.qk, 64);
  EXPECT_EQ(p.dv, 32);
  ASSERT_TRUE(xp::PlanOf(128, 64, 160, &p));  // v past 128: the wide instance
  EXPECT_EQ(p.qk, 256);
  EXPECT_FALSE(xp::PlanOf(192, 72, 128, &p));  // nope + rope past 256
  EXPECT_FALSE(xp::PlanOf(128, 64, 264, &p));  // v past 256
  EXPECT_FALSE(xp::PlanOf(130, 62, 128, &p));  // not multiples of 8
  EXPECT_FALSE(xp::PlanOf(128, 64, 0, &p));
}

// A context position whose page is missing is a page error, its row zeros.
TEST(MlaExpandedEmulated, AMissingPageIsReported) {
  std::vector<uint8_t> pages(2 * 2 * 4 * 64, 0);
  KvRef kv{};
  kv.pages = pages.data();
  kv.type = kElemBf16;
  kv.num_pages = 2;
  kv.num_layers = 2;
  kv.page_size = 4;
  kv.row_bytes = 64;
  kv.width = 32;
  kv.row.type = kElemBf16;
  kv.row.row_bytes = 64;
  kv.row.width = 32;
  std::vector<int32_t> token_seq = {0, 0}, token_ctx = {5, 6}, page_start = {0, 2}, page_ids = {1, 7}, first = {0};
  BatchRef batch{token_seq.data(), token_ctx.data(), page_start.data(), page_ids.data(), nullptr, 2, 6};
  batch.seq_first_token = first.data();
  std::vector<uint16_t> latent(6 * 24, 0x7fff), rope(6 * 8, 0x7fff);
  int32_t err = 0;
  emulation::RunGrid({1, 1, 1}, 256, 0,
                     [&] { xp::GatherLatentKernel(kv, 1, batch, 1, 24, 8, 6, latent.data(), rope.data(), &err); });
  EXPECT_EQ(err, kErrPage);
  for (int64_t i = 4 * 24; i < 6 * 24; ++i) EXPECT_EQ(latent[i], 0) << i;  // positions 4, 5: page 7 is outside
}

}  // namespace
}  // namespace llmrt::cuda
