// MatMul over every registered weight format, and MLA's two products with kv_b
// (MlaAbsorbQuery, MlaProjectValue), against double references over the format's scalar
// dequantization (WeightFormatTraits::dequantize_row).
//
// Tolerance of a K-term float32 dot product: any summation order (SIMD lanes, blocks, split-K
// on a device) is within gamma_K = K u / (1 - K u) of sum_k |w_k x_k| (Higham, "Accuracy and
// Stability of Numerical Algorithms", 3.1); quantized formats fold a block scale into each
// partial sum and the reference rounds each dequantized weight once, a few more roundings per
// term. We allow (K + 8) u * sum_k |w_k x_k|: worst-case, so it holds for every backend that
// accumulates in float32, and still catches any wrong code, scale or column (which moves a
// result by a whole term).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

class MatMulOps : public BackendTest {
 protected:
  // The relative error per product a backend adds to float32's for a format: CUDA multiplies INT4
  // and FP8 block weights on the tensor cores with the activations in two bfloat16 parts (2^-16;
  // kernels/kernels.h, QuantMmaApplies), everything else in float32.
  double ProductEps(WeightFormatId format) const {
    return GetParam() == BackendKind::kCuda && (format == kWeightInt4Group || format == kWeightFp8Block) ? 0x1p-16
                                                                                                        : 0.0;
  }
};

// out [T, rows] = x [T, cols] w^T with its tolerance; eps: a relative error per product on top of
// the float32 bound.
void MatMulReference(const std::vector<float>& w, int64_t rows, int64_t cols, const std::vector<float>& x, int64_t T,
                     std::vector<double>* want, std::vector<double>* tol, double eps = 0) {
  want->assign(static_cast<size_t>(T * rows), 0.0);
  tol->assign(want->size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < rows; ++n) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(w[n * cols + k]) * x[t * cols + k];
        s += p;
        mag += std::fabs(p);
      }
      (*want)[t * rows + n] = s;
      (*tol)[t * rows + n] = ((cols + 8) * kU + eps) * mag;
    }
  }
}

// Every registered format must have a generator here, so that a new format cannot join the
// registry without joining this suite.
TEST_P(MatMulOps, EveryRegisteredFormatIsCovered) {
  for (const WeightFormatTraits* t : WeightFormats()) {
    bool covered = false;
    for (const FormatCase& c : FormatCases(/*cols=*/128)) covered |= c.format == t->id;
    EXPECT_TRUE(covered) << "weight format " << int{t->id} << " (" << t->name << ") has no conformance cases";
  }
}

// Odd row and column counts (1 .. 130), INT4 where a group divides the columns; T = 1 .. 5
// (one-row-at-a-time decode paths) and 17 (blocked prefill paths); x contiguous or a misaligned
// column view.
TEST_P(MatMulOps, EveryFormatMatchesItsDequantizedReference) {
  std::mt19937 rng(30);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {3, 7},   {7, 33},  {33, 130}, {130, 3},
                                                           {5, 128},  {3, 256}, {33, 96}, {7, 384}, {1, 32}};
  int64_t checked = 0;
  for (const auto& [rows, cols] : shapes) {
    for (const FormatCase& fc : FormatCases(cols)) {
      const HostMatrix m = MakeHostMatrix(fc.format, rows, cols, fc.params, rng);
      Weight w;
      if (!Prepare(m, &w)) continue;
      for (int64_t T : {1, 2, 3, 4, 5, 17}) {
        const int64_t pad = (T + rows) % 2 == 0 ? 0 : 2;
        const std::vector<float> x = RandomNormal(static_cast<size_t>(T * cols), rng);
        std::vector<double> want, tol;
        MatMulReference(m.dense, rows, cols, x, T, &want, &tol, ProductEps(fc.format));
        Tensor out = NewTensor(DType::kF32, {T, rows});
        be().MatMul(F32View(x, T, cols, pad, nullptr), w, out);
        ASSERT_TRUE(AllNear(ReadF32(out), want, tol)) << fc.name << ": " << m.Describe() << " T=" << T << " pad=" << pad;
        ++checked;
      }
    }
  }
  RecordProperty("matmul_cases", static_cast<int>(checked));
}

