// The CUDA backend's GEMV (kernels/quant_matmul_kernels.cuh: INT4 group-scaled and FP8
// block-scaled weights, and dense BF16 / F32 rows, plain and grouped by expert) run on the host
// (cuda_emulation.h).
// References in float64 over the weights' exact values; tolerance the float32 dot-product bound
// (K + 8) u sum |w x| that the device conformance suite uses for these kernels: every lane sums
// its columns in float32, scales once per group, and the warp adds the lanes, so a wrong column,
// nibble, scale or row moves an output by whole units.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "tests/cuda_emulation/fragment_emulation.h"
#include "kernels/quant_matmul_kernels.cuh"

namespace llmrt::cuda::gmm {
inline void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emulation::Mma16816Bf16(d, a, b0, b1); }
using emulation::CpAsync16;
using emulation::CpAsyncCommit;
using emulation::CpAsyncWaitGroup;
using emulation::LdMatrix4;
}  // namespace llmrt::cuda::gmm

#include "kernels/moe_mma_kernels.cuh"

namespace llmrt::cuda::qmma {
inline void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emulation::Mma16816Bf16(d, a, b0, b1); }
}  // namespace llmrt::cuda::qmma

#include "kernels/quant_mma_kernels.cuh"
#include "tests/cuda_emulation/wgmma_emulation.h"
#include "kernels/moe_wg_kernels.cuh"

namespace llmrt::cuda {
namespace {

constexpr double kU = 0x1p-24;

// A quantized weight [N, K] and the float values it stands for.
// Bytes of NaN codes (bfloat16 0xffff, e4m3 0xff) after an FP8 or dense weight's last row: a
// kernel that reads past K in the last row brings a NaN into its sums.
constexpr size_t kNanTail = 64;

struct HostWeight {
  std::vector<uint8_t> codes;  // (then kNanTail bytes of 0xff for FP8 and dense weights)
  std::vector<uint16_t> bf16_scales;  // INT4: [N][K / group]
  std::vector<float> f32_scales;      // FP8: [ceil(N / br)][ceil(K / bc)]
  std::vector<double> values;         // [N][K]
  WeightRef ref{};
};

HostWeight Int4Weight(int64_t N, int64_t K, int64_t group, std::mt19937& rng) {
  HostWeight w;
  w.codes.resize(static_cast<size_t>(N * K / 2));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> s(0.01f, 0.2f);
  for (int64_t i = 0; i < N * (K / group); ++i) w.bf16_scales.push_back(F32ToBf16(s(rng)));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t b = w.codes[n * (K / 2) + k / 2];
      const int q = ((k & 1) != 0 ? b >> 4 : b & 0xf) - 8;  // column 2j: the low nibble of byte j
      w.values.push_back(q * static_cast<double>(Bf16ToF32(w.bf16_scales[n * (K / group) + k / group])));
    }
  }
  w.ref = WeightRef{w.codes.data(), kElemInt4, N, K, w.bf16_scales.data(), group, 0, 0};
  return w;
}

HostWeight Fp8Weight(int64_t N, int64_t K, int64_t br, int64_t bc, std::mt19937& rng) {
  HostWeight w;
  w.codes.resize(static_cast<size_t>(N * K));
  for (uint8_t& c : w.codes) {
    do {
      c = static_cast<uint8_t>(rng());
    } while ((c & 0x7f) == 0x7f);  // no NaN codes
  }
  const int64_t nbr = (N + br - 1) / br, nbc = (K + bc - 1) / bc;
  std::uniform_real_distribution<float> s(0.001f, 0.01f);
  for (int64_t i = 0; i < nbr * nbc; ++i) w.f32_scales.push_back(s(rng));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      w.values.push_back(static_cast<double>(EmulatedE4M3(w.codes[n * K + k])) *
                         w.f32_scales[(n / br) * nbc + k / bc]);
    }
  }
  w.codes.resize(w.codes.size() + kNanTail, 0xff);
  w.ref = WeightRef{w.codes.data(), kElemFp8E4M3, N, K, w.f32_scales.data(), 0, br, bc};
  return w;
}

// Dense rows (the GEMV's kBits 16: BF16, 32: F32) with random values.
HostWeight DenseWeight(int64_t N, int64_t K, int bits, std::mt19937& rng) {
  HostWeight w;
  std::normal_distribution<float> normal;
  w.codes.resize(static_cast<size_t>(N * K * bits / 8));
  for (int64_t i = 0; i < N * K; ++i) {
    const float v = normal(rng);
    if (bits == 16) {
      const uint16_t b = F32ToBf16(v);
      std::memcpy(w.codes.data() + 2 * i, &b, 2);
      w.values.push_back(Bf16ToF32(b));
    } else {
      std::memcpy(w.codes.data() + 4 * i, &v, 4);
      w.values.push_back(v);
    }
  }
  w.codes.resize(w.codes.size() + kNanTail, 0xff);
  w.ref = WeightRef{w.codes.data(), bits == 16 ? kElemBf16 : kElemF32, N, K, nullptr, 0, 0, 0};
  return w;
}

int BitsOf(const WeightRef& w) {
  return w.type == kElemInt4 ? 4 : w.type == kElemFp8E4M3 ? 8 : w.type == kElemBf16 ? 16 : 32;
}

