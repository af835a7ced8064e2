// The CUDA backend's tensor-core attention kernel (kernels/attention_tc_kernel.cuh), run on the
// host: its blocks' threads are host threads (cuda_emulation.h) and the tensor-core
// instructions are computed from the PTX ISA's fragment tables for mma.m16n8k16 (.bf16, f32
// accumulators) and ldmatrix (.x4, .x2, .x2 .trans):
//   A (16x16): a0,a1 row g cols 2c,2c+1; a2,a3 row g+8; a4,a5 row g cols 2c+8,2c+9; a6,a7 row g+8
//   B (16x8):  b0,b1 rows 2c,2c+1 col g; b2,b3 rows 2c+8,2c+9 col g
//   C (16x8):  c0,c1 row g cols 2c,2c+1; c2,c3 row g+8
//   (g = lane / 4, c = lane % 4; register i holds elements 2i (low half) and 2i+1);
//   ldmatrix .trans: matrix j's eight rows come from the addresses of lanes 8j .. 8j+7, and lane
//   t receives (row 2(t%4), col t/4) and (row 2(t%4)+1, col t/4) of it.
// So every CI machine checks the kernel's fragment indexing, tiling, online softmax, splits,
// paging, the three codecs it reads (BF16, FP8 with a layer scale, FP8 with per-tile scales
// and a BF16 rope key), fresh rows and selections against a float64 reference, with the tolerance
// the device conformance suite states (tests/backend/attention_test.cc); what only a GPU can
// check (timing, the real instructions' rounding, shared memory limits) stays with the `gpu`
// tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/quant/kv_codec.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "tests/cuda_emulation/fragment_emulation.h"
#include "tests/cuda_emulation/paged_layer.h"

namespace llmrt::cuda::tc {

inline void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emulation::Mma16816Bf16(d, a, b0, b1); }

using emulation::CpAsync16;
using emulation::CpAsyncWaitAll;
using emulation::g_landing;
using emulation::ExpectCopiesAwaited;
using emulation::Landing;
using emulation::LdMatrix2;
using emulation::LdMatrix4;
using emulation::LdMatrixTrans2;

}  // namespace llmrt::cuda::tc

#include "kernels/attention_tc_kernel.cuh"
#include "kernels/kv_kernels.cuh"
#include "tests/cuda_emulation/wgmma_emulation.h"

#include "kernels/attention_wg_kernel.cuh"