// Quantized weights at the sizes of real layers' slices: K = 2304 spans several k-steps of a
// device GEMV (INT4 steps of 1024 columns, FP8 of 512) with a partial last one, and T runs over
// decode (1), a full and a partial block of activation rows (8, 16, 13) and prefill (40). The
// tolerance is the dot product bound above: the backends multiply float32 activations by the
// exactly dequantized weights (an INT4 code times its bfloat16 scale is exact in float32; an
// FP8 code times its float32 block scale is one rounding, as in the reference), so no activation
// rounding enters, except CUDA's tensor-core kernel for INT4 and FP8 (two bfloat16 parts: 2^-16 a
// product).
TEST_P(MatMulOps, QuantizedFormatsAtLayerSizes) {
  std::mt19937 rng(34);
  const int64_t rows = 37, cols = 2304;
  int64_t checked = 0;
  for (const FormatCase& fc : FormatCases(cols)) {
    if (fc.format == kWeightF32 || fc.format == kWeightBf16) continue;
    const HostMatrix m = MakeHostMatrix(fc.format, rows, cols, fc.params, rng);
    Weight w;
    if (!Prepare(m, &w)) continue;
    for (int64_t T : {1, 8, 13, 16, 40}) {
      const std::vector<float> x = RandomNormal(static_cast<size_t>(T * cols), rng);
      std::vector<double> want, tol;
      MatMulReference(m.dense, rows, cols, x, T, &want, &tol, ProductEps(fc.format));
      Tensor out = NewTensor(DType::kF32, {T, rows});
      be().MatMul(F32View(x, T, cols, T % 2 == 0 ? 0 : 2, nullptr), w, out);
      ASSERT_TRUE(AllNear(ReadF32(out), want, tol)) << fc.name << ": " << m.Describe() << " T=" << T;
      ++checked;
    }
  }
  RecordProperty("matmul_cases", static_cast<int>(checked));
}

// A row's result does not depend on the other rows of the call, bit for bit: the same token
// alone (decode) or among 23 others (a prefill chunk, other sequences' tokens) gives the same
// logits whatever kernel a backend picks for each batch size.
TEST_P(MatMulOps, RowsDoNotDependOnTheBatch) {
  std::mt19937 rng(35);
  const int64_t rows = 19, cols = 1280, T = 24;
  for (const FormatCase& fc : FormatCases(cols)) {
    const HostMatrix m = MakeHostMatrix(fc.format, rows, cols, fc.params, rng);
    Weight w;
    if (!Prepare(m, &w)) continue;
    const std::vector<float> x = RandomNormal(static_cast<size_t>(T * cols), rng);
    Tensor all = NewTensor(DType::kF32, {T, rows});
    be().MatMul(F32(x, {T, cols}), w, all);
    const std::vector<float> batched = ReadF32(all);
    for (int64_t t : {int64_t{0}, int64_t{9}, T - 1}) {
      Tensor one = NewTensor(DType::kF32, {1, rows});
      be().MatMul(F32(std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols), {1, cols}), w, one);
      const std::vector<float> want(batched.begin() + t * rows, batched.begin() + (t + 1) * rows);
      EXPECT_TRUE(AllBitEqual(ReadF32(one), want)) << fc.name << ": row " << t << " of " << T;
    }
  }
}

struct MlaCase {
  MlaDims d;
  int64_t T;
};

std::vector<MlaCase> MlaCases() {
  // heads, nope, rope, v, kv_lora
  return {{{1, 1, 1, 1, 1}, 1}, {{3, 7, 3, 5, 33}, 3}, {{2, 16, 8, 16, 130}, 5}, {{2, 8, 4, 4, 512}, 2}};
}

// q_lat[t, h] = W_UK(h)^T q_nope[t, h]: W_UK(h) the first `nope` rows of head h's
// (nope + v)-row block of kv_b, q_nope the first `nope` values of head h's q slice.
TEST_P(MatMulOps, MlaAbsorbQuery) {
  std::mt19937 rng(31);
  for (const MlaCase& c : MlaCases()) {
    const MlaDims& d = c.d;
    const int64_t blk = d.nope + d.v, qw = d.nope + d.rope;
    for (WeightFormatId format : {kWeightF32, kWeightBf16}) {  // kv_b is loaded dense (WeightLoader::Dense)
      const HostMatrix kv_b = MakeHostMatrix(format, d.heads * blk, d.kv_lora, {}, rng);
      Weight w;
      if (!Prepare(kv_b, &w)) continue;
      const std::vector<float> q = RandomNormal(static_cast<size_t>(c.T * d.heads * qw), rng);
      std::vector<double> want(static_cast<size_t>(c.T * d.heads * d.kv_lora)), tol(want.size());
      for (int64_t t = 0; t < c.T; ++t) {
        for (int64_t h = 0; h < d.heads; ++h) {
          for (int64_t j = 0; j < d.kv_lora; ++j) {
            double s = 0, mag = 0;
            for (int64_t r = 0; r < d.nope; ++r) {
              const double p = static_cast<double>(q[t * d.heads * qw + h * qw + r]) * kv_b.dense[(h * blk + r) * d.kv_lora + j];
              s += p;
              mag += std::fabs(p);
            }
            want[(t * d.heads + h) * d.kv_lora + j] = s;
            tol[(t * d.heads + h) * d.kv_lora + j] = (d.nope + 8) * kU * mag;
          }
        }
      }
      Tensor q_lat = NewTensor(DType::kF32, {c.T, d.heads * d.kv_lora});
      be().MlaAbsorbQuery(F32(q, {c.T, d.heads * qw}), w, d, q_lat);
      EXPECT_TRUE(AllNear(ReadF32(q_lat), want, tol)) << kv_b.Describe() << " heads=" << d.heads << " nope=" << d.nope
                                                      << " kv_lora=" << d.kv_lora << " T=" << c.T;
    }
  }
}

