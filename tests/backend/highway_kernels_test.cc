// The CPU backend's SIMD kernels (src/backend/cpu/kernels.h) on EVERY Highway target compiled
// into this binary that this CPU supports, not only the best one: each test pins the dispatch to
// one target at a time (hwy::SetSupportedTargetsForTest), checks that dispatch really chose it,
// and compares against the scalar references over sizes 0 .. 2N+ (N = 16 float lanes, the
// widest x86 vector) with misaligned starts. The targets that ran are printed and recorded as
// the test property `targets`.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "src/backend/cpu/kernels.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"
#include "tests/backend/harness.h"

namespace llmrt::conformance {
namespace {

// Restores normal dispatch when a test ends, even on a failed assertion.
struct TargetReset {
  ~TargetReset() { hwy::SetSupportedTargetsForTest(0); }
};

// The dispatch table index HWY_DYNAMIC_DISPATCH uses for `target` (targets.h's ChosenTarget).
size_t DispatchIndex(int64_t target) {
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(
      static_cast<uint64_t>((HWY_CHOSEN_TARGET_SHIFT(target) | HWY_CHOSEN_TARGET_MASK_SCALAR) &
                            HWY_CHOSEN_TARGET_MASK_TARGETS));
}

// Runs `body` once per compiled and supported target with dispatch pinned to it.
void ForEachTarget(const std::function<void(const char*)>& body) {
  TargetReset reset;
  std::string names;
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const char* name = hwy::TargetName(target);
    float probe = 0.0f;
    cpu::Axpy(1.0f, DType::kF32, &probe, &probe, 1);  // a dispatched call initializes the choice
    ASSERT_EQ(hwy::GetChosenTarget().GetIndex(), DispatchIndex(target)) << "dispatch did not pick " << name;
    SCOPED_TRACE(name);
    body(name);
    if (::testing::Test::HasFatalFailure()) return;
    names += names.empty() ? name : std::string(" ") + name;
  }
  std::printf("Highway targets exercised: %s\n", names.c_str());
  ::testing::Test::RecordProperty("targets", names);
}

// Tolerance of a float32 dot product of n terms in any order against a double reference that
// was rounded once (the scalar references return float): (n + 4) u sum |a_i b_i|.
double DotTol(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(a[i]) * b[i]);
  return (n + 4) * kU * m;
}

TEST(HighwayKernels, MatMulRowsOnEveryTarget) {
  std::mt19937 rng(80);
  std::vector<int64_t> ks;
  for (int64_t k = 0; k <= 35; ++k) ks.push_back(k);
  for (int64_t k : {63, 64, 65, 100}) ks.push_back(k);
  ForEachTarget([&](const char*) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int64_t K : ks) {
        for (int64_t N : {1, 3, 4, 5, 9}) {
          for (int64_t T : {1, 2, 3, 5}) {
            const int64_t mis = (K + N + T) % 2, ldx = K + 3;
            std::vector<float> wf = RoundToBf16(RandomNormal(static_cast<size_t>(N * K + mis), rng));
            const std::vector<uint16_t> wb = ToBf16Bits(wf);
            const void* w = dt == DType::kBF16 ? static_cast<const void*>(wb.data() + mis)
                                               : static_cast<const void*>(wf.data() + mis);
            const std::vector<float> x = RandomNormal(static_cast<size_t>(T * ldx + mis), rng);
            const int64_t n0 = N > 2 ? 1 : 0, n1 = N;  // a row range not starting at 0
            std::vector<float> got(static_cast<size_t>(T * N), -7.0f), want(got.size(), -7.0f);
            cpu::MatMulRows(dt, w, K, x.data() + mis, ldx, T, got.data(), N, n0, n1);
            cpu::MatMulRowsScalar(dt, w, K, x.data() + mis, ldx, T, want.data(), N, n0, n1);
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t n = 0; n < N; ++n) {
                const size_t i = static_cast<size_t>(t * N + n);
                if (n < n0) {
                  ASSERT_EQ(got[i], -7.0f) << "row " << n << " outside [n0, n1) written";
                  continue;
                }
                ASSERT_NEAR(got[i], want[i], DotTol(wf.data() + mis + n * K, x.data() + mis + t * ldx, K))
                    << DTypeName(dt) << " K=" << K << " N=" << N << " T=" << T << " mis=" << mis;
              }
            }
          }
        }
      }
    }
  });
}

