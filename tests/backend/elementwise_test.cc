// Fill, Embedding, Add, SiluMul, AddBias, GatherRows: data movement and single float32
// operations, so the reference is exact (bit equality) except SiluMul's exponential.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/backend/harness.h"
#include "src/util/bf16.h"

namespace llmrt::conformance {
namespace {

class ElementwiseOps : public BackendTest {};

TEST_P(ElementwiseOps, Fill) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 7}, {3, 33}, {130, 3}}) {
    Tensor t = NewTensor(DType::kF32, {rows, cols});
    be().Fill(t, -2.5f);
    EXPECT_TRUE(AllBitEqual(ReadF32(t), std::vector<float>(static_cast<size_t>(rows * cols), -2.5f)))
        << rows << "x" << cols;
    // A block of rows (a contiguous view) leaves the others alone.
    if (rows >= 3) {
      be().Fill(t.Rows(1, 2), 0.75f);
      std::vector<float> want(static_cast<size_t>(rows * cols), -2.5f);
      std::fill(want.begin() + cols, want.begin() + 2 * cols, 0.75f);
      EXPECT_TRUE(AllBitEqual(ReadF32(t), want)) << rows << "x" << cols << " rows [1, 2)";
    }
  }
  Tensor v = NewTensor(DType::kF32, {5});
  be().Fill(v, -0.0f);
  EXPECT_TRUE(AllBitEqual(ReadF32(v), std::vector<float>(5, -0.0f)));
}

// out[t] = table[ids[t]] in float32, for F32 and BF16 tables (exact: BF16 widens exactly).
TEST_P(ElementwiseOps, Embedding) {
  std::mt19937 rng(1);
  const int64_t vocab = 37;
  for (WeightFormatId format : {kWeightF32, kWeightBf16}) {
    for (int64_t hidden : {1, 7, 130}) {
      const HostMatrix table = MakeHostMatrix(format, vocab, hidden, {}, rng);
      Weight w;
      if (!Prepare(table, &w)) continue;
      for (const std::vector<int32_t>& ids :
           std::vector<std::vector<int32_t>>{{0}, {36, 0, 5, 5, 17}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}}) {
        const int64_t T = static_cast<int64_t>(ids.size());
        Tensor out = NewTensor(DType::kF32, {T, hidden});
        be().Embedding(w, I32(ids), out);
        std::vector<float> want;
        for (int32_t id : ids) want.insert(want.end(), table.dense.begin() + id * hidden, table.dense.begin() + (id + 1) * hidden);
        EXPECT_TRUE(AllBitEqual(ReadF32(out), want)) << table.Describe() << " T=" << T;
      }
    }
  }
}

// A quantized table: backend.h says out[t] = table[ids[t]] "as float32" for any table; a
// backend either does that (the dequantized row) or refuses through the status channel.
TEST_P(ElementwiseOps, EmbeddingOfAQuantizedTableMatchesOrIsRefused) {
  std::mt19937 rng(6);
  for (const FormatCase& fc : FormatCases(/*cols=*/64)) {
    if (fc.format == kWeightF32 || fc.format == kWeightBf16) continue;
    const HostMatrix table = MakeHostMatrix(fc.format, 9, 64, fc.params, rng);
    Weight w;
    if (!Prepare(table, &w)) continue;
    const std::vector<int32_t> ids = {8, 0, 3};
    Tensor out = NewTensor(DType::kF32, {3, 64});
    be().Embedding(w, I32(ids), out);
    const absl::Status s = be().Synchronize();
    if (!s.ok()) {
      RecordProperty("refused_" + std::to_string(int{fc.format}), s.ToString());
      continue;
    }
    std::vector<float> want;
    for (int32_t id : ids) want.insert(want.end(), table.dense.begin() + id * 64, table.dense.begin() + (id + 1) * 64);
    EXPECT_TRUE(AllBitEqual(ReadF32(out), want)) << fc.name;
  }
}

// out = a + b, one float32 addition per element (exact against the float sum); out may alias a
// or b.
TEST_P(ElementwiseOps, Add) {
  std::mt19937 rng(2);
  for (int64_t T : {1, 3}) {
    for (int64_t D : {1, 7, 130}) {
      const size_t n = static_cast<size_t>(T * D);
      const std::vector<float> a = RandomNormal(n, rng), b = RandomNormal(n, rng, 1e-3f);
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
      Tensor ta = F32(a, {T, D}), tb = F32(b, {T, D}), out = NewTensor(DType::kF32, {T, D});
      be().Add(ta, tb, out);
      EXPECT_TRUE(AllBitEqual(ReadF32(out), want)) << "T=" << T << " D=" << D;
      be().Add(ta, tb, ta);  // out == a (the residual update)
      EXPECT_TRUE(AllBitEqual(ReadF32(ta), want)) << "out == a, T=" << T << " D=" << D;
      Tensor ta2 = F32(a, {T, D});
      be().Add(ta2, tb, tb);  // out == b
      EXPECT_TRUE(AllBitEqual(ReadF32(tb), want)) << "out == b, T=" << T << " D=" << D;
    }
  }
}