namespace llmrt::cuda {
namespace {

template <int kDv, int kTerms, int kTiles = 1>
void RunKernel(const AttentionArgs& a, const TcPlan& pl, int32_t* err) {
  ASSERT_EQ(pl.tiles, kTiles);
  ASSERT_EQ(pl.head_blocks * kTiles, pl.head_tiles);
  emulation::RunGrid({static_cast<unsigned>(GridTokens(a) * pl.head_blocks), static_cast<unsigned>(a.splits), 1},
                     tc::kThreads * kTiles, static_cast<size_t>(pl.bytes), [&] {
                       if (pl.qreg) {
                         tc::TcAttentionKernel<kDv, kTerms, true, kTiles>(a, pl, err);
                       } else {
                         tc::TcAttentionKernel<kDv, kTerms, false, kTiles>(a, pl, err);
                       }
                       tc::ExpectCopiesAwaited();  // a block ends with every copy it issued awaited
                     });
}

void Run(const AttentionArgs& a, const TcPlan& pl, int32_t* err) {
  const int key = pl.dv_tile * 4 + pl.terms;
  switch (key) {
    case 32 * 4 + 1: return RunKernel<32, 1>(a, pl, err);
    case 32 * 4 + 2: return RunKernel<32, 2>(a, pl, err);
    case 64 * 4 + 1: return RunKernel<64, 1>(a, pl, err);
    case 64 * 4 + 2: return RunKernel<64, 2>(a, pl, err);
    case 128 * 4 + 1: return RunKernel<128, 1>(a, pl, err);
    case 128 * 4 + 2: return RunKernel<128, 2>(a, pl, err);
    case 256 * 4 + 1: return RunKernel<256, 1>(a, pl, err);
    case 256 * 4 + 2: return RunKernel<256, 2>(a, pl, err);
    case 512 * 4 + 1: return pl.tiles == 2 ? RunKernel<512, 1, 2>(a, pl, err) : RunKernel<512, 1>(a, pl, err);
    case 512 * 4 + 2: return pl.tiles == 2 ? RunKernel<512, 2, 2>(a, pl, err) : RunKernel<512, 2>(a, pl, err);
    default: FAIL() << "no emulated instance for dv_tile " << pl.dv_tile << " terms " << pl.terms;
  }
}

// The warpgroup-MMA kernel (AttentionKernel::kWgmma).
void RunWgmma(const AttentionArgs& a, const WgPlan& pl, int32_t* err) {
  emulation::g_protocol_failures = 0;
  emulation::RunGrid({static_cast<unsigned>(GridTokens(a) * pl.head_blocks), static_cast<unsigned>(a.splits), 1},
                     wg::kThreads, static_cast<size_t>(pl.bytes), [&] {
                       wg::StartWgBlock();
                       ASSERT_TRUE(pl.kblocks == 8 || pl.kblocks == 9);
                       if (pl.kblocks == 9) {
                         pl.codes ? wg::WgAttentionKernel<9, true>(a, pl, err) : wg::WgAttentionKernel<9, false>(a, pl, err);
                       } else {
                         pl.codes ? wg::WgAttentionKernel<8, true>(a, pl, err) : wg::WgAttentionKernel<8, false>(a, pl, err);
                       }
                       tc::ExpectCopiesAwaited();
                       emulation::ExpectWgmmaAwaited();
                     });
  EXPECT_EQ(emulation::g_protocol_failures, 0) << "warpgroup MMA protocol violations";
}

// The combine of splits (kvk::AttentionCombineKernel), one block per (token, head).
void Combine(const AttentionArgs& a) {
  emulation::RunGrid({static_cast<unsigned>(GridTokens(a) * a.heads), 1, 1}, kvk::kAttnThreads, 0,
                     [&] { kvk::AttentionCombineKernel(a); });
}

// The scalar float32 kernel (kvk::ScalarAttentionKernel): one block per (token, head).
void RunScalar(const AttentionArgs& a, int32_t* err) {
  const size_t smem = static_cast<size_t>(a.q1_len + a.q2_len + a.dv + kvk::kChunk) * sizeof(float);
  emulation::RunGrid({static_cast<unsigned>(GridTokens(a) * a.heads), static_cast<unsigned>(a.splits), 1},
                     kvk::kAttnThreads, smem, [&] { kvk::ScalarAttentionKernel(a, err); });
}

struct Case {
  bool mla;
  int64_t heads;
  int64_t kv_heads, head_dim;  // GQA
  int64_t kv_lora, rope;       // MLA: latent and rope key of each row (an indexer key after them)
  uint32_t codec;              // kKvCodecBf16, kKvCodecFp8 (scale per layer) or kKvCodecFp8Tiled
  bool fresh, sparse;
  int64_t page_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (cached history, new tokens)
  int64_t splits;
  AttentionKernel kernel;
  int32_t stages = 0;  // AttentionArgs::stages (0: the plan's choice)
  bool query_in_registers = true;  // AttentionArgs::query_in_registers
  int32_t tiles = 0;  // AttentionArgs::tiles_per_block (0: the plan's choice)
  bool empty_first = false;  // sparse: token 0 selects no position (its output is zeros)
  int64_t skip = 0;  // AttentionArgs::skip_seq_tokens: sequences of at least this many tokens left alone
  bool listed = false;  // with skip: the grid over the other sequences' tokens alone (ListAttentionTokens)
  std::string Describe() const {
    std::string s = mla ? "MLA kv_lora " + std::to_string(kv_lora) + " rope " + std::to_string(rope)
                        : "GQA kv_heads " + std::to_string(kv_heads) + " head_dim " + std::to_string(head_dim);
    s += " heads " + std::to_string(heads) + " " + FindKvCodec(codec)->name() + (fresh ? " fresh" : "") +
         (sparse ? " sparse" : "") + " splits " + std::to_string(splits) +
         (kernel == AttentionKernel::kTensorCoreBf16 ? " one bf16 part"
          : kernel == AttentionKernel::kTensorCore   ? " two bf16 parts"
          : kernel == AttentionKernel::kWgmma        ? " warpgroup MMAs"
                                                     : " scalar kernel");
    if (stages != 0) s += " stages " + std::to_string(stages);
    if (!query_in_registers) s += " query in shared memory";
    if (tiles != 0) s += " tiles a block " + std::to_string(tiles);
    if (skip != 0) s += " skipping sequences of " + std::to_string(skip) + " tokens" + (listed ? ", listed" : "");
    s += tc::g_landing == tc::Landing::kAtWait ? " (copies land at the wait)" : " (copies land at once)";
    return s;
  }
};

// A paged layer of random rows encoded by the codec's scalar reference (under `fresh` the pass's
// own positions read from BF16 fresh rows), queries, the kernel's output, and the float64
// reference over the values each position reads as (the codec's DecodeRow).
void Check(const Case& cs, std::mt19937& rng) {
  SCOPED_TRACE(cs.Describe());
  std::normal_distribution<float> normal;
  const int64_t H = cs.heads, ps = cs.page_size;
  const KvCodec& codec = *FindKvCodec(cs.codec);
  KvShape shape;
  shape.num_layers = PagedLayer::kLayers;
  if (cs.mla) {  // the rows of MlaKvShape: latent in tiles of 128 (or less), BF16 rope, indexer key
    // (16 values where the latent and rope are whole 16-byte pieces, as the released models'
    // rows are: the kernel's asynchronous loads; 10 otherwise: the warps' own loads)
    const int64_t index = cs.kv_lora % 16 == 0 && cs.rope % 16 == 0 ? 16 : 10;
    shape.parts = {{cs.kv_lora, std::min<int64_t>(cs.kv_lora, 128), false}, {cs.rope, 128, true}, {index, index / 2, false}};
  } else {  // GQA: keys then values, a scale per head
    shape.parts = {{cs.kv_heads * cs.head_dim, cs.head_dim, false}, {cs.kv_heads * cs.head_dim, cs.head_dim, false}};
  }
  PagedLayer pl;
  pl.Build(codec, shape, ps, cs.seqs, cs.fresh, /*spare_pages=*/3, rng);
  const int64_t T = pl.T, layer = PagedLayer::kLayer;
  const std::vector<int32_t>& token_seq = pl.token_seq;
  const std::vector<int32_t>& token_ctx = pl.token_ctx;
  const std::vector<std::vector<std::vector<float>>>& read = pl.read;
  const int64_t q1_len = cs.mla ? cs.kv_lora : cs.head_dim, nope = 5, qw = cs.mla ? nope + cs.rope : 0;
  const int64_t dv = q1_len, top_k = 6;
  std::vector<float> q1(static_cast<size_t>(T * H * q1_len)), q2(static_cast<size_t>(std::max<int64_t>(T * H * qw, 1)));
  for (float& x : q1) x = normal(rng);
  for (float& x : q2) x = normal(rng);
  const float scale = cs.mla ? 0.07f : 1.0f / std::sqrt(static_cast<float>(cs.head_dim));
  std::vector<int32_t> selected;
  std::vector<std::vector<int64_t>> attended(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t>& pos = attended[t];
    pos.resize(static_cast<size_t>(token_ctx[t]));
    std::iota(pos.begin(), pos.end(), 0);
    if (!cs.sparse) continue;
    std::shuffle(pos.begin(), pos.end(), rng);
    // Even tokens: at most top_k - 1 positions, then -1; odd ones: up to all top_k (no -1 where
    // the context has that many).
    pos.resize(std::min<size_t>(static_cast<size_t>(t % 2 == 0 ? top_k - 1 : top_k), pos.size()));
    if (t == 0 && cs.empty_first) pos.clear();
    std::sort(pos.begin(), pos.end());
    for (int64_t i = 0; i < top_k; ++i) {
      selected.push_back(i < static_cast<int64_t>(pos.size()) ? static_cast<int32_t>(pos[i]) : -1);
    }
  }

  AttentionArgs a{};
  a.kv = pl.kv;
  a.layer = layer;
  a.batch = pl.batch;
  a.heads = H;
  a.q1 = q1.data();
  a.q1_ld = H * q1_len;
  a.q1_head = q1_len;
  a.q1_len = q1_len;
  if (cs.mla) {  // as CudaBackend::MlaAttention
    a.kv_group = 1;
    a.q2 = q2.data() + nope;
    a.q2_ld = H * qw;
    a.q2_head = qw;
    a.q2_len = cs.rope;
    a.k2_off = cs.kv_lora;
  } else {  // as CudaBackend::GqaAttention
    a.kv_group = H / cs.kv_heads;
    a.k_head_step = cs.head_dim;
    a.v_off = cs.kv_heads * cs.head_dim;
    a.v_head_step = cs.head_dim;
  }
  a.dv = dv;
  a.scale = scale;
  if (cs.sparse) {
    a.selected = selected.data();
    a.top_k = top_k;
  }
  std::vector<float> out(static_cast<size_t>(T * H * dv), -7.0f);
  // (Unwritten partial results would read as a split with a positive sum.)
  std::vector<float> partial(static_cast<size_t>(T * H * cs.splits * (dv + 2)), 9.0f);
  a.out = out.data();
  a.out_ld = H * dv;
  a.splits = cs.splits;
  a.partial = partial.data();
  a.kernel = cs.kernel;
  a.skip_seq_tokens = cs.skip;
  a.num_seqs = static_cast<int64_t>(cs.seqs.size());
  if (cs.listed) {
    std::vector<int32_t> seq_tokens;
    for (const auto& sq : cs.seqs) seq_tokens.push_back(static_cast<int32_t>(sq.second));
    ListAttentionTokens(seq_tokens.data(), a.num_seqs, cs.skip, &a);
    EXPECT_GT(a.listed_runs, 0);
    EXPECT_TRUE(ListedRunsValid(a));
    // As the backend sizes it: partial rows for the listed tokens alone.
    partial.assign(static_cast<size_t>(GridTokens(a) * H * cs.splits * (dv + 2)), 9.0f);
    a.partial = partial.data();
  }
  int32_t err = 0;
  if (cs.kernel == AttentionKernel::kScalar) {
    RunScalar(a, &err);
  } else if (cs.kernel == AttentionKernel::kWgmma) {  // on Hopper (the plan's test covers the rest)
    a.compute_capability = 90;
    a.max_shared_bytes = 227 * 1024;
    WgPlan plan;
    ASSERT_TRUE(PlanWgmmaAttention(a, &plan));
    RunWgmma(a, plan, &err);
  } else {
    a.stages = cs.stages;
    a.query_in_registers = cs.query_in_registers;
    a.tiles_per_block = cs.tiles;
    TcPlan plan;
    ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
    EXPECT_EQ(plan.qreg, cs.query_in_registers ? 1 : 0);
    if (cs.stages != 0 && plan.async) EXPECT_EQ(plan.stages, cs.stages);
    if (cs.tiles != 0) EXPECT_EQ(plan.tiles, cs.tiles);
    Run(a, plan, &err);
  }
  if (cs.splits > 1) Combine(a);
  EXPECT_EQ(err, 0);
  if (cs.tiles == 2) {  // the same bits as blocks of one tile: each tile's operations are the same
    std::vector<float> out1(out.size(), -7.0f), partial1(partial.size(), -9.0f);
    AttentionArgs one = a;
    one.out = out1.data();
    one.partial = partial1.data();
    one.tiles_per_block = 1;
    TcPlan plan1;
    ASSERT_TRUE(PlanTensorCoreAttention(one, &plan1));
    EXPECT_EQ(plan1.tiles, 1);
    int32_t err1 = 0;
    Run(one, plan1, &err1);
    if (cs.splits > 1) Combine(one);
    EXPECT_EQ(err1, 0);
    EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.size() * sizeof(float)), 0) << "two tiles a block differ from one";
  }