// Checks out row r (rows [0, M)) against x row xr(r) times weight wt(r), optional activation
// scales act(r, b) per column block of bc.
// widen: a relative error per product on top of the float32 bound (the INT4 MMA kernels' two
// bfloat16 parts of each activation: 2^-16).
template <typename XRow, typename WeightOf, typename ActScale>
void Expect(const std::vector<float>& out, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx,
            const XRow& xr, const WeightOf& wt, const ActScale& act, int64_t bc, double widen = 0) {
  int bad = 0;
  for (int64_t r = 0; r < M; ++r) {
    const HostWeight& w = wt(r);
    for (int64_t n = 0; n < N; ++n) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = w.values[n * K + k] * x[xr(r) * ldx + k] * act(r, k / bc);
        want += p;
        mag += std::fabs(p);
      }
      const double got = out[r * N + n], tol = ((K + 8) * kU + widen) * mag + 1e-30;
      if (!(std::fabs(got - want) <= tol) && bad++ < 3) {
        ADD_FAILURE() << "row " << r << " column " << n << ": " << got << ", want " << want << " within " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

void RunGemv(int bits, const ConstMat& x, const WeightRef& w, const MutMat& out, ActScales act = {}) {
  const int per_block = qmm::OutPerBlock(bits);
  const emulation::Index3 grid{static_cast<unsigned>((w.rows + per_block - 1) / per_block),
                               static_cast<unsigned>((x.rows + qmm::kMaxRows - 1) / qmm::kMaxRows), 1};
  // As LaunchQuantGemv: the one-row instance for a single row with aligned rows.
  const bool one_row = x.rows == 1 && qmm::OneRowApplies(x);
  emulation::RunGrid(grid, qmm::kThreads, one_row ? 0 : qmm::SharedBytes(bits, x.rows), [&] {
    if (one_row) {
      switch (bits) {
        case 4: qmm::QuantGemvKernel<4, 1>(x, w, out, act); break;
        case 8: qmm::QuantGemvKernel<8, 1>(x, w, out, act); break;
        case 16: qmm::QuantGemvKernel<16, 1>(x, w, out, act); break;
        default: qmm::QuantGemvKernel<32, 1>(x, w, out, act); break;
      }
      return;
    }
    switch (bits) {
      case 4: qmm::QuantGemvKernel<4>(x, w, out, act); break;
      case 8: qmm::QuantGemvKernel<8>(x, w, out, act); break;
      case 16: qmm::QuantGemvKernel<16>(x, w, out, act); break;
      default: qmm::QuantGemvKernel<32>(x, w, out, act); break;
    }
  });
}

TEST(QuantGemvEmulated, Int4AndFp8RowsTimesActivations) {
  std::mt19937 rng(91);
  std::normal_distribution<float> normal;
  const int64_t N = 19;  // a partial block of output columns
  // K of one chunk of k per lane step, and of several with a partial last one (INT4: 1024
  // columns per chunk, FP8: 512), whose codes the kernel loads a chunk ahead; 2304 for groups of
  // 96.
  for (const int64_t K : {256, 1280, 2304}) {
    std::vector<HostWeight> weights;
    weights.push_back(Int4Weight(N, K, 32, rng));
    weights.push_back(Int4Weight(N, K, 128, rng));
    weights.push_back(Fp8Weight(N, K, 128, 128, rng));
    weights.push_back(Fp8Weight(N, K, 5, 32, rng));  // blocks of 5 rows, 32 columns
    // Scale columns that do not divide a k-step's columns (INT4 1024, FP8 512): the kernel's
    // scale cursor carries a remainder from step to step.
    weights.push_back(Fp8Weight(N, K, 128, 48, rng));
    if (K % 96 == 0) weights.push_back(Int4Weight(N, K, 96, rng));
    weights.push_back(DenseWeight(N, K, 16, rng));
    weights.push_back(DenseWeight(N, K, 32, rng));
    for (const HostWeight& w : weights) {
      for (int64_t T : {1, 3, 11}) {  // 11: two blocks of rows
        for (const bool aligned : {false, true}) {
          SCOPED_TRACE(::testing::Message() << BitsOf(w.ref) << "-bit rows, group or block rows "
                                            << (w.ref.type == kElemInt4 ? w.ref.group : w.ref.block_rows) << " K "
                                            << K << " T " << T << (aligned ? " aligned" : " column view"));
          // x 16-byte aligned rows of K floats (at T = 1 the one-row instance), or a column
          // view: rows of K + 3 floats, starting at column 1 (unaligned loads; the staging
          // instance at every T).
          const int64_t ldx = aligned ? K : K + 3;
          std::vector<float> xbuf(static_cast<size_t>(T * ldx + 4));
          for (float& v : xbuf) v = normal(rng);
          float* x0 = xbuf.data() + 1;
          while (aligned && reinterpret_cast<uintptr_t>(x0) % 16 != 0) ++x0;
          ASSERT_EQ(qmm::OneRowApplies(ConstMat{x0, T, K, ldx}), aligned);
          std::vector<float> out(static_cast<size_t>(T * N), NAN);
          RunGemv(BitsOf(w.ref), ConstMat{x0, T, K, ldx}, w.ref, MutMat{out.data(), T, N, N});
          Expect(
              out, T, N, K, x0, ldx, [](int64_t r) { return r; }, [&](int64_t) -> const HostWeight& { return w; },
              [](int64_t, int64_t) { return 1.0; }, 1);
        }
      }
    }
  }
}

// The FP8 activation policy: x holds e4m3 values and each row has a scale per column block.
TEST(QuantGemvEmulated, Fp8WithActivationScales) {
  std::mt19937 rng(92);
  const int64_t N = 16, K = 256, T = 5, bc = 128;
  const HostWeight w = Fp8Weight(N, K, 128, bc, rng);
  std::vector<float> x(static_cast<size_t>(T * K));
  for (float& v : x) v = EmulatedE4M3(rng() & 0x7e);  // positive codes, no NaN
  const int64_t lda = 8;  // >= T
  std::vector<float> sa(static_cast<size_t>((K / bc) * lda));
  std::uniform_real_distribution<float> s(0.5f, 2.0f);
  for (float& v : sa) v = s(rng);
  std::vector<float> out(static_cast<size_t>(T * N), NAN);
  RunGemv(8, ConstMat{x.data(), T, K, K}, w.ref, MutMat{out.data(), T, N, N}, ActScales{sa.data(), lda});
  Expect(
      out, T, N, K, x.data(), K, [](int64_t r) { return r; }, [&](int64_t) -> const HostWeight& { return w; },
      [&](int64_t r, int64_t b) { return static_cast<double>(sa[b * lda + r]); }, bc);
}

// Grouped by expert: tiles of rows permuted by expert, each row's activation row from x_rows.
TEST(QuantGemvEmulated, GroupedByExpert) {
  std::mt19937 rng(93);
  std::normal_distribution<float> normal;
  const int64_t N = 24, K = 128, M = 12;
  for (int bits : {4, 8, 16}) {
    SCOPED_TRACE(::testing::Message() << bits << "-bit experts");
    std::vector<HostWeight> experts;
    for (int e = 0; e < 3; ++e) {
      experts.push_back(bits == 4   ? Int4Weight(N, K, 32, rng)
                        : bits == 8 ? Fp8Weight(N, K, 128, 128, rng)
                                    : DenseWeight(N, K, bits, rng));
    }
    std::vector<WeightRef> refs;
    for (const HostWeight& w : experts) refs.push_back(w.ref);
    // Rows 0-4 expert 2, rows 5-11 expert 0 (two tiles of it); expert 1 has none. A fifth tile
    // past count[0] must not run.
    const std::vector<int32_t> tile_expert = {2, 0, 0, 1}, row0 = {0, 5, 9, 0}, row1 = {5, 9, 12, 12}, count = {3};
    std::vector<int32_t> x_rows(static_cast<size_t>(M));
    for (int64_t r = 0; r < M; ++r) x_rows[r] = static_cast<int32_t>((r * 5) % M);
    std::vector<float> x(static_cast<size_t>(M * K));
    for (float& v : x) v = normal(rng);
    std::vector<float> out(static_cast<size_t>(M * N), NAN);
    const ExpertTable table{refs.data(), bits};
    const TileTable tiles{tile_expert.data(), row0.data(), row1.data(), count.data(), 4};
    const int per_block = qmm::OutPerBlock(bits);
    const emulation::Index3 grid{static_cast<unsigned>((N + per_block - 1) / per_block), 4, 1};
    // The instance of runs of kMaxRows rows, and the one-row instance (batch 1 takes it; it
    // walks any tile row by row).
    for (const int run : {qmm::kMaxRows, 1}) {
      SCOPED_TRACE(::testing::Message() << "runs of " << run << " rows");
      std::fill(out.begin(), out.end(), NAN);
      emulation::RunGrid(grid, qmm::kThreads, run == 1 ? 0 : qmm::SharedBytes(bits, M), [&] {
        const ConstMat xm{x.data(), M, K, K};
        const MutMat om{out.data(), M, N, N};
        const int32_t* xr = x_rows.data();
        if (run == 1) {
          switch (bits) {
            case 4: qmm::GroupedQuantGemvKernel<4, 1>(xm, xr, table, N, K, tiles, om, ActScales{}); break;
            case 8: qmm::GroupedQuantGemvKernel<8, 1>(xm, xr, table, N, K, tiles, om, ActScales{}); break;
            default: qmm::GroupedQuantGemvKernel<16, 1>(xm, xr, table, N, K, tiles, om, ActScales{}); break;
          }
          return;
        }
        switch (bits) {
          case 4: qmm::GroupedQuantGemvKernel<4>(xm, xr, table, N, K, tiles, om, ActScales{}); break;
          case 8: qmm::GroupedQuantGemvKernel<8>(xm, xr, table, N, K, tiles, om, ActScales{}); break;
          default: qmm::GroupedQuantGemvKernel<16>(xm, xr, table, N, K, tiles, om, ActScales{}); break;
        }
      });
      Expect(
          out, M, N, K, x.data(), K, [&](int64_t r) { return static_cast<int64_t>(x_rows[r]); },
          [&](int64_t r) -> const HostWeight& { return experts[r < 5 ? 2 : 0]; }, [](int64_t, int64_t) { return 1.0; },
          1);
    }
    // An x of 3 rows (tokens) under the same tiles of 5, 4 and 3 rows: tokens listing an expert
    // more than once (the backend's contract allows it). The launcher gives the several-row
    // instance room for x's rows alone, so the kernel takes a tile in runs of that many.
    {
      const int64_t T = 3;
      std::vector<int32_t> dup_rows(static_cast<size_t>(M));
      for (int64_t r = 0; r < M; ++r) dup_rows[r] = static_cast<int32_t>(r % T);
      std::fill(out.begin(), out.end(), NAN);
      emulation::RunGrid(grid, qmm::kThreads, qmm::SharedBytes(bits, T), [&] {
        const ConstMat xm{x.data(), T, K, K};
        const MutMat om{out.data(), M, N, N};
        switch (bits) {
          case 4: qmm::GroupedQuantGemvKernel<4>(xm, dup_rows.data(), table, N, K, tiles, om, ActScales{}); break;
          case 8: qmm::GroupedQuantGemvKernel<8>(xm, dup_rows.data(), table, N, K, tiles, om, ActScales{}); break;
          default: qmm::GroupedQuantGemvKernel<16>(xm, dup_rows.data(), table, N, K, tiles, om, ActScales{}); break;
        }
      });
      SCOPED_TRACE("tokens listing an expert twice");
      Expect(
          out, M, N, K, x.data(), K, [&](int64_t r) { return static_cast<int64_t>(dup_rows[r]); },
          [&](int64_t r) -> const HostWeight& { return experts[r < 5 ? 2 : 0]; }, [](int64_t, int64_t) { return 1.0; },
          1);
    }
  }
}

// The grouped GEMM on the tensor cores (kernels/moe_mma_kernels.cuh): BF16 experts times
// bfloat16 activation codes, each instance (tiles of up to 32, 64 and 128 rows), a whole block
// of 128 columns and a partial one of 8, a partial step of 32 along k, rows of K codes and of more,
// gathered through x_rows (gate / up) or taken in place (down). The products are exact, so the same float32 bound as the GEMV's
// holds; and every instance gives every row the same bits (the same MMAs in the same order).
// The MMA tests' routing: runs of rows of one expert (expert 2: 5 rows, 0: 150, 1: 70, 0 again: 1),
// cut into tiles of at most tile_rows rows as the permutation cuts them (a partial tile, whole
// ones, a tile of one row), and one more tile past count[0] (expert 1 over the first rows) that
// must not run. Output row r reads activation row 7r mod M.
struct MmaRouting {
  std::vector<int32_t> tile_expert, row0, row1, count, x_rows, expert;
  int64_t M = 0, tile_rows;
  explicit MmaRouting(int64_t rows_a_tile) : tile_rows(rows_a_tile) {
    for (const auto& [e, n] : {std::pair<int32_t, int32_t>{2, 5}, {0, 150}, {1, 70}, {0, 1}}) {
      for (int32_t r = 0; r < n; r += static_cast<int32_t>(tile_rows)) {
        tile_expert.push_back(e);
        row0.push_back(static_cast<int32_t>(M) + r);
        row1.push_back(static_cast<int32_t>(M) + std::min(r + static_cast<int32_t>(tile_rows), n));
      }
      for (int32_t r = 0; r < n; ++r) expert.push_back(e);
      M += n;
    }
    count.push_back(static_cast<int32_t>(tile_expert.size()));
    tile_expert.push_back(1);
    row0.push_back(0);
    row1.push_back(static_cast<int32_t>(std::min<int64_t>(tile_rows, M)));
    for (int64_t r = 0; r < M; ++r) x_rows.push_back(static_cast<int32_t>((r * 7) % M));
  }
  TileTable Tiles() const {
    return {tile_expert.data(), row0.data(), row1.data(), count.data(), static_cast<int64_t>(tile_expert.size()),
            0, tile_rows};
  }
  emulation::Index3 Grid(int64_t N) const {
    return {static_cast<unsigned>((N + gmm::kCols - 1) / gmm::kCols), static_cast<unsigned>(tile_expert.size()), 1};
  }
};

std::vector<WeightRef> RefsOf(const std::vector<HostWeight>& experts) {
  std::vector<WeightRef> refs;
  for (const HostWeight& w : experts) refs.push_back(w.ref);
  return refs;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The instance LaunchGroupedGemmMma picks for the table's tile_rows.
// x: float32 values exact in bfloat16, passed as their codes (what LaunchRoundToBf16 makes); the
// columns past x.cols are NaN codes, which a load past K would bring into the sums.
std::vector<uint16_t> CodesOf(const ConstMat& x) {
  std::vector<uint16_t> codes;
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.ld; ++c) codes.push_back(c < x.cols ? F32ToBf16(x.data[r * x.ld + c]) : uint16_t{0x7fc0});
  }
  return codes;
}

template <bool kFp8>
void RunGroupedMma(const MmaRouting& routing, const ConstMat& x, const int32_t* x_rows, const ExpertTable& table,
                   int64_t N, int64_t K, const MutMat& out, ActScales act) {
  const std::vector<uint16_t> codes = CodesOf(x);
  const uint16_t* xc = codes.data();
  const int64_t ld = x.ld;
  const TileTable tiles = routing.Tiles();
  const int64_t bytes = gmm::SharedBytes(kFp8, routing.tile_rows);
  ASSERT_GT(bytes, 0);
  emulation::RunGrid(routing.Grid(N), gmm::kThreads, static_cast<size_t>(bytes), [&] {
    switch (routing.tile_rows) {
      case 32: gmm::GroupedMmaKernel<kFp8, 32>(xc, ld, x_rows, table, N, K, tiles, out, act); break;
      case 64: gmm::GroupedMmaKernel<kFp8, 64>(xc, ld, x_rows, table, N, K, tiles, out, act); break;
      default:
        if constexpr (!kFp8) gmm::GroupedMmaKernel<kFp8, 128>(xc, ld, x_rows, table, N, K, tiles, out, act);
        break;
    }
    emulation::ExpectCopiesAwaited();
  });
}

// Three BF16 experts [N, K] (random values) and their weight references.
struct Bf16Experts {
  std::vector<HostWeight> experts;
  std::vector<WeightRef> refs;
  Bf16Experts(int64_t N, int64_t K, std::mt19937& rng) {
    for (int e = 0; e < 3; ++e) experts.push_back(DenseWeight(N, K, 16, rng));
    refs = RefsOf(experts);
  }
};

// The grouped kernels' arithmetic in the emulation: each output one fma chain over k in order
// (an MMA's 16 slots are 16 consecutive columns, the steps go in order; the zeros past K add
// nothing). x: rows of ld values, gathered through routing.x_rows or in place.
void ExpectFmaChains(const std::vector<float>& out, const MmaRouting& routing, const std::vector<float>& x, int64_t ld,
                     bool gather, const std::vector<HostWeight>& experts, int64_t N, int64_t K) {
  for (int64_t r = 0; r < routing.M; ++r) {
    const float* xr = x.data() + (gather ? static_cast<int64_t>(routing.x_rows[r]) : r) * ld;
    const HostWeight& w = experts[routing.expert[r]];
    for (int64_t n = 0; n < N; ++n) {
      float want = 0.0f;
      for (int64_t k = 0; k < K; ++k) want = std::fma(xr[k], static_cast<float>(w.values[n * K + k]), want);
      ASSERT_EQ(FloatBits(out[r * N + n]), FloatBits(want)) << "row " << r << " column " << n;
    }
  }
}

// The instance LaunchGroupedGemmWgmma picks for the table's tile_rows and the experts' format (x
// as RunGroupedMma's).
template <bool kFp8>
void RunGroupedWg(const MmaRouting& routing, const ConstMat& x, const int32_t* x_rows, const ExpertTable& table,
                  int64_t N, int64_t K, const MutMat& out, ActScales act = {}, int32_t* err = nullptr) {
  const std::vector<uint16_t> codes = CodesOf(x);
  int32_t none = 0;  // (no error word given: none may be raised)
  const bool expect_none = err == nullptr;
  if (expect_none) err = &none;
  const TileTable tiles = routing.Tiles();
  const int64_t bytes = wg::moe::WgSharedBytes(routing.tile_rows, kFp8), cols = wg::moe::WgBlockCols(routing.tile_rows);
  ASSERT_GT(bytes, 0);
  const emulation::Index3 grid{static_cast<unsigned>((N + cols - 1) / cols), static_cast<unsigned>(tiles.max_tiles), 1};
  emulation::RunGrid(grid, wg::moe::kThreads, static_cast<size_t>(bytes), [&] {
    wg::StartWgBlock();
    if (routing.tile_rows == 128) {
      wg::moe::GroupedWgKernel<128, kFp8>(codes.data(), x.ld, x_rows, table, N, K, tiles, out, act, err);
    } else {
      wg::moe::GroupedWgKernel<64, kFp8>(codes.data(), x.ld, x_rows, table, N, K, tiles, out, act, err);
    }
    emulation::ExpectCopiesAwaited();
    emulation::ExpectWgmmaAwaited();
  });
  if (expect_none) EXPECT_EQ(none, 0) << "a block raised an error";
}

// The orders the pipeline's copies may land in and its warps may run in: copies landing as late
// as the waits allow (a tile read before its copies were awaited and published reads stale
// bytes), copies landing at once (a copy into a stage that a warp still reads overwrites it), and
// each warp running alone up to its next barrier (a missing barrier between warps shows).
struct CopyOrder {
  emulation::Landing landing;
  emulation::Schedule schedule;
  const char* name;
};
constexpr CopyOrder kCopyOrders[] = {
    {emulation::Landing::kAtWait, emulation::Schedule::kRoundRobin, "copies land at the wait"},
    {emulation::Landing::kAtIssue, emulation::Schedule::kRoundRobin, "copies land at once"},
    {emulation::Landing::kAtWait, emulation::Schedule::kGroupsInOrder, "warps run alone to each barrier"},
};
// (all: every order; else the first alone.)
template <typename Fn>
void InEachCopyOrder(bool all, Fn fn) {
  for (const CopyOrder& o : kCopyOrders) {
    if (!all && &o != kCopyOrders) break;
    SCOPED_TRACE(o.name);
    emulation::g_landing = o.landing;
    emulation::RestoreDefaultSchedule();  // round robin: the environment's schedule
    if (o.schedule != emulation::Schedule::kRoundRobin) {
      emulation::g_schedule = o.schedule;
      emulation::g_group_threads = 32;
    }
    fn();
  }
  emulation::g_landing = emulation::Landing::kAtWait;
  emulation::RestoreDefaultSchedule();
}

TEST(GroupedMmaEmulated, TilesTimesTheirExpertsOnTheTensorCores) {
  std::mt19937 rng(95);
  std::normal_distribution<float> normal;
  const int64_t N = 136, M = MmaRouting(32).M;
  // K of 3 steps (fewer than the pipeline's stages, the last partial): rows of K codes and of more
  // (ld K + 16), gathered and in place. K of 10 steps (the stages reused, the last partial):
  // gathered rows of K + 16, in every order of copies and warps.
  for (const int64_t K : {int64_t{88}, int64_t{296}}) {
    const Bf16Experts bank(N, K, rng);
    const std::vector<HostWeight>& experts = bank.experts;
    const ExpertTable table{bank.refs.data(), 16};
    const bool orders = K > 88;
    for (const int64_t ld : {K, K + 16}) {
      if (orders && ld == K) continue;
      std::vector<float> x(static_cast<size_t>(M * ld));
      for (float& v : x) v = Bf16ToF32(F32ToBf16(normal(rng)));  // the policy's rounded inputs
      for (const bool gather : {true, false}) {
        if (orders && !gather) continue;
        std::vector<float> first;
        for (const int64_t tile_rows : {32, 64, 128}) {
          SCOPED_TRACE(::testing::Message() << (gather ? "rows gathered through x_rows" : "rows in place") << ", K "
                                            << K << ", ld " << ld << ", tiles of " << tile_rows);
          const MmaRouting routing(tile_rows);
          const std::vector<int32_t>& x_rows = routing.x_rows;
          InEachCopyOrder(orders, [&] {
            std::vector<float> out(static_cast<size_t>(M * N), NAN);
            RunGroupedMma<false>(routing, ConstMat{x.data(), M, K, ld}, gather ? x_rows.data() : nullptr, table, N,
                                 K, MutMat{out.data(), M, N, N}, ActScales{});
            Expect(
                out, M, N, K, x.data(), ld, [&](int64_t r) { return gather ? static_cast<int64_t>(x_rows[r]) : r; },
                [&](int64_t r) -> const HostWeight& { return experts[routing.expert[r]]; },
                [](int64_t, int64_t) { return 1.0; }, 1);
            ExpectFmaChains(out, routing, x, ld, gather, experts, N, K);
            if (first.empty()) {
              first = out;
            } else {
              EXPECT_TRUE(SameBits(out, first)) << "the tile's size or the copies' order changed a row's bits";
            }
          });
        }
      }
    }
  }
}

// The warpgroup-MMA form over the same routings: tiles of up to 32 and 64 rows (the 64-row
// instance, 256 columns a block) and of 128 (128 columns), N = 136 (a partial column block),
// K of 2 steps of 64 (the second partial, fewer than the stages) and of 9 (the stages reused,
// the last partial), rows gathered and in place, in every order of copies and warpgroups. Every
// output is held to the fma chain the emulation's MMAs compute (and so to the mma.sync kernel's
// emulated bits), which checks the descriptors, the swizzle, the accumulator fragments and the
// pipeline; the emulation also checks the MMAs' protocol (fences, commits, operands and
// accumulators left alone while in flight, a stage rewritten only after its MMAs completed). On
// the device the sums' order within an MMA is the hardware's: the gpu tests hold that.
TEST(GroupedWgmmaEmulated, TilesTimesTheirExpertsOnWarpgroupMmas) {
  std::mt19937 rng(96);
  std::normal_distribution<float> normal;
  const int64_t N = 136, M = MmaRouting(32).M;
  for (const int64_t K : {int64_t{88}, int64_t{552}}) {
    const Bf16Experts bank(N, K, rng);
    const std::vector<HostWeight>& experts = bank.experts;
    const ExpertTable table{bank.refs.data(), 16};
    const bool orders = K > 88;
    const int64_t ld = K + 16;
    std::vector<float> x(static_cast<size_t>(M * ld));
    for (float& v : x) v = Bf16ToF32(F32ToBf16(normal(rng)));
    for (const bool gather : {true, false}) {
      for (const int64_t tile_rows : {32, 64, 128}) {
        SCOPED_TRACE(::testing::Message() << (gather ? "rows gathered through x_rows" : "rows in place") << ", K " << K
                                          << ", tiles of " << tile_rows);
        const MmaRouting routing(tile_rows);
        InEachCopyOrder(orders && gather, [&] {
          std::vector<float> out(static_cast<size_t>(M * N), NAN);
          RunGroupedWg<false>(routing, ConstMat{x.data(), M, K, ld}, gather ? routing.x_rows.data() : nullptr, table,
                              N, K, MutMat{out.data(), M, N, N});
          ExpectFmaChains(out, routing, x, ld, gather, experts, N, K);
        });
        EXPECT_EQ(emulation::g_protocol_failures, 0);
        emulation::g_protocol_failures = 0;
      }
    }
  }
}

// A block whose shared memory does not start a swizzle pattern (1024-byte aligned) would read
// its operands from the wrong places: it raises kErrKernel and writes NaN to its outputs instead.
TEST(GroupedWgmmaEmulated, MisalignedSharedMemoryRaisesAKernelError) {
  std::mt19937 rng(97);
  const int64_t N = 64, K = 64;
  std::vector<HostWeight> experts;
  for (int e = 0; e < 3; ++e) experts.push_back(DenseWeight(N, K, 16, rng));
  const std::vector<WeightRef> refs = RefsOf(experts);
  const MmaRouting routing(64);
  std::vector<float> x(static_cast<size_t>(routing.M * K), 0.5f);
  std::vector<float> out(static_cast<size_t>(routing.M * N), 0.0f);
  int32_t err = 0;
  wg::g_shared_skew = 512;
  RunGroupedWg<false>(routing, ConstMat{x.data(), routing.M, K, K}, nullptr, ExpertTable{refs.data(), 16}, N, K,
                      MutMat{out.data(), routing.M, N, N}, ActScales{}, &err);
  wg::g_shared_skew = 0;
  EXPECT_EQ(err, kErrKernel);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
}

// The tile size the backend asks for: by the rows an expert gets on average (Kimi K2's decode of
// 64 sessions: 1.3 rows; its 4,096-token prefill over 384 experts: 85.3), forced sizes, FP8's
// limit.
TEST(GroupedMmaEmulated, TileRowsFollowTheRowsAnExpertGets) {
  EXPECT_EQ(GroupedMmaTileRows(64 * 8, 384, 0, false), 32);
  EXPECT_EQ(GroupedMmaTileRows(1, 384, 0, false), 32);
  EXPECT_EQ(GroupedMmaTileRows(256, 8, 0, false), 32);     // 32 rows each
  EXPECT_EQ(GroupedMmaTileRows(257, 8, 0, false), 64);     // 33 for some
  EXPECT_EQ(GroupedMmaTileRows(512, 8, 0, false), 64);     // 64 each
  EXPECT_EQ(GroupedMmaTileRows(4096 * 8, 384, 0, false), 128);
  EXPECT_EQ(GroupedMmaTileRows(4096 * 8, 384, 0, true), 64);
  EXPECT_EQ(GroupedMmaTileRows(300, 1000, 0, false), 32);  // fewer pairs than experts: 1 row each
  for (const int64_t forced : {32, 64, 128}) {
    EXPECT_EQ(GroupedMmaTileRows(8, 8, forced, false), forced);
    EXPECT_EQ(GroupedMmaTileRows(8, 8, forced, true), std::min<int64_t>(forced, 64));
  }
}

// Three FP8 experts [N, K] in blocks of br x bc, M rows of e4m3 activations (either sign, no
// NaN) and their scales per column block (sa[b * lda + row], lda = M + 3).
struct Fp8MoeData {
  std::vector<HostWeight> experts;
  std::vector<WeightRef> refs;
  std::vector<float> x, sa;
  int64_t lda;
  Fp8MoeData(int64_t N, int64_t M, int64_t K, int64_t br, int64_t bc, std::mt19937& rng) : lda(M + 3) {
    for (int e = 0; e < 3; ++e) experts.push_back(Fp8Weight(N, K, br, bc, rng));
    refs = RefsOf(experts);
    x.resize(static_cast<size_t>(M * K));
    for (float& v : x) v = EmulatedE4M3(rng() & 0xfe);
    sa.resize(static_cast<size_t>((K + bc - 1) / bc * lda));
    std::uniform_real_distribution<float> s(0.5f, 2.0f);
    for (float& v : sa) v = s(rng);
  }
  // out [M, N] within the float32 bound of the scaled products, the rows gathered through
  // routing.x_rows (blocks of bc columns).
  void ExpectWithinBound(const std::vector<float>& out, const MmaRouting& routing, int64_t M, int64_t N, int64_t K,
                         int64_t bc) const {
    const std::vector<int32_t>& x_rows = routing.x_rows;
    Expect(
        out, M, N, K, x.data(), K, [&](int64_t r) { return static_cast<int64_t>(x_rows[r]); },
        [&](int64_t r) -> const HostWeight& { return experts[routing.expert[r]]; },
        [&](int64_t r, int64_t b) { return static_cast<double>(sa[b * lda + x_rows[r]]); }, bc);
  }
};

// The FP8 policy's form: FP8 experts in 128 x 128 and 5 x 32 blocks, e4m3 activations with a scale
// per row and column block (indexed by the activation row), several column blocks and a partial
// last one along k; each block's sum folded with its scales, as the GEMV does. Tiles of 32 and
// 64 rows (the most FP8 experts take), the same bits.
TEST(GroupedMmaEmulated, Fp8ExpertsWithActivationScales) {
  std::mt19937 rng(96);
  const int64_t N = 136, M = MmaRouting(32).M;
  for (const int64_t bc : {int64_t{128}, int64_t{32}}) {
    const int64_t K = bc == 128 ? 304 : 112, br = bc == 128 ? 128 : 5;
    const Fp8MoeData d(N, M, K, br, bc, rng);
    const std::vector<float>& x = d.x;
    const std::vector<float>& sa = d.sa;
    const int64_t lda = d.lda;
    const ExpertTable table{d.refs.data(), 8};
    std::vector<float> first;
    for (const int64_t tile_rows : {32, 64}) {
      SCOPED_TRACE(::testing::Message() << "blocks of " << br << " x " << bc << ", K " << K << ", tiles of "
                                        << tile_rows);
      const MmaRouting routing(tile_rows);
      const std::vector<int32_t>& x_rows = routing.x_rows;
      InEachCopyOrder(true, [&] {
        std::vector<float> out(static_cast<size_t>(M * N), NAN);
        RunGroupedMma<true>(routing, ConstMat{x.data(), M, K, K}, x_rows.data(), table, N, K,
                            MutMat{out.data(), M, N, N}, ActScales{sa.data(), lda});
        d.ExpectWithinBound(out, routing, M, N, K, bc);
        if (first.empty()) {
          first = out;
        } else {
          EXPECT_TRUE(SameBits(out, first)) << "the tile's size or the copies' order changed a row's bits";
        }
      });
    }
  }
}

// FP8 experts under the FP8 policy on the warpgroup MMAs: blocks of 128 x 128 (K = 560: a last
// partial block and step) and of 5 x 64 (a fold every step), tiles of 32, 64 and 128 rows, in
// every order of copies and warpgroups. Each output within the float32 bound of the scaled
// products, and the same bits as the emulated mma.sync kernel (tiles of 32): both sum each block
// in one fma chain over k and fold it with fma(sum, s_w * s_a, acc), so a wrong block boundary,
// scale index, widening or wide-tile parity shows bit for bit.
TEST(GroupedWgmmaEmulated, Fp8ExpertsWithActivationScales) {
  std::mt19937 rng(98);
  const int64_t N = 136, M = MmaRouting(32).M;
  for (const int64_t bc : {int64_t{128}, int64_t{64}}) {
    // K of 9 steps (the last partial), more than the pipeline's stages and wide tiles, so that a
    // stage or a wide tile rewritten under MMAs still in flight shows.
    const int64_t K = bc == 128 ? 560 : 528, br = bc == 128 ? 128 : 5;
    const Fp8MoeData d(N, M, K, br, bc, rng);
    const std::vector<float>& x = d.x;
    const std::vector<float>& sa = d.sa;
    const int64_t lda = d.lda;
    const ExpertTable table{d.refs.data(), 8};
    const MmaRouting mma_routing(32);
    std::vector<float> want(static_cast<size_t>(M * N), NAN);
    RunGroupedMma<true>(mma_routing, ConstMat{x.data(), M, K, K}, mma_routing.x_rows.data(), table, N, K,
                        MutMat{want.data(), M, N, N}, ActScales{sa.data(), lda});
    for (const int64_t tile_rows : {32, 64, 128}) {
      SCOPED_TRACE(::testing::Message() << "blocks of " << br << " x " << bc << ", K " << K << ", tiles of "
                                        << tile_rows);
      const MmaRouting routing(tile_rows);
      const std::vector<int32_t>& x_rows = routing.x_rows;
      InEachCopyOrder(bc == 128, [&] {
        std::vector<float> out(static_cast<size_t>(M * N), NAN);
        RunGroupedWg<true>(routing, ConstMat{x.data(), M, K, K}, x_rows.data(), table, N, K,
                           MutMat{out.data(), M, N, N}, ActScales{sa.data(), lda});
        d.ExpectWithinBound(out, routing, M, N, K, bc);
        EXPECT_TRUE(SameBits(out, want)) << "the warpgroup kernel's bits against the emulated mma.sync kernel's";
      });
      EXPECT_EQ(emulation::g_protocol_failures, 0);
      emulation::g_protocol_failures = 0;
    }
  }
}

// INT4 and FP8 block-scaled weights on the tensor cores (kernels/quant_mma_kernels.cuh): the
// activations prepared as two bfloat16 parts, then 16-row tiles times up to 16 tokens (one or two
// n8 fragments), the groups (INT4) or column blocks (FP8) of K split over four warps. INT4 groups
// of 32, 128 and 96 (three steps); FP8 blocks of 128 x 128, 5 x 32 and 16 x 96 with a partial last
// column block; a partial tile of rows; K of 64 (warps without a group); token counts of one
// fragment, two, and several blocks. Held to the float32 bound widened by 2^-16 per product; and
// a token's result is the same bits alone as in any batch.
std::vector<uint4> PrepareQuant(const ConstMat& x, bool fp8) {
  std::vector<uint4> prepared(QuantPreparedBytes(x.rows, x.cols) / sizeof(uint4));
  const int64_t threads = x.rows * (x.cols / 32) * 4;
  emulation::RunGrid({static_cast<unsigned>((threads + 255) / 256), 1, 1}, 256, 0, [&] {
    if (fp8) {
      qmma::QuantPrepKernel<qmma::Layout::kAdjacent>(x, prepared.data());
    } else {
      qmma::QuantPrepKernel<qmma::Layout::kNibbles>(x, prepared.data());
    }
  });
  return prepared;
}

std::vector<float> RunQuantMma(const std::vector<float>& x, int64_t T, const HostWeight& w) {
  const int64_t N = w.ref.rows, K = w.ref.cols;
  const bool fp8 = w.ref.type == kElemFp8E4M3;
  EXPECT_TRUE(QuantMmaApplies(w.ref));
  const std::vector<uint4> prepared = PrepareQuant(ConstMat{x.data(), T, K, K}, fp8);
  std::vector<float> out(static_cast<size_t>(T * N), NAN);
  const emulation::Index3 grid{static_cast<unsigned>((N + qmma::kRows - 1) / qmma::kRows),
                               static_cast<unsigned>((T + qmma::kTokens - 1) / qmma::kTokens), 1};
  emulation::RunGrid(grid, qmma::kThreads, 0, [&] {
    const MutMat om{out.data(), T, N, N};
    // The launcher's instance: one fragment's registers up to 8 tokens.
    if (fp8) {
      (T <= 8 ? qmma::QuantMmaKernel<true, true> : qmma::QuantMmaKernel<true, false>)(prepared.data(), w.ref, om);
    } else {
      (T <= 8 ? qmma::QuantMmaKernel<false, true> : qmma::QuantMmaKernel<false, false>)(prepared.data(), w.ref, om);
    }
  });
  return out;
}

// The tensor-core kernel's arithmetic written out on the host (quant_mma_kernels.cuh), for one
// token and output row: the activations in two bfloat16 parts (hi = x rounded, lo = x - hi
// rounded; lo = 0 where hi is not finite); per 32-column step four MMAs in the kernel's order
// (weights' first MMA with hi, then with lo, the second MMA with hi, then lo), each adding its
// 16 products to the group's sum by fma in slot order, slot k of MMA m being column
// 8c + 4e + 2m + h (INT4: c = (k % 8) / 2, e = k % 2, h = k / 8: the nibbles as they come out of
// a word two at a time) or 8c + 4m + 2h + e (FP8: adjacent pairs); each group's sum folded by
// fma with the row's scale; the K groups split into four contiguous ranges (warps) whose sums
// are added in order. The kernel must give these bits, whatever its loads look like.
float QuantMmaReference(const float* x, const HostWeight& w, int64_t n) {
  const WeightRef& r = w.ref;
  const bool fp8 = r.type == kElemFp8E4M3;
  const int64_t K = r.cols, span = fp8 ? r.block_cols : r.group, steps = K / 32, per_group = span / 32;
  const int64_t groups = (K + span - 1) / span;
  const auto hi_of = [](float v) { return Bf16ToF32(F32ToBf16(v)); };
  const auto lo_of = [&](float v) {
    const float hi = hi_of(v);
    return std::isfinite(hi) ? Bf16ToF32(F32ToBf16(v - hi)) : 0.0f;
  };
  const auto weight = [&](int64_t col) -> float {
    if (fp8) return EmulatedE4M3(w.codes[n * K + col]);
    const uint8_t b = w.codes[n * (K / 2) + col / 2];
    return static_cast<float>(((col & 1) != 0 ? b >> 4 : b & 0xf) - 8);
  };
  const auto scale = [&](int64_t g) -> float {
    if (fp8) return w.f32_scales[(n / r.block_rows) * groups + g];
    return Bf16ToF32(w.bf16_scales[n * groups + g]);
  };
  float sum = 0.0f;
  for (int warp = 0; warp < 4; ++warp) {
    float acc = 0.0f;
    for (int64_t g = warp * groups / 4; g < (warp + 1) * groups / 4; ++g) {
      float part = 0.0f;
      for (int64_t st = g * per_group; st < std::min((g + 1) * per_group, steps); ++st) {
        for (int m = 0; m < 2; ++m) {
          for (int lo = 0; lo < 2; ++lo) {
            for (int k = 0; k < 16; ++k) {
              const int c = (k % 8) / 2, e = k % 2, h = k / 8;
              const int64_t col = 32 * st + (fp8 ? 8 * c + 4 * m + 2 * h + e : 8 * c + 4 * e + 2 * m + h);
              part = std::fma(weight(col), lo != 0 ? lo_of(x[col]) : hi_of(x[col]), part);
            }
          }
        }
      }
      acc = std::fma(part, scale(g), acc);
    }
    sum = warp == 0 ? acc : sum + acc;
  }
  return sum;
}

TEST(QuantMmaEmulated, RowsTimesTokensOnTheTensorCores) {
  std::mt19937 rng(97);
  std::normal_distribution<float> normal;
  const int64_t N = 37;
  std::vector<HostWeight> weights;
  weights.push_back(Int4Weight(N, 256, 32, rng));
  weights.push_back(Int4Weight(N, 1280, 128, rng));
  weights.push_back(Int4Weight(N, 576, 96, rng));
  weights.push_back(Int4Weight(N, 64, 32, rng));
  weights.push_back(Int4Weight(N, 2080, 32, rng));  // 16 or 17 steps a warp: the ring of steps ahead, twice
  weights.push_back(Fp8Weight(N, 384, 128, 128, rng));
  weights.push_back(Fp8Weight(N, 2144, 16, 96, rng));  // 15 to 18 steps a warp, groups across the ring
  weights.push_back(Fp8Weight(N, 416, 5, 32, rng));
  weights.push_back(Fp8Weight(N, 544, 16, 96, rng));  // a partial last column block
  weights.push_back(Fp8Weight(N, 64, 128, 128, rng));
  for (const HostWeight& w : weights) {
    const int64_t K = w.ref.cols;
    for (const int64_t T : {1, 5, 8, 9, 16, 19}) {
      SCOPED_TRACE(::testing::Message() << BitsOf(w.ref) << "-bit, K " << K << " group or block cols "
                                        << (w.ref.type == kElemInt4 ? w.ref.group : w.ref.block_cols) << " T " << T);
      std::vector<float> x(static_cast<size_t>(T * K));
      for (float& v : x) v = normal(rng);
      const std::vector<float> out = RunQuantMma(x, T, w);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_EQ(FloatBits(out[t * N + n]), FloatBits(QuantMmaReference(x.data() + t * K, w, n)))
              << "token " << t << " column " << n << ": not the kernel's arithmetic";
        }
      }
      Expect(
          out, T, N, K, x.data(), K, [](int64_t r) { return r; }, [&](int64_t) -> const HostWeight& { return w; },
          [](int64_t, int64_t) { return 1.0; }, 1, 0x1p-16);
      // Each token alone: the same bits.
      for (int64_t t = 0; t < T; t += 4) {
        const std::vector<float> xt(x.begin() + t * K, x.begin() + (t + 1) * K);
        const std::vector<float> alone = RunQuantMma(xt, 1, w);
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_EQ(FloatBits(alone[n]), FloatBits(out[t * N + n])) << "token " << t << " column " << n;
        }
      }
    }
  }
}