// Many activation rows take the cache-blocked GEMM (prefill, batched decode); one row takes the
// direct kernel. Each output must be bit-identical between the two, whatever the batch size and
// the blocking (the engine's batch invariance rests on it): shapes cross the column blocks (256),
// the row blocks (12 or 16 rows, and rows left over from tiles of 3 or 4), the token blocks (64)
// and the register tiles, with scalar column tails and a row range not starting at 0.
TEST(HighwayKernels, BlockedMatMulIsBitIdenticalToOneRowAtATime) {
  std::mt19937 rng(82);
  ForEachTarget([&](const char*) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int64_t K : {5, 16, 33, 300, 529}) {
        for (int64_t N : {4, 7, 21, 37}) {
          for (int64_t T : {8, 9, 13, 70, 133}) {
            const int64_t ldx = K + 1;
            std::vector<float> wf = RoundToBf16(RandomNormal(static_cast<size_t>(N * K), rng));
            const std::vector<uint16_t> wb = ToBf16Bits(wf);
            const void* w = dt == DType::kBF16 ? static_cast<const void*>(wb.data()) : static_cast<const void*>(wf.data());
            const std::vector<float> x = RandomNormal(static_cast<size_t>(T * ldx), rng);
            const int64_t n0 = N > 4 ? 3 : 0;
            std::vector<float> batched(static_cast<size_t>(T * N), -7.0f), solo(batched.size(), -7.0f);
            std::vector<float> want(batched.size(), -7.0f);
            cpu::MatMulRows(dt, w, K, x.data(), ldx, T, batched.data(), N, n0, N);
            for (int64_t t = 0; t < T; ++t) {
              cpu::MatMulRows(dt, w, K, x.data() + t * ldx, ldx, 1, solo.data() + t * N, N, n0, N);
            }
            cpu::MatMulRowsScalar(dt, w, K, x.data(), ldx, T, want.data(), N, n0, N);
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t n = 0; n < N; ++n) {
                const size_t i = static_cast<size_t>(t * N + n);
                if (n < n0) {
                  ASSERT_EQ(batched[i], -7.0f) << "row " << n << " outside [n0, n1) written";
                  continue;
                }
                ASSERT_EQ(std::memcmp(&batched[i], &solo[i], sizeof(float)), 0)
                    << DTypeName(dt) << " K=" << K << " N=" << N << " T=" << T << " t=" << t << " n=" << n << ": "
                    << batched[i] << " vs " << solo[i];
                ASSERT_NEAR(batched[i], want[i], DotTol(wf.data() + n * K, x.data() + t * ldx, K));
              }
            }
          }
        }
      }
    }
  });
}

TEST(HighwayKernels, DotAndAxpyOnEveryTarget) {
  std::mt19937 rng(81);
  ForEachTarget([&](const char*) {
    for (int64_t n = 0; n <= 70; ++n) {
      for (int64_t mis = 0; mis < 3; ++mis) {
        const std::vector<float> a = RandomNormal(static_cast<size_t>(n + mis), rng);
        const std::vector<float> bf = RoundToBf16(RandomNormal(static_cast<size_t>(n + mis), rng));
        const std::vector<uint16_t> bb = ToBf16Bits(bf);
        std::vector<uint8_t> b8(static_cast<size_t>(n + mis));
        std::vector<float> f8(b8.size());
        for (size_t i = 0; i < b8.size(); ++i) {
          b8[i] = static_cast<uint8_t>(rng());
          if ((b8[i] & 0x7F) == Fp8E4M3::kNaN) b8[i] &= 0xFE;  // every code but NaN
          f8[i] = Fp8E4M3::ToFloat(b8[i]);
        }
        const float* ap = a.data() + mis;
        struct Case {
          DType dt;
          const void* b;
          const float* values;
        };
        for (const Case& c : {Case{DType::kF32, bf.data() + mis, bf.data() + mis},
                              Case{DType::kBF16, bb.data() + mis, bf.data() + mis},
                              Case{DType::kF8E4M3, b8.data() + mis, f8.data() + mis}}) {
          ASSERT_NEAR(cpu::Dot(ap, c.dt, c.b, n), cpu::DotScalar(ap, c.dt, c.b, n), DotTol(ap, c.values, n))
              << "Dot " << DTypeName(c.dt) << " n=" << n << " mis=" << mis;
          // y += alpha x: one fused or two rounded operations per element.
          std::vector<float> y = RandomNormal(static_cast<size_t>(n + mis + 1), rng);
          const std::vector<float> y0 = y;
          cpu::Axpy(-1.25f, c.dt, c.b, y.data() + mis, n);
          for (int64_t i = 0; i < n; ++i) {
            const double want = y0[mis + i] + -1.25 * c.values[i];
            ASSERT_NEAR(y[mis + i], want, 2 * kU * (std::fabs(y0[mis + i]) + 1.25 * std::fabs(c.values[i])))
                << "Axpy " << DTypeName(c.dt) << " n=" << n << " i=" << i;
          }
          ASSERT_EQ(y[mis + n], y0[mis + n]) << "Axpy wrote past n";
          if (mis > 0) {
            ASSERT_EQ(y[mis - 1], y0[mis - 1]) << "Axpy wrote before its start";
          }
        }
      }
    }
  });
}