  // Reference: AttentionTolerance's bound plus the bfloat16 parts' 2^-16 (2^-8 for one part).
  // One part: the query rounded to bfloat16 as the kernel rounds it (so the scores' bound is
  // float32's alone, tight enough to see a softmax that mixes two maxima), the probabilities'
  // rounding in the 2 eps term.
  const bool one_part = cs.kernel == AttentionKernel::kTensorCoreBf16 || cs.kernel == AttentionKernel::kWgmma;
  const double u = 0x1p-24, eps = one_part                                    ? 0x1p-8
                                   : cs.kernel == AttentionKernel::kTensorCore ? 0x1p-16
                                                                               : 0.0;
  const double query_eps = one_part ? 0.0 : eps;
  const auto query = [&](float x) { return one_part ? static_cast<double>(Bf16ToF32(F32ToBf16(x))) : x; };
  int bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = token_seq[t];
    if (cs.skip > 0 && cs.seqs[s].second >= cs.skip) {  // left to another kernel: not written
      for (int64_t j = 0; j < H * dv; ++j) {
        if (out[t * H * dv + j] != -7.0f && bad++ < 3) ADD_FAILURE() << "skipped token " << t << " written at " << j;
      }
      continue;
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = cs.mla ? 0 : h / (H / cs.kv_heads);
      std::vector<double> scores, mags;
      std::vector<const float*> values;
      for (int64_t p : attended[t]) {
        const float* row = read[s][p].data();
        double d = 0, m = 0;
        for (int64_t i = 0; i < q1_len; ++i) {
          const double x = query(q1[(t * H + h) * q1_len + i]) * row[(cs.mla ? 0 : g * cs.head_dim) + i];
          d += x;
          m += std::fabs(x);
        }
        for (int64_t i = 0; cs.mla && i < cs.rope; ++i) {
          const double x = query(q2[(t * H + h) * qw + nope + i]) * row[cs.kv_lora + i];
          d += x;
          m += std::fabs(x);
        }
        scores.push_back(d * scale);
        mags.push_back(m * scale);
        values.push_back(row + (cs.mla ? 0 : (cs.kv_heads + g) * cs.head_dim));
      }
      const size_t n = scores.size();
      if (n == 0) {  // no position: zeros, as the CPU
        for (int64_t j = 0; j < dv; ++j) {
          const double got = out[(t * H + h) * dv + j];
          if (got != 0.0 && bad++ < 3) ADD_FAILURE() << "token " << t << " head " << h << " column " << j << ": " << got;
        }
        continue;
      }
      const double mx = *std::max_element(scores.begin(), scores.end());
      double sum = 0, max_err = 0;
      std::vector<double> prob(n);
      for (size_t i = 0; i < n; ++i) {
        prob[i] = std::exp(scores[i] - mx);
        sum += prob[i];
        max_err = std::max(max_err, ((q1_len + a.q2_len + 4) * u + query_eps) * mags[i]);
      }
      for (int64_t j = 0; j < dv; ++j) {
        double want = 0, wabs = 0;
        for (size_t i = 0; i < n; ++i) {
          want += prob[i] / sum * values[i][j];
          wabs += prob[i] / sum * std::fabs(values[i][j]);
        }
        const double tol = 2 * wabs * (2 * max_err + (2.0 * static_cast<double>(n) + 16) * u) + 2 * eps * wabs + 1e-30;
        const double got = out[(t * H + h) * dv + j];
        if (!(std::fabs(got - want) <= tol) && bad++ < 3) {
          ADD_FAILURE() << "token " << t << " head " << h << " column " << j << ": " << got << ", want " << want
                        << " within " << tol;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

using Seqs = std::vector<std::pair<int64_t, int64_t>>;
// A prefill from scratch, a decode with history, a chunk crossing pages, a short decode.
const Seqs kMixed = {{0, 4}, {9, 1}, {3, 6}, {5, 1}};
// Contexts of several chunks of 32 positions.
const Seqs kLonger = {{70, 1}, {45, 2}};
constexpr AttentionKernel kTwo = AttentionKernel::kTensorCore, kOne = AttentionKernel::kTensorCoreBf16,
                          kWg = AttentionKernel::kWgmma;

constexpr uint32_t kCodecs[] = {kKvCodecBf16, kKvCodecFp8, kKvCodecFp8Tiled};

TEST(TensorCoreAttentionEmulated, MlaRows) {
  std::mt19937 rng(71);
  for (uint32_t codec : kCodecs) {
    for (bool fresh : {false, true}) {
      if (fresh && codec == kKvCodecBf16) continue;
      Check({true, 2, 0, 0, 32, 7, codec, fresh, false, 4, kMixed, 1, kTwo}, rng);    // odd rope: padding
      Check({true, 3, 0, 0, 48, 7, codec, fresh, true, 3, kMixed, 1, kTwo}, rng);     // selected positions
      Check({true, 20, 0, 0, 64, 16, codec, fresh, false, 4, kLonger, 1, kTwo}, rng);  // two head tiles
      Check({true, 2, 0, 0, 64, 16, codec, fresh, false, 5, kLonger, 3, kTwo}, rng);   // splits
    }
  }
}

// Odd widths: unaligned flat rows (a latent of 33); the tiled codec's tiles of 33 do not fit 16
// columns, so the plan leaves such rows to the scalar kernel.
TEST(TensorCoreAttentionEmulated, OddWidths) {
  std::mt19937 rng(75);
  for (uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
    Check({true, 3, 0, 0, 33, 7, codec, codec != kKvCodecBf16, true, 3, kMixed, 1, kTwo}, rng);
    Check({false, 3, 1, 7, 0, 0, codec, false, false, 3, kMixed, 1, kTwo}, rng);
  }
}

TEST(TensorCoreAttentionEmulated, GqaRows) {
  std::mt19937 rng(72);
  for (uint32_t codec : kCodecs) {
    for (bool fresh : {false, true}) {
      if (fresh && codec == kKvCodecBf16) continue;
      Check({false, 4, 2, 16, 0, 0, codec, fresh, false, 4, kMixed, 1, kTwo}, rng);
      Check({false, 40, 2, 32, 0, 0, codec, fresh, false, 4, kLonger, 2, kTwo}, rng);  // groups of 20 heads
    }
  }
}

TEST(TensorCoreAttentionEmulated, OneBf16Part) {
  std::mt19937 rng(73);
  Check({true, 3, 0, 0, 48, 7, kKvCodecFp8, true, true, 3, kMixed, 1, kOne}, rng);
  Check({true, 3, 0, 0, 64, 16, kKvCodecFp8Tiled, false, false, 3, kLonger, 2, kOne}, rng);
  Check({false, 4, 2, 16, 0, 0, kKvCodecBf16, false, false, 4, kMixed, 1, kOne}, rng);
  // Heads of 128 (GLM-4.5's, which LLMRT_CUDA_ATTENTION=tc-bf16 and the warpgroup kernel's
  // fallback run on this instance) and of 256 (values wider than 128: the widest instance).
  Check({false, 4, 2, 128, 0, 0, kKvCodecBf16, false, false, 16, kLonger, 2, kOne}, rng);
  Check({false, 4, 2, 128, 0, 0, kKvCodecFp8Tiled, true, false, 16, kMixed, 1, kOne}, rng);
  Check({false, 4, 2, 256, 0, 0, kKvCodecBf16, false, false, 16, kLonger, 2, kOne}, rng);
}

// Heads of 256 with the query in two bfloat16 parts (the default): the widest instance.
TEST(TensorCoreAttentionEmulated, HeadsOf256) {
  std::mt19937 rng(78);
  Check({false, 4, 2, 256, 0, 0, kKvCodecBf16, false, false, 16, kLonger, 2, kTwo}, rng);
  Check({false, 4, 1, 256, 0, 0, kKvCodecFp8, true, false, 16, kMixed, 1, kTwo}, rng);
}

// The scalar float32 kernel (what runs F32 rows, odd tiles, LLMRT_CUDA_ATTENTION=scalar) over
// the same rows, odd tiles of the tiled codec included, in float32's own bound.
TEST(TensorCoreAttentionEmulated, ScalarKernel) {
  std::mt19937 rng(76);
  constexpr AttentionKernel kScalar = AttentionKernel::kScalar;
  for (uint32_t codec : kCodecs) {
    Check({true, 3, 0, 0, 48, 7, codec, codec != kKvCodecBf16, true, 3, kMixed, 1, kScalar}, rng);
    Check({true, 2, 0, 0, 64, 16, codec, false, false, 5, kLonger, 3, kScalar}, rng);
    Check({false, 4, 2, 16, 0, 0, codec, codec != kKvCodecBf16, false, 4, kMixed, 1, kScalar}, rng);
  }
  Check({true, 3, 0, 0, 33, 7, kKvCodecFp8Tiled, true, false, 3, kMixed, 1, kScalar}, rng);  // tiles of 33
  // F32 rows (the kernel every F32 cache runs) at the shipped shapes: Kimi K2's latent of 512
  // and rope key of 64 (a value row four times the block's threads), dense and sparse, in one
  // split and three; GLM-4.5's heads of 128 over 2 KV heads.
  const Seqs real = {{37, 1}, {20, 3}};
  for (const int64_t splits : {1, 3}) {
    Check({true, 2, 0, 0, 512, 64, kKvCodecF32, false, false, 16, real, splits, kScalar}, rng);
    Check({true, 2, 0, 0, 512, 64, kKvCodecF32, false, true, 16, real, splits, kScalar}, rng);
    Check({false, 4, 2, 128, 0, 0, kKvCodecF32, false, false, 16, real, splits, kScalar}, rng);
  }
  Check({true, 2, 0, 0, 512, 64, kKvCodecFp8, true, false, 16, real, 2, kScalar}, rng);
}

// Tokens left to another kernel (AttentionArgs::skip_seq_tokens, GQA prefill on FlashAttention
// tiles beside decoding sequences): the tokens of sequences bringing at least `skip` tokens are
// not written, by any kernel or the combine of splits, and the others are as without it.
// Listed (AttentionArgs::listed_runs): the grid covers the other tokens alone, in runs, with the
// partial results of splits at their listed positions; the same outputs.
TEST(TensorCoreAttentionEmulated, SkipsTheTokensOfLongSequences) {
  std::mt19937 rng(77);
  const Seqs seqs = {{0, 5}, {9, 1}, {3, 6}, {40, 1}, {7, 1}};
  for (const bool listed : {false, true}) {
    for (int64_t splits : {1, 2}) {
      Case gqa{false, 4, 2, 16, 0, 0, kKvCodecFp8, true, false, 4, seqs, splits, kTwo};
      gqa.skip = 5;
      gqa.listed = listed;
      Check(gqa, rng);
      gqa.kernel = kOne;
      Check(gqa, rng);
      gqa.kernel = AttentionKernel::kScalar;
      Check(gqa, rng);
      gqa.skip = 2;  // (only the decoding tokens written)
      Check(gqa, rng);
    }
    for (int64_t splits : {1, 2}) {
      // (The last decoding token's second split has no position: its partial row is written too.)
      Case wg{true, 64, 0, 0, 512, 64, kKvCodecBf16, false, false, 16, {{30, 3}, {90, 1}, {10, 1}}, splits, kWg};
      wg.skip = 3;
      wg.listed = listed;
      Check(wg, rng);
    }
  }
}

// The runs ListAttentionTokens makes: the short sequences' rows, adjacent ones merged, the listed
// positions counted in order; none listed (every token's block) past kMaxListedRuns runs or where
// no sequence is short.
TEST(TensorCoreAttentionEmulated, ListedTokensAreRunsOfTheShortSequences) {
  AttentionArgs a{};
  a.batch.num_tokens = 15;
  const int32_t tokens[] = {1, 5, 1, 1, 6, 0, 1};  // rows 0 | 1-5 | 6 | 7 | 8-13 | (none) | 14
  ListAttentionTokens(tokens, 7, 5, &a);
  ASSERT_EQ(a.listed_runs, 3);
  EXPECT_EQ(a.listed_first[0], 0);
  EXPECT_EQ(a.listed_at[0], 0);
  EXPECT_EQ(a.listed_first[1], 6);  // rows 6 and 7 merged
  EXPECT_EQ(a.listed_at[1], 1);
  EXPECT_EQ(a.listed_first[2], 14);
  EXPECT_EQ(a.listed_at[2], 3);
  EXPECT_EQ(a.listed_at[3], 4);
  EXPECT_EQ(GridTokens(a), 4);
  EXPECT_TRUE(ListedRunsValid(a));
  // Malformed runs, which LaunchAttention refuses: past the batch, overlapping, empty, too many.
  AttentionArgs bad = a;
  bad.listed_first[2] = 15;
  EXPECT_FALSE(ListedRunsValid(bad));
  bad = a;
  bad.listed_first[1] = 0;
  EXPECT_FALSE(ListedRunsValid(bad));
  bad = a;
  bad.listed_at[2] = bad.listed_at[1];
  EXPECT_FALSE(ListedRunsValid(bad));
  bad = a;
  bad.listed_runs = AttentionArgs::kMaxListedRuns + 1;
  EXPECT_FALSE(ListedRunsValid(bad));
  AttentionArgs none{};
  none.batch.num_tokens = 11;
  const int32_t all_long[] = {5, 6};
  ListAttentionTokens(all_long, 2, 5, &none);
  EXPECT_EQ(none.listed_runs, 0);
  EXPECT_EQ(GridTokens(none), 11);
  std::vector<int32_t> many;
  for (int i = 0; i <= AttentionArgs::kMaxListedRuns; ++i) {
    many.push_back(1);
    many.push_back(8);
  }
  AttentionArgs over{};
  ListAttentionTokens(many.data(), static_cast<int64_t>(many.size()), 8, &over);
  EXPECT_EQ(over.listed_runs, 0);
  many.pop_back();
  many.pop_back();
  ListAttentionTokens(many.data(), static_cast<int64_t>(many.size()), 8, &over);
  EXPECT_EQ(over.listed_runs, AttentionArgs::kMaxListedRuns);
  EXPECT_EQ(GridTokens(over), AttentionArgs::kMaxListedRuns);
}

// Kimi K2's rows (latent 512 in FP8 tiles of 128, BF16 rope 64) and GLM-4.5's heads (128 values,
// 12 query heads per KV head): the kernel's largest instances, the query's fragments in registers
// (the plan's choice) and read from shared memory per chunk, one load stage and two.
TEST(TensorCoreAttentionEmulated, RealLayerShapes) {
  std::mt19937 rng(74);
  for (bool qreg : {true, false}) {
    const int32_t stages = qreg ? 2 : 1;
    Check({true, 18, 0, 0, 512, 64, kKvCodecFp8Tiled, true, false, 16, {{70, 1}, {33, 2}}, 2, kTwo, stages, qreg}, rng);
    Check({true, 18, 0, 0, 512, 64, kKvCodecBf16, false, false, 16, {{40, 1}}, 1, kTwo, stages, qreg}, rng);
    Check({true, 16, 0, 0, 512, 64, kKvCodecFp8, false, false, 16, {{90, 1}}, 1, kOne, stages, qreg}, rng);
    Check({false, 12, 1, 128, 0, 0, kKvCodecFp8Tiled, false, false, 16, {{40, 1}}, 1, kTwo, stages, qreg}, rng);
  }
}

// Two head tiles a block (8 warps sharing each chunk's row loads and decoding; MLA's latent of 512
// values): within the reference's bound, and the same bits as one tile a block, over every codec,
// fresh rows, one and two load stages, the query in registers and in shared memory, one and two
// bfloat16 parts, splits, and a second tile of 2 heads (18) or of 16 (32).
TEST(TensorCoreAttentionEmulated, TwoTilesABlock) {
  std::mt19937 rng(81);
  for (uint32_t codec : kCodecs) {
    const bool fresh = codec != kKvCodecBf16;
    Check({true, 18, 0, 0, 512, 64, codec, fresh, false, 16, {{70, 1}, {33, 2}}, 2, kTwo, 2, true, 2}, rng);
    Check({true, 32, 0, 0, 512, 64, codec, false, false, 16, {{40, 1}}, 1, kOne, 1, true, 2}, rng);
  }
  Check({true, 18, 0, 0, 512, 64, kKvCodecBf16, false, true, 16, {{50, 1}}, 3, kTwo, 1, false, 2}, rng);
  Check({true, 18, 0, 0, 320, 32, kKvCodecFp8, false, false, 16, {{40, 2}}, 1, kTwo, 2, true, 2}, rng);
}

// The warpgroup-MMA kernel on MLA rows of a latent of 512 (BF16): Kimi K2's 64 heads (one block
// a token), 18 (rows past the heads zero), 70 (two blocks a token), a rope key of 64 and of 32
// (the rope's block half padding), selected positions, several chunks of 64 positions, splits,
// and the copies landing as late and as early as cp.async allows.
// Both schedules of the emulated threads: in turn, and each warpgroup far ahead of the next.
TEST(TensorCoreAttentionEmulated, WarpgroupMmas) {
  std::mt19937 rng(83);
  for (emulation::Schedule schedule : {emulation::Schedule::kRoundRobin, emulation::Schedule::kGroupsInOrder}) {
    emulation::RestoreDefaultSchedule();  // round robin: the environment's schedule
    if (schedule != emulation::Schedule::kRoundRobin) {
      emulation::g_schedule = schedule;
      emulation::g_group_threads = 128;
    }
    for (tc::Landing landing : {tc::Landing::kAtWait, tc::Landing::kAtIssue}) {
      tc::g_landing = landing;
      Check({true, 64, 0, 0, 512, 64, kKvCodecBf16, false, false, 16, {{150, 1}, {33, 2}}, 1, kWg}, rng);
      Check({true, 18, 0, 0, 512, 64, kKvCodecBf16, false, true, 16, {{90, 1}}, 1, kWg}, rng);
    }
  }
  emulation::RestoreDefaultSchedule();
  tc::g_landing = tc::Landing::kAtWait;
  // A token that selects no position (zeros), in one split and in several.
  for (int64_t splits : {1, 2}) {
    Case empty{true, 64, 0, 0, 512, 64, kKvCodecBf16, false, true, 16, {{90, 1}, {40, 1}}, splits, kWg};
    empty.empty_first = true;
    Check(empty, rng);
  }
  Check({true, 64, 0, 0, 512, 64, kKvCodecBf16, false, false, 16, {{200, 1}}, 3, kWg}, rng);
  Check({true, 70, 0, 0, 512, 32, kKvCodecBf16, false, false, 8, {{40, 1}, {0, 3}}, 2, kWg}, rng);
}

// A shared memory base that is not 1024-byte aligned (the swizzle's pattern would not start where
// the descriptors say): the kernel raises kErrKernel rather than compute.
TEST(TensorCoreAttentionEmulated, WarpgroupMmasNeedAnAlignedBase) {
  AttentionArgs a{};
  a.batch.num_tokens = 1;
  a.heads = 64;
  a.splits = 1;
  WgPlan plan;
  plan.head_blocks = 1;
  plan.kblocks = 9;
  plan.bytes = 4096;
  for (const uint32_t skew : {512u, 16u}) {
    wg::g_shared_skew = skew;
    int32_t err = kErrNone;
    RunWgmma(a, plan, &err);
    EXPECT_EQ(err, kErrKernel) << "skew " << skew;
  }
  wg::g_shared_skew = 0;
}

// Flat FP8 rows on the warpgroup kernel: codes staged, decoded into the one K tile, the layer's
// scale on the scores and probabilities; the phase policy's BF16 fresh rows (scale 1) read from
// global memory beside them; both schedules and both copy landings.
TEST(TensorCoreAttentionEmulated, WarpgroupMmasOnFp8Rows) {
  std::mt19937 rng(84);
  for (emulation::Schedule schedule : {emulation::Schedule::kRoundRobin, emulation::Schedule::kGroupsInOrder}) {
    emulation::RestoreDefaultSchedule();  // round robin: the environment's schedule
    if (schedule != emulation::Schedule::kRoundRobin) {
      emulation::g_schedule = schedule;
      emulation::g_group_threads = 128;
    }
    for (tc::Landing landing : {tc::Landing::kAtWait, tc::Landing::kAtIssue}) {
      tc::g_landing = landing;
      for (bool fresh : {false, true}) {
        Check({true, 64, 0, 0, 512, 64, kKvCodecFp8, fresh, false, 16, {{150, 1}, {33, 2}}, 1, kWg}, rng);
      }
    }
  }
  emulation::RestoreDefaultSchedule();
  tc::g_landing = tc::Landing::kAtWait;
  Check({true, 18, 0, 0, 512, 64, kKvCodecFp8, true, true, 16, {{90, 1}, {0, 5}}, 2, kWg}, rng);
  Check({true, 70, 0, 0, 512, 32, kKvCodecFp8, false, false, 8, {{200, 1}}, 3, kWg}, rng);
}

// A plan's arguments for Kimi K2's rows (64 heads, latent 512, rope 64) in BF16, no data.
AttentionArgs KimiRows() {
  AttentionArgs a{};
  a.heads = 64;
  a.kv_group = 1;
  a.q1_len = 512;
  a.q2 = reinterpret_cast<const float*>(16);  // present
  a.q2_len = 64;
  a.k2_off = 512;
  a.dv = 512;
  a.kv.width = 576;  // latent, rope
  a.kv.type = a.kv.row.type = kElemBf16;
  a.kv.row_bytes = a.kv.width * 2;
  return a;
}

// What the warpgroup kernel takes: MLA's latent of 512 (the keys' first columns and the values)
// with a rope key of up to 64 columns in whole pieces, BF16 or flat FP8 rows, on compute capability
// 9.0 with the shared memory it needs (Hopper's 227 KiB a block); else the tensor-core plan runs
// the call, with the same one bfloat16 part.
TEST(TensorCoreAttentionEmulated, ThePlanTakesWarpgroupsForMlaOnHopper) {
  AttentionArgs a = KimiRows();
  a.kernel = AttentionKernel::kWgmma;
  a.compute_capability = 90;
  a.max_shared_bytes = 227 * 1024;
  WgPlan plan;
  ASSERT_TRUE(PlanWgmmaAttention(a, &plan));
  EXPECT_EQ(plan.head_blocks, 1);
  EXPECT_EQ(plan.kblocks, 9);
  EXPECT_EQ(plan.bytes, 227 * 1024 - 512);  // all but the rows' scales of codes
  EXPECT_EQ(plan.off_k, 9 * 8192);
  EXPECT_EQ(plan.off_p, 27 * 8192);
  EXPECT_EQ(plan.codes, 0);
  a.kv.type = a.kv.row.type = kElemFp8E4M3;  // flat FP8: one K tile, the codes staged twice
  a.kv.row_bytes = a.kv.width;
  ASSERT_TRUE(PlanWgmmaAttention(a, &plan));
  EXPECT_EQ(plan.codes, 1);
  EXPECT_EQ(plan.ss, 576);
  EXPECT_EQ(plan.off_p, 18 * 8192);
  EXPECT_EQ(plan.bytes, 227 * 1024);
  a.k2_off = 520;  // the rope's codes not in whole 16-byte pieces: refused for codes, not for BF16
  EXPECT_FALSE(PlanWgmmaAttention(a, &plan));
  a.kv.type = a.kv.row.type = kElemBf16;
  a.kv.row_bytes = a.kv.width * 2;
  a.kv.width = 592;
  a.kv.row_bytes = 1184;
  EXPECT_TRUE(PlanWgmmaAttention(a, &plan));
  a = KimiRows();
  a.kernel = AttentionKernel::kWgmma;
  a.compute_capability = 90;
  a.max_shared_bytes = 227 * 1024;
  a.heads = 130;
  ASSERT_TRUE(PlanWgmmaAttention(a, &plan));
  EXPECT_EQ(plan.head_blocks, 3);
  a.heads = 64;
  a.q2_len = 32;  // a shorter rope key: its block half padding
  ASSERT_TRUE(PlanWgmmaAttention(a, &plan));
  EXPECT_EQ(plan.kblocks, 9);
  a.q2 = nullptr;  // no rope key
  ASSERT_TRUE(PlanWgmmaAttention(a, &plan));
  EXPECT_EQ(plan.kblocks, 8);
  // Refused: the tensor-core plan runs it with one part (F32 rows: the scalar kernel).
  const auto refused = [&](const char* why, const std::function<void(AttentionArgs&)>& change, bool tc_runs = true) {
    AttentionArgs b = KimiRows();
    b.kernel = AttentionKernel::kWgmma;
    b.compute_capability = 90;
    b.max_shared_bytes = 227 * 1024;
    change(b);
    WgPlan p;
    EXPECT_FALSE(PlanWgmmaAttention(b, &p)) << why;
    TcPlan tc;
    EXPECT_EQ(PlanTensorCoreAttention(b, &tc), tc_runs) << why;
    if (tc_runs) {
      EXPECT_EQ(tc.terms, 1) << why;
    }
  };
  refused("not chosen", [](AttentionArgs& b) { b.kernel = AttentionKernel::kTensorCoreBf16; });
  refused("an Ada device", [](AttentionArgs& b) { b.compute_capability = 89; });
  refused("a Blackwell device", [](AttentionArgs& b) { b.compute_capability = 100; });
  refused("the device unknown", [](AttentionArgs& b) { b.compute_capability = 0; });
  refused("a byte short of the shared memory", [](AttentionArgs& b) { b.max_shared_bytes = 227 * 1024 - 513; });
  refused("an odd output row stride", [](AttentionArgs& b) { b.out_ld = 64 * 512 + 1; });
  refused("an output not 8-byte aligned", [](AttentionArgs& b) { b.out = reinterpret_cast<float*>(uintptr_t{4}); });
  refused("tiled FP8 rows", [](AttentionArgs& b) {
    b.kv.type = b.kv.row.type = kElemFp8E4M3;
    b.kv.row.nseg = 2;
    b.kv.row.seg[0] = {0, 512, 128, 0, 0, 0};
    b.kv.row.seg[1] = {512, 64, 64, 512, 0, 1};
    b.kv.row_bytes = 512 + 128 + 16;
  });
  refused(
      "F32 rows",
      [](AttentionArgs& b) {
        b.kv.type = b.kv.row.type = kElemF32;
        b.kv.row_bytes = b.kv.width * 4;
      },
      false);
  refused("a latent of 256", [](AttentionArgs& b) { b.q1_len = b.dv = 256; });
  refused("a rope key of 80", [](AttentionArgs& b) { b.q2_len = 80; });
  refused("a rope key of 20", [](AttentionArgs& b) { b.q2_len = 20; });
  refused("a rope key at an odd column", [](AttentionArgs& b) { b.k2_off = 515; });
  refused("GQA heads", [](AttentionArgs& b) {
    b.kv_group = 8;
    b.k_head_step = 576;
    b.v_head_step = 576;
    b.kv.width = 8 * 576;
    b.kv.row_bytes = b.kv.width * 2;
  });
  refused("values apart from the keys", [](AttentionArgs& b) {
    b.v_off = 576;
    b.kv.width = 576 + 512;
    b.kv.row_bytes = b.kv.width * 2;
  });
}

// The plan's choice of tiles a block: two for MLA's latent of 512 where the pair keeps as many
// warps on a multiprocessor (Kimi K2's rows, BF16 and FP8, on a 228 KiB multiprocessor), one where
// the multiprocessor is unknown, where asked, for GQA heads of 128 values, and for a tile count
// that does not pair (16 heads: one tile).
TEST(TensorCoreAttentionEmulated, ThePlanPairsTilesWhereItKeepsTheWarps) {
  AttentionArgs a = KimiRows();
  TcPlan plan;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.tiles, 1);  // the multiprocessor's size unknown
  EXPECT_EQ(plan.head_blocks, 4);
  a.sm_shared_bytes = 228 * 1024;
  a.reserved_shared_bytes = 1024;
  a.max_shared_bytes = 227 * 1024;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.tiles, 2);
  EXPECT_EQ(plan.head_blocks, 2);
  EXPECT_EQ(plan.stages, 2);
  EXPECT_EQ(plan.blocks_per_sm, 1) << plan.bytes << " bytes";
  a.kv.type = a.kv.row.type = kElemFp8E4M3;  // flat FP8
  a.kv.row_bytes = a.kv.width;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.tiles, 2);
  EXPECT_EQ(plan.stages, 2);
  EXPECT_EQ(plan.blocks_per_sm, 1) << plan.bytes << " bytes";
  a.tiles_per_block = 1;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.tiles, 1);
  EXPECT_EQ(plan.blocks_per_sm, 2);
  a.tiles_per_block = 0;
  a.heads = 16;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.tiles, 1);
}