// out[t, h] = W_UV(h) o_lat[t, h]: W_UV(h) the last `v` rows of head h's block of kv_b.
TEST_P(MatMulOps, MlaProjectValue) {
  std::mt19937 rng(32);
  for (const MlaCase& c : MlaCases()) {
    const MlaDims& d = c.d;
    const int64_t blk = d.nope + d.v;
    for (WeightFormatId format : {kWeightF32, kWeightBf16}) {
      const HostMatrix kv_b = MakeHostMatrix(format, d.heads * blk, d.kv_lora, {}, rng);
      Weight w;
      if (!Prepare(kv_b, &w)) continue;
      const std::vector<float> o_lat = RandomNormal(static_cast<size_t>(c.T * d.heads * d.kv_lora), rng);
      std::vector<double> want(static_cast<size_t>(c.T * d.heads * d.v)), tol(want.size());
      for (int64_t t = 0; t < c.T; ++t) {
        for (int64_t h = 0; h < d.heads; ++h) {
          for (int64_t j = 0; j < d.v; ++j) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < d.kv_lora; ++k) {
              const double p = static_cast<double>(kv_b.dense[(h * blk + d.nope + j) * d.kv_lora + k]) *
                               o_lat[(t * d.heads + h) * d.kv_lora + k];
              s += p;
              mag += std::fabs(p);
            }
            want[(t * d.heads + h) * d.v + j] = s;
            tol[(t * d.heads + h) * d.v + j] = (d.kv_lora + 8) * kU * mag;
          }
        }
      }
      Tensor out = NewTensor(DType::kF32, {c.T, d.heads * d.v});
      be().MlaProjectValue(F32(o_lat, {c.T, d.heads * d.kv_lora}), w, d, out);
      EXPECT_TRUE(AllNear(ReadF32(out), want, tol)) << kv_b.Describe() << " heads=" << d.heads << " v=" << d.v
                                                    << " kv_lora=" << d.kv_lora << " T=" << c.T;
    }
  }
}

// kv_b in a quantized format. backend.h puts no format restriction on MLA's kv_b (the loader
// happens to load it dense: WeightLoader::Dense), and the contract for formats is "support it
// or refuse it": so either the result matches the dequantized reference, or the op fails
// through the status channel.
TEST_P(MatMulOps, MlaWithQuantizedKvBMatchesOrIsRefused) {
  std::mt19937 rng(33);
  MlaDims d;
  d.heads = 2;
  d.nope = 4;
  d.rope = 2;
  d.v = 3;
  d.kv_lora = 64;
  const int64_t T = 2, blk = d.nope + d.v, qw = d.nope + d.rope;
  for (const FormatCase& fc : FormatCases(d.kv_lora)) {
    if (fc.format == kWeightF32 || fc.format == kWeightBf16) continue;
    const HostMatrix kv_b = MakeHostMatrix(fc.format, d.heads * blk, d.kv_lora, fc.params, rng);
    Weight w;
    if (!Prepare(kv_b, &w)) continue;
    const std::vector<float> q = RandomNormal(static_cast<size_t>(T * d.heads * qw), rng);
    Tensor q_lat = NewTensor(DType::kF32, {T, d.heads * d.kv_lora});
    be().MlaAbsorbQuery(F32(q, {T, d.heads * qw}), w, d, q_lat);
    if (!be().Synchronize().ok()) continue;  // refused: fine
    std::vector<double> want(static_cast<size_t>(T * d.heads * d.kv_lora)), tol(want.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < d.heads; ++h) {
        for (int64_t j = 0; j < d.kv_lora; ++j) {
          double s = 0, mag = 0;
          for (int64_t r = 0; r < d.nope; ++r) {
            const double p = static_cast<double>(q[(t * d.heads + h) * qw + r]) * kv_b.dense[(h * blk + r) * d.kv_lora + j];
            s += p;
            mag += std::fabs(p);
          }
          want[(t * d.heads + h) * d.kv_lora + j] = s;
          tol[(t * d.heads + h) * d.kv_lora + j] = (d.nope + 8) * kU * mag;
        }
      }
    }
    EXPECT_TRUE(AllNear(ReadF32(q_lat), want, tol)) << fc.name << ": MlaAbsorbQuery";

    const std::vector<float> o_lat = RandomNormal(static_cast<size_t>(T * d.heads * d.kv_lora), rng);
    Tensor out = NewTensor(DType::kF32, {T, d.heads * d.v});
    be().MlaProjectValue(F32(o_lat, {T, d.heads * d.kv_lora}), w, d, out);
    if (!be().Synchronize().ok()) continue;
    want.assign(static_cast<size_t>(T * d.heads * d.v), 0.0);
    tol.assign(want.size(), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < d.heads; ++h) {
        for (int64_t j = 0; j < d.v; ++j) {
          double s = 0, mag = 0;
          for (int64_t k = 0; k < d.kv_lora; ++k) {
            const double p = static_cast<double>(kv_b.dense[(h * blk + d.nope + j) * d.kv_lora + k]) *
                             o_lat[(t * d.heads + h) * d.kv_lora + k];
            s += p;
            mag += std::fabs(p);
          }
          want[(t * d.heads + h) * d.v + j] = s;
          tol[(t * d.heads + h) * d.v + j] = (d.kv_lora + 8) * kU * mag;
        }
      }
    }
    EXPECT_TRUE(AllNear(ReadF32(out), want, tol)) << fc.name << ": MlaProjectValue";
  }
}