// ToF32: bf16 and f32 exactly, FP8 codes times the scale rounded once. AccumulateRows: bit for
// bit what Axpy row by row gives (attention's weighted values and MLA's query absorption ran as
// Axpy calls; the tiles keep each output's operations and their order), strided operands, and
// nothing written outside the outputs (the gaps between strided rows are compared too).
TEST(HighwayKernels, ToF32AndAccumulateRowsOnEveryTarget) {
  std::mt19937 rng(82);
  ForEachTarget([&](const char*) {
    for (int64_t n : {0, 1, 5, 17, 40}) {
      const std::vector<float> bf = RoundToBf16(RandomNormal(static_cast<size_t>(n), rng));
      const std::vector<uint16_t> bb = ToBf16Bits(bf);
      std::vector<uint8_t> b8(static_cast<size_t>(n));
      for (auto& b : b8) b = static_cast<uint8_t>(rng() & 0xFE);  // no NaN code (0x7F / 0xFF)
      std::vector<float> y(static_cast<size_t>(n) + 1, 7.0f);
      cpu::ToF32(1.0f, DType::kBF16, bb.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], bf[i]) << "bf16 n=" << n << " i=" << i;
      cpu::ToF32(1.0f, DType::kF32, bf.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], bf[i]) << "f32 n=" << n << " i=" << i;
      cpu::ToF32(0.37f, DType::kF8E4M3, b8.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.37f * Fp8E4M3::ToFloat(b8[i])) << "fp8 n=" << n << " i=" << i;
      ASSERT_EQ(y[n], 7.0f) << "ToF32 wrote past n";
    }
    // m outputs (1..9: whole and partial tiles of four), n rows, cols around the vector widths,
    // strided p, v and out; compared with Axpy row by row.
    for (int64_t m : {1, 3, 4, 9}) {
      for (int64_t n : {0, 1, 7, 33}) {
        for (int64_t cols : {5, 16, 40, 64, 72}) {
          const int64_t ldp = n + 3, ldv = cols + 2, ldo = cols + 1;
          const std::vector<float> p = RandomNormal(static_cast<size_t>(m * ldp), rng);
          const std::vector<float> vf = RoundToBf16(RandomNormal(static_cast<size_t>(std::max<int64_t>(n, 1) * ldv), rng));
          const std::vector<uint16_t> vb = ToBf16Bits(vf);
          const std::vector<float> out0 = RandomNormal(static_cast<size_t>(m * ldo), rng);
          for (DType dt : {DType::kF32, DType::kBF16}) {
            std::vector<float> got = out0, want = out0;
            const void* v = dt == DType::kF32 ? static_cast<const void*>(vf.data()) : vb.data();
            cpu::AccumulateRows(p.data(), ldp, m, dt, v, ldv, n, cols, got.data(), ldo);
            for (int64_t j = 0; j < n; ++j) {
              for (int64_t i = 0; i < m; ++i) {
                cpu::Axpy(p[i * ldp + j], dt, static_cast<const uint8_t*>(v) + j * ldv * DTypeSize(dt),
                          want.data() + i * ldo, cols);
              }
            }
            for (size_t k = 0; k < got.size(); ++k) {
              ASSERT_EQ(got[k], want[k]) << DTypeName(dt) << " m=" << m << " n=" << n << " cols=" << cols << " at " << k;
            }
          }
        }
      }
    }
  });
}