// The query's fragments read from shared memory per chunk (AttentionArgs::query_in_registers
// false; what keys wider than the registers hold take) over the other tests' shapes.
TEST(TensorCoreAttentionEmulated, QueryFromSharedMemory) {
  std::mt19937 rng(78);
  for (uint32_t codec : kCodecs) {
    for (bool fresh : {false, true}) {
      if (fresh && codec == kKvCodecBf16) continue;
      Check({true, 3, 0, 0, 48, 7, codec, fresh, true, 3, kMixed, 1, kTwo, 0, false}, rng);
      Check({true, 20, 0, 0, 64, 16, codec, fresh, false, 4, kLonger, 1, kTwo, 2, false}, rng);
      Check({false, 40, 2, 32, 0, 0, codec, fresh, false, 4, kLonger, 2, kOne, 1, false}, rng);
    }
  }
}

// The pipelined loads (two stages: the next chunk's rows copied while this one is computed, in
// alternating tiles or staging areas) against one stage, with the copies landing as late and as
// early as cp.async allows; fresh rows of an FP8 cache (read by the decode pass with two stages);
// query rows of 64 and 576 columns (swizzled in shared memory) and of 80 and 16 (padded).
TEST(TensorCoreAttentionEmulated, PipelinedLoads) {
  std::mt19937 rng(77);
  const Seqs longest = {{150, 1}, {97, 3}};  // five and four chunks
  for (tc::Landing landing : {tc::Landing::kAtWait, tc::Landing::kAtIssue}) {
    tc::g_landing = landing;
    for (int32_t stages : {1, 2}) {
      for (uint32_t codec : kCodecs) {
        for (bool fresh : {false, true}) {
          if (fresh && codec == kKvCodecBf16) continue;
          Check({true, 3, 0, 0, 48, 16, codec, fresh, false, 8, longest, 1, kTwo, stages}, rng);
          Check({true, 2, 0, 0, 64, 16, codec, fresh, true, 4, kLonger, 1, kTwo, stages}, rng);
          Check({true, 2, 0, 0, 64, 16, codec, fresh, false, 5, longest, 3, kOne, stages}, rng);
          Check({false, 4, 2, 64, 0, 0, codec, fresh, false, 16, longest, 2, kTwo, stages}, rng);
          Check({false, 4, 2, 16, 0, 0, codec, fresh, false, 4, kMixed, 1, kTwo, stages}, rng);
        }
      }
    }
  }
  tc::g_landing = tc::Landing::kAtWait;
}