// Add and SiluMul over more elements than one grid of the device's elementwise kernels takes
// (65,535 blocks of 256 threads: a 4,096-token prefill's residual at Kimi K2's hidden of 7,168
// is 29M): the elements past the first grid take a second turn of its threads.
TEST_P(ElementwiseOps, AddAndSiluMulPastOneGrid) {
  std::mt19937 rng(5);
  const int64_t T = 4097, D = 4096;  // 16,781,312 elements: 4,352 past 65,535 x 256
  const size_t n = static_cast<size_t>(T * D);
  std::vector<float> a(n), b(n);
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  for (size_t i = 0; i < n; ++i) {
    a[i] = uniform(rng);
    b[i] = static_cast<float>(i % 1021) * 0x1p-10f;
  }
  Tensor ta = F32(a, {T, D}), tb = F32(b, {T, D}), out = NewTensor(DType::kF32, {T, D});
  be().Add(ta, tb, out);
  std::vector<float> got = ReadF32(out);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += got[i] != a[i] + b[i];
  EXPECT_EQ(wrong, 0u);
  be().SiluMul(ta, tb, out);
  got = ReadF32(out);
  wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const double want = a[i] / (1.0 + std::exp(-static_cast<double>(a[i]))) * b[i];
    wrong += std::fabs(got[i] - want) > 16 * kU * std::fabs(want) + 1e-30;
  }
  EXPECT_EQ(wrong, 0u);
}

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up. Tolerance 16 u relative: exp (a few ulp in
// a device math library), one add, one division, one product; plus 1e-30 absolute, since for
// gate < -88 exp(-gate) overflows float32 and the float result is -0 where the double one is a
// subnormal.
TEST_P(ElementwiseOps, SiluMul) {
  std::mt19937 rng(3);
  for (int64_t T : {1, 3}) {
    for (int64_t D : {1, 7, 130}) {
      const size_t n = static_cast<size_t>(T * D);
      std::vector<float> g = RandomNormal(n, rng, 3.0f), u = RandomNormal(n, rng);
      const float extremes[] = {0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e-30f};
      for (size_t i = 0; i < n && i < 7; ++i) g[i] = extremes[(i + static_cast<size_t>(D)) % 7];
      std::vector<double> want(n), tol(n);
      for (size_t i = 0; i < n; ++i) {
        want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
        tol[i] = 16 * kU * std::fabs(want[i]) + 1e-30;
      }
      Tensor out = NewTensor(DType::kF32, {T, D});
      be().SiluMul(F32(g, {T, D}), F32(u, {T, D}), out);
      EXPECT_TRUE(AllNear(ReadF32(out), want, tol)) << "T=" << T << " D=" << D;
    }
  }
}

// x[t] += bias (F32 or BF16): one float32 addition per element, exact.
TEST_P(ElementwiseOps, AddBias) {
  std::mt19937 rng(4);
  for (bool bf16 : {false, true}) {
    for (int64_t T : {1, 3}) {
      for (int64_t D : {1, 7, 130}) {
        const std::vector<float> x = RandomNormal(static_cast<size_t>(T * D), rng);
        std::vector<float> bias = RandomNormal(static_cast<size_t>(D), rng);
        if (bf16) bias = RoundToBf16(bias);
        std::vector<float> want(x.size());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < D; ++i) want[t * D + i] = x[t * D + i] + bias[i];
        }
        Tensor tx = F32(x, {T, D});
        be().AddBias(tx, Vector(bias, bf16));
        EXPECT_TRUE(AllBitEqual(ReadF32(tx), want)) << (bf16 ? "BF16" : "F32") << " T=" << T << " D=" << D;
      }
    }
  }
}

// out[i] = x[rows[i]]: repeated rows, any order, first and last row.
TEST_P(ElementwiseOps, GatherRows) {
  std::mt19937 rng(5);
  for (int64_t D : {1, 33}) {
    const int64_t R = 7;
    const std::vector<float> x = RandomNormal(static_cast<size_t>(R * D), rng);
    for (const std::vector<int32_t>& rows : std::vector<std::vector<int32_t>>{{6}, {6, 0, 6, 3}, {0, 1, 2, 3, 4, 5, 6}}) {
      const int64_t S = static_cast<int64_t>(rows.size());
      Tensor out = NewTensor(DType::kF32, {S, D});
      be().GatherRows(F32(x, {R, D}), I32(rows), out);
      std::vector<float> want;
      for (int32_t r : rows) want.insert(want.end(), x.begin() + r * D, x.begin() + (r + 1) * D);
      EXPECT_TRUE(AllBitEqual(ReadF32(out), want)) << "D=" << D << " S=" << S;
    }
  }
}

LLMRT_BACKEND_SUITE(ElementwiseOps);

}  // namespace
}  // namespace llmrt::conformance