// Non-finite activations give what float32 products give: inf times a positive weight is inf, not
// the NaN a lower part of inf - inf would make.
TEST(QuantMmaEmulated, InfiniteActivationsStayInfinite) {
  std::mt19937 rng(98);
  const int64_t N = 16, K = 64;
  HostWeight i4 = Int4Weight(N, K, 32, rng), f8 = Fp8Weight(N, K, 128, 128, rng);
  std::fill(i4.codes.begin(), i4.codes.end(), static_cast<uint8_t>(0x99));  // every q = 1
  std::fill(f8.codes.begin(), f8.codes.end(), static_cast<uint8_t>(0x38));  // every code 1.0
  std::vector<float> x(static_cast<size_t>(K), 0.5f);
  x[3] = INFINITY;
  for (const HostWeight* w : {&i4, &f8}) {
    const std::vector<float> out = RunQuantMma(x, 1, *w);
    for (int64_t n = 0; n < N; ++n) EXPECT_EQ(out[n], INFINITY) << BitsOf(w->ref) << "-bit, column " << n;
  }
}

// Grouped by expert, as the MoE runs it: tiles of one expert's rows, activation rows through
// x_rows, a tile past count[0] that must not run; tiles of 5 rows (one fragment), 32 (two runs of
// 16), 22, 6 and 1. INT4 and FP8 banks.
TEST(QuantMmaEmulated, GroupedByExpert) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal;
  const MmaRouting routing(kGemmTileRows);
  const int64_t N = 24, K = 256, M = routing.M;
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8 experts" : "INT4 experts");
    std::vector<HostWeight> experts;
    for (int e = 0; e < 3; ++e) experts.push_back(fp8 ? Fp8Weight(N, K, 128, 128, rng) : Int4Weight(N, K, 32, rng));
    const std::vector<WeightRef> refs = RefsOf(experts);
    std::vector<float> x(static_cast<size_t>(M * K));
    for (float& v : x) v = normal(rng);
    const std::vector<uint4> prepared = PrepareQuant(ConstMat{x.data(), M, K, K}, fp8);
    const ExpertTable table{refs.data(), fp8 ? 8 : 4};
    const TileTable tiles = routing.Tiles();
    const emulation::Index3 grid{static_cast<unsigned>((N + qmma::kRows - 1) / qmma::kRows),
                                 static_cast<unsigned>(routing.tile_expert.size()), 1};
    // Both instances (runs of 16 on two fragments; runs of 8 on one, which the launcher takes for
    // decode batches of up to 8 but which is right for any tile): the same bits.
    const auto run = [&](bool one) {
      std::vector<float> out(static_cast<size_t>(M * N), NAN);
      emulation::RunGrid(grid, qmma::kThreads, 0, [&] {
        const MutMat om{out.data(), M, N, N};
        const uint4* xp = prepared.data();
        const int32_t* xr = routing.x_rows.data();
        if (fp8) {
          (one ? qmma::GroupedQuantMmaKernel<true, true> : qmma::GroupedQuantMmaKernel<true, false>)(xp, xr, table, N, K,
                                                                                                   tiles, om);
        } else {
          (one ? qmma::GroupedQuantMmaKernel<false, true> : qmma::GroupedQuantMmaKernel<false, false>)(xp, xr, table, N,
                                                                                                     K, tiles, om);
        }
      });
      return out;
    };
    const std::vector<float> out = run(false), one = run(true);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isnan(out[i]) ? std::isnan(one[i]) : FloatBits(out[i]) == FloatBits(one[i])) << "element " << i;
    }
    Expect(
        out, M, N, K, x.data(), K, [&](int64_t r) { return static_cast<int64_t>(routing.x_rows[r]); },
        [&](int64_t r) -> const HostWeight& { return experts[routing.expert[r]]; },
        [](int64_t, int64_t) { return 1.0; }, 1, 0x1p-16);
  }
}

}  // namespace
}  // namespace llmrt::cuda