// Attention's softmax against a float64 one over the same float32 scaled values and differences:
// each weight within 8 float32 ulps relative (Highway's exp is within 1 ulp, the inverse of the
// float64 sum and the product each add half of one) plus 2 FLT_MIN absolute (results below
// FLT_MIN may be flushed); positions of -inf get exactly 0; the same values anywhere in memory
// give the same floats; one NaN makes every weight NaN, as the scalar softmax does.
TEST(HighwayKernels, SoftmaxOnEveryTarget) {
  std::mt19937 rng(83);
  ForEachTarget([&](const char*) {
    for (int64_t n : {1, 2, 5, 15, 16, 17, 31, 33, 40, 71, 1000}) {
      for (float spread : {1.0f, 40.0f}) {
        std::vector<float> x = RandomNormal(static_cast<size_t>(n), rng);
        for (float& v : x) v *= spread;
        if (n > 3) x[2] = -std::numeric_limits<float>::infinity();
        const float scale = 0.0883883f;
        std::vector<double> want(static_cast<size_t>(n));
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i] * scale);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += want[i] = std::exp(static_cast<double>(x[i] * scale - mx));
        for (double& w : want) w /= sum;
        for (size_t offset : {0, 1, 3}) {  // misaligned starts; a guard after the end
          std::vector<float> buf(offset + static_cast<size_t>(n) + 1, 5.0f);
          std::copy(x.begin(), x.end(), buf.begin() + static_cast<ptrdiff_t>(offset));
          cpu::SoftmaxScaled(buf.data() + offset, n, scale);
          ASSERT_EQ(buf.back(), 5.0f) << "wrote past n=" << n;
          for (int64_t i = 0; i < n; ++i) {
            const double got = buf[offset + static_cast<size_t>(i)];
            const double tol = 8 * std::numeric_limits<float>::epsilon() * want[i] + 2 * std::numeric_limits<float>::min();
            ASSERT_NEAR(got, want[i], tol) << "n=" << n << " spread=" << spread << " i=" << i;
            if (n > 3 && i == 2) {
              ASSERT_EQ(got, 0.0) << "a -inf score weighs 0";
            }
          }
          if (offset > 0) {
            std::vector<float> first(x);
            cpu::SoftmaxScaled(first.data(), n, scale);
            ASSERT_EQ(0, std::memcmp(first.data(), buf.data() + offset, static_cast<size_t>(n) * sizeof(float)))
                << "where the scores lie changed the weights, n=" << n;
          }
        }
        for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
          std::vector<float> y(x);
          y[static_cast<size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
          cpu::SoftmaxScaled(y.data(), n, scale);
          for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(y[i])) << "n=" << n << " NaN at " << at << " i=" << i;
        }
      }
    }
  });
}

// A host-memory Weight over a copy of m's codes placed `code_offset` bytes past an aligned start
// (the kernels read unaligned rows), as the CPU backend's PrepareWeight would view them.
struct HostWeight {
  std::vector<uint8_t> codes;
  Weight w;
};
HostWeight ViewOf(const HostMatrix& m, size_t code_offset) {
  HostWeight h;
  const StoredMatrix& s = m.stored;
  h.codes.assign(s.codes.bytes + code_offset, 0);
  std::memcpy(h.codes.data() + code_offset, s.codes.data, s.codes.bytes);
  h.w.format = s.format;
  h.w.quantized = s.scales.data != nullptr;
  h.w.rows = s.rows;
  h.w.cols = s.cols;
  h.w.params = s.params;
  const int64_t shape[2] = {s.codes.shape[0], s.codes.shape[1]};
  h.w.data = Tensor(nullptr, h.codes.data() + code_offset, s.codes.dtype, shape, 2);
  if (s.scales.data != nullptr) {
    const int64_t sshape[2] = {s.scales.shape[0], s.scales.shape[1]};
    h.w.scales = Tensor(nullptr, const_cast<uint8_t*>(s.scales.data), s.scales.dtype, sshape, 2);
  }
  return h;
}