// The plan's choice of stages: two where they keep as many blocks on a multiprocessor (Kimi K2's
// rows on a Hopper multiprocessor: two blocks either way, BF16 and flat FP8), one where the second
// buffer would cost a block, or the multiprocessor's size is not known; and the query's swizzle.
TEST(TensorCoreAttentionEmulated, ThePlanPipelinesWhereItKeepsTheBlocks) {
  AttentionArgs a = KimiRows();
  a.tiles_per_block = 1;  // blocks of one tile (the test above pairs them)
  TcPlan plan;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.stages, 1);  // the multiprocessor's size unknown
  EXPECT_EQ(plan.qx, 7);
  EXPECT_EQ(plan.qstride, 576);
  a.sm_shared_bytes = 228 * 1024;  // Hopper
  a.reserved_shared_bytes = 1024;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_TRUE(plan.async);
  EXPECT_EQ(plan.stages, 2);
  EXPECT_EQ(plan.tile_stages, 2);
  EXPECT_EQ(plan.blocks_per_sm, 2) << plan.bytes << " bytes";
  a.kv.type = a.kv.row.type = kElemFp8E4M3;  // flat FP8: codes staged twice, one K tile
  a.kv.row_bytes = a.kv.width;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.stages, 2);
  EXPECT_EQ(plan.tile_stages, 1);
  EXPECT_EQ(plan.blocks_per_sm, 2) << plan.bytes << " bytes";
  a.sm_shared_bytes = 200 * 1024;  // a smaller multiprocessor: the second stage would cost a block
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.stages, 1);
  EXPECT_EQ(plan.blocks_per_sm, 2);
  a.stages = 2;  // asked for
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.stages, 2);
  EXPECT_EQ(plan.blocks_per_sm, 1);
  a.stages = 1;
  a.sm_shared_bytes = 228 * 1024;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.stages, 1);
  // GLM-4.5's heads of 128: swizzled; heads of 80: padded.
  a = AttentionArgs{};
  a.heads = 12;
  a.kv_group = 12;
  a.q1_len = 128;
  a.k_head_step = 128;
  a.v_off = 128;
  a.v_head_step = 128;
  a.dv = 128;
  a.kv.width = 256;
  a.kv.type = a.kv.row.type = kElemBf16;
  a.kv.row_bytes = 512;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.qx, 7);
  a.q1_len = a.dv = a.k_head_step = a.v_head_step = 80;
  a.v_off = 80;
  a.kv.width = 160;
  a.kv.row_bytes = 320;
  ASSERT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.qx, 0);
  EXPECT_EQ(plan.qstride, plan.ks);
}