// A backend that reads a quantized kv_b as it is (Backend::ReadsQuantizedMlaKvB; the loader then
// keeps kv_b quantized instead of dequantizing it to F32) must give the very floats it gives over
// the F32 dequantization: the model's results may not depend on that choice.
TEST_P(MatMulOps, QuantizedKvBItReadsIsBitIdenticalToItsF32Dequantization) {
  std::mt19937 rng(34);
  int checked = 0;
  for (const MlaCase& c : MlaCases()) {
    const MlaDims& d = c.d;
    const int64_t blk = d.nope + d.v, qw = d.nope + d.rope;
    for (const FormatCase& fc : FormatCases(d.kv_lora)) {
      if (!WeightFormatOf(fc.format).quantized || !be().ReadsQuantizedMlaKvB(fc.format)) continue;
      const HostMatrix kv_b = MakeHostMatrix(fc.format, d.heads * blk, d.kv_lora, fc.params, rng);
      HostMatrix dense;
      dense.stored.format = kWeightF32;
      dense.stored.rows = kv_b.stored.rows;
      dense.stored.cols = kv_b.stored.cols;
      dense.stored.codes = NewHostArray(DType::kF32, {kv_b.stored.rows, kv_b.stored.cols});
      std::memcpy(const_cast<uint8_t*>(dense.stored.codes.data), kv_b.dense.data(), kv_b.dense.size() * sizeof(float));
      Weight wq, wd;
      ASSERT_TRUE(Prepare(kv_b, &wq)) << fc.name;
      ASSERT_TRUE(Prepare(dense, &wd));
      const std::vector<float> q = RandomNormal(static_cast<size_t>(c.T * d.heads * qw), rng);
      const std::vector<float> o_lat = RandomNormal(static_cast<size_t>(c.T * d.heads * d.kv_lora), rng);
      std::vector<float> got[2][2];  // [quantized, dense][absorb, project]
      for (int i = 0; i < 2; ++i) {
        const Weight& w = i == 0 ? wq : wd;
        Tensor q_lat = NewTensor(DType::kF32, {c.T, d.heads * d.kv_lora});
        be().MlaAbsorbQuery(F32(q, {c.T, d.heads * qw}), w, d, q_lat);
        Tensor out = NewTensor(DType::kF32, {c.T, d.heads * d.v});
        be().MlaProjectValue(F32(o_lat, {c.T, d.heads * d.kv_lora}), w, d, out);
        ASSERT_TRUE(be().Synchronize().ok()) << fc.name;
        got[i][0] = ReadF32(q_lat);
        got[i][1] = ReadF32(out);
      }
      for (int op = 0; op < 2; ++op) {
        ASSERT_EQ(got[0][op].size(), got[1][op].size());
        EXPECT_EQ(std::memcmp(got[0][op].data(), got[1][op].data(), got[0][op].size() * sizeof(float)), 0)
            << fc.name << (op == 0 ? ": MlaAbsorbQuery" : ": MlaProjectValue") << " heads=" << d.heads
            << " kv_lora=" << d.kv_lora << " T=" << c.T;
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "this backend reads no quantized kv_b (the loader dequantizes it)";
}

LLMRT_BACKEND_SUITE(MatMulOps);

}  // namespace
}  // namespace llmrt::conformance