// MatMulWeightRows after PrepareActivations, for every built-in format (dense, FP8 blocks with
// odd and partial blocks, INT4 g32 / g128), T = 1 .. 5 (decode path: codes decoded in
// registers) and 7 (blocked path), split into row ranges as the thread pool splits them,
// against the format's dequantize_row reference.
TEST(HighwayKernels, MatMulWeightRowsOnEveryTarget) {
  std::mt19937 rng(82);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t k = 1; k <= 35; k += 2) shapes.push_back({k % 7 + 1, k});
  for (auto s : std::vector<std::pair<int64_t, int64_t>>{{6, 64}, {3, 96}, {9, 128}, {2, 256}, {5, 100}}) shapes.push_back(s);
  ForEachTarget([&](const char*) {
    for (const auto& [rows, cols] : shapes) {
      for (const FormatCase& fc : FormatCases(cols)) {
        const HostMatrix m = MakeHostMatrix(fc.format, rows, cols, fc.params, rng);
        const size_t elem = DTypeSize(m.stored.codes.dtype);
        const HostWeight hw = ViewOf(m, (rows + cols) % 2 == 0 ? elem : 0);
        for (int64_t T : {1, 2, 3, 4, 5, 7}) {
          const int64_t ldx = cols + 1;
          const std::vector<float> xs = RandomNormal(static_cast<size_t>(T * ldx + 1), rng);
          const float* x = xs.data() + 1;  // misaligned
          cpu::CacheLineVector<float> scratch;
          std::vector<float> got(static_cast<size_t>(T * rows), -7.0f);
          int64_t ld = 0;
          const float* xp = cpu::PrepareActivations(hw.w, x, ldx, T, scratch, &ld);
          const int64_t mid = rows / 2 + (rows > 2 ? 1 : 0);
          cpu::MatMulWeightRows(hw.w, xp, ld, T, got.data(), rows, 0, mid);
          cpu::MatMulWeightRows(hw.w, xp, ld, T, got.data(), rows, mid, rows);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < rows; ++n) {
              double want = 0, mag = 0;
              for (int64_t k = 0; k < cols; ++k) {
                const double p = static_cast<double>(m.dense[n * cols + k]) * x[t * ldx + k];
                want += p;
                mag += std::fabs(p);
              }
              // As matmul_test.cc: (K + 8) u of the magnitude.
              ASSERT_NEAR(got[t * rows + n], want, (cols + 8) * kU * mag)
                  << fc.name << " " << rows << "x" << cols << " T=" << T << " row " << n;
            }
          }
        }
      }
    }
  });
}

// Every format's product is bit-identical whatever the number of activation rows: many rows take
// the blocked paths (dense GEMM; quantized panels of raw codes on 32-register targets), one row
// the decode path (2-4 rows: INT4 decodes each code once for all of them), and the engine's
// batch invariance rests on their equality. Shapes cross the column blocks (256 columns, whole
// scale blocks), the 16-row blocks with rows left over, the 64-row token blocks and odd register
// tiles.
TEST(HighwayKernels, MatMulWeightRowsIsBitIdenticalAcrossBatchSizes) {
  std::mt19937 rng(83);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{21, 300}, {37, 544}, {9, 640}, {18, 1024}, {20, 2080}};
  ForEachTarget([&](const char*) {
    for (const auto& [rows, cols] : shapes) {
      for (const FormatCase& fc : FormatCases(cols)) {
        const HostMatrix m = MakeHostMatrix(fc.format, rows, cols, fc.params, rng);
        const HostWeight hw = ViewOf(m, 0);
        for (int64_t T : {2, 3, 4, 5, 8, 13, 70, 133}) {
          const int64_t ldx = cols + 1;
          const std::vector<float> xs = RandomNormal(static_cast<size_t>(T * ldx), rng);
          cpu::CacheLineVector<float> scratch;
          std::vector<float> batched(static_cast<size_t>(T * rows)), solo(batched.size());
          int64_t ld = 0;
          const float* xp = cpu::PrepareActivations(hw.w, xs.data(), ldx, T, scratch, &ld);
          cpu::MatMulWeightRows(hw.w, xp, ld, T, batched.data(), rows, 0, rows);
          for (int64_t t = 0; t < T; ++t) {
            cpu::CacheLineVector<float> one_scratch;
            int64_t ld1 = 0;
            const float* x1 = cpu::PrepareActivations(hw.w, xs.data() + t * ldx, ldx, 1, one_scratch, &ld1);
            cpu::MatMulWeightRows(hw.w, x1, ld1, 1, solo.data() + t * rows, rows, 0, rows);
          }
          for (size_t i = 0; i < batched.size(); ++i) {
            ASSERT_EQ(std::memcmp(&batched[i], &solo[i], sizeof(float)), 0)
                << fc.name << " " << rows << "x" << cols << " T=" << T << " token " << i / rows << " row "
                << i % rows << ": " << batched[i] << " vs " << solo[i];
          }
        }
      }
    }
  });
}