// What the plan leaves to the scalar kernel: F32 rows, tiles that do not fit whole MMA steps,
// more shared memory than the device allows a block, values wider than 512, and the scalar
// kernel's own choice; and when it gives up the asynchronous loads.
TEST(TensorCoreAttentionEmulated, ThePlanRefusesWhatTheKernelDoesNotTake) {
  AttentionArgs a{};
  a.kv.row.type = kElemBf16;
  a.heads = 4;
  a.kv_group = 1;
  a.q1_len = 64;
  a.dv = 64;
  TcPlan plan;
  EXPECT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_EQ(plan.head_tiles, 1);
  a.kernel = AttentionKernel::kScalar;
  EXPECT_FALSE(PlanTensorCoreAttention(a, &plan));
  a.kernel = AttentionKernel::kTensorCore;
  a.kv.row.type = kElemF32;
  EXPECT_FALSE(PlanTensorCoreAttention(a, &plan));
  a.kv.row.type = kElemFp8E4M3;
  a.kv.row.nseg = 1;
  a.kv.width = 64;
  a.kv.row_bytes = 80;  // 64 codes, scales, padding
  a.kv.row.seg[0] = {0, 64, 24, 0, 0, 0};  // tiles of 24 values: a step of 16 straddles two
  EXPECT_FALSE(PlanTensorCoreAttention(a, &plan));
  a.kv.row.seg[0].tile = 32;
  EXPECT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_TRUE(plan.tiled);
  EXPECT_TRUE(plan.async);
  // A device short of shared memory for the asynchronous loads' addresses and staging area: the
  // warps load the rows themselves; one short even of that: the scalar kernel.
  a.max_shared_bytes = plan.bytes - 1;
  EXPECT_TRUE(PlanTensorCoreAttention(a, &plan));
  EXPECT_FALSE(plan.async);
  a.max_shared_bytes = plan.bytes - 1;
  EXPECT_FALSE(PlanTensorCoreAttention(a, &plan));
  a.max_shared_bytes = 0;
  a.dv = 1024;
  a.q1_len = 1024;
  a.kv.row.seg[0].count = 1024;
  EXPECT_FALSE(PlanTensorCoreAttention(a, &plan));
}

}  // namespace
}  // namespace llmrt::cuda