// A block scale that is not finite (a corrupt checkpoint) makes its row NaN at every batch size
// and leaves the other rows alone: the quantized paths sum 0 x each scale into a row's result
// (the general loop's empty scalar tail), which the decode path, the tiled rows and the blocked
// panels each compute their own way.
TEST(HighwayKernels, QuantizedRowsWithANonFiniteScaleAreNaNAtEveryBatchSize) {
  std::mt19937 rng(84);
  const int64_t rows = 21, cols = 512;
  ForEachTarget([&](const char*) {
    for (const FormatCase& fc : FormatCases(cols)) {
      if (fc.format != kWeightInt4Group && fc.format != kWeightFp8Block) continue;
      const HostMatrix m = MakeHostMatrix(fc.format, rows, cols, fc.params, rng);
      HostWeight hw = ViewOf(m, 0);
      const StoredMatrix& st = m.stored;
      std::vector<uint8_t> scales(st.scales.bytes);
      std::memcpy(scales.data(), st.scales.data, scales.size());
      const int64_t sshape[2] = {st.scales.shape[0], st.scales.shape[1]};
      hw.w.scales = Tensor(nullptr, scales.data(), st.scales.dtype, sshape, 2);
      // Row 5's last scale +inf, row 14's first NaN (FP8: the block rows holding them).
      const int64_t nb_cols = st.scales.shape[1];
      const bool int4 = fc.format == kWeightInt4Group;
      const int64_t r_inf = int4 ? 5 : 5 / fc.params.block_rows, r_nan = int4 ? 14 : 14 / fc.params.block_rows;
      auto set = [&](int64_t r, int64_t b, float v) {
        if (int4) {
          reinterpret_cast<uint16_t*>(scales.data())[r * nb_cols + b] = F32ToBf16(v);
        } else {
          reinterpret_cast<float*>(scales.data())[r * nb_cols + b] = v;
        }
      };
      set(r_inf, nb_cols - 1, std::numeric_limits<float>::infinity());
      set(r_nan, 0, std::numeric_limits<float>::quiet_NaN());
      auto poisoned = [&](int64_t n) {
        const int64_t br = int4 ? n : n / fc.params.block_rows;
        return br == r_inf || br == r_nan;
      };
      for (int64_t T : {1, 2, 3, 4, 8, 70}) {
        const int64_t ldx = cols + 3;
        const std::vector<float> xs = RandomNormal(static_cast<size_t>(T * ldx), rng);
        cpu::CacheLineVector<float> scratch;
        std::vector<float> got(static_cast<size_t>(T * rows));
        int64_t ld = 0;
        const float* xp = cpu::PrepareActivations(hw.w, xs.data(), ldx, T, scratch, &ld);
        cpu::MatMulWeightRows(hw.w, xp, ld, T, got.data(), rows, 0, rows);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t n = 0; n < rows; ++n) {
            const float v = got[t * rows + n];
            ASSERT_EQ(std::isnan(v), poisoned(n)) << fc.name << " T=" << T << " token " << t << " row " << n << ": " << v;
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace llmrt::conformance
