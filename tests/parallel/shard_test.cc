// Sharding at the weight-format level: every rank's slice of a stored matrix, in every built-in
// format, dequantizes to exactly the corresponding part of the whole matrix (so the slices
// reassemble to it bit for bit); row slices are views of the stored bytes, column slices copies;
// bounds that straddle an FP8 block or an INT4 group are refused naming them.
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/quant/weight_format.h"

namespace llmrt {
namespace {

// A [rows, cols] matrix of `format` with random codes and scales.
StoredMatrix RandomMatrix(WeightFormatId format, int64_t rows, int64_t cols, const WeightParams& p, uint32_t seed) {
  std::mt19937 rng(seed);
  StoredMatrix m;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  m.params = p;
  auto fill = [&](HostArray& a, uint8_t mask) {
    auto* d = const_cast<uint8_t*>(a.data);
    for (size_t i = 0; i < a.bytes; ++i) d[i] = static_cast<uint8_t>(rng()) & mask;
  };
  if (format == kWeightF32) {
    m.codes = NewHostArray(DType::kF32, {rows, cols});
    auto* f = reinterpret_cast<float*>(const_cast<uint8_t*>(m.codes.data));
    for (int64_t i = 0; i < rows * cols; ++i) f[i] = std::uniform_real_distribution<float>(-2, 2)(rng);
  } else if (format == kWeightBf16) {
    m.codes = NewHostArray(DType::kBF16, {rows, cols});
    fill(m.codes, 0xBF);  // keeps exponents finite
  } else if (format == kWeightFp8Block) {
    m.codes = NewHostArray(DType::kF8E4M3, {rows, cols});
    fill(m.codes, 0xF7);  // no 0x7F / 0xFF (NaN)
    const int64_t br = (rows + p.block_rows - 1) / p.block_rows, bc = (cols + p.block_cols - 1) / p.block_cols;
    m.scales = NewHostArray(DType::kF32, {br, bc});
    auto* s = reinterpret_cast<float*>(const_cast<uint8_t*>(m.scales.data));
    for (int64_t i = 0; i < br * bc; ++i) s[i] = std::uniform_real_distribution<float>(1e-3f, 1.0f)(rng);
  } else {
    m.codes = NewHostArray(DType::kU8, {rows, cols / 2});
    fill(m.codes, 0xFF);
    m.scales = NewHostArray(DType::kBF16, {rows, cols / p.group});
    auto* s = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(m.scales.data));
    for (int64_t i = 0; i < rows * (cols / p.group); ++i) s[i] = static_cast<uint16_t>(0x3C00 + (rng() & 0x3FF));
  }
  return m;
}

std::vector<float> Row(const StoredMatrix& m, int64_t r) {
  std::vector<float> out(static_cast<size_t>(m.cols));
  DequantizeRowReference(m.format, MatrixBytes{m.codes.data, m.scales.data, m.rows, m.cols, m.params}, r, out.data());
  return out;
}

struct FormatCase {
  WeightFormatId format;
  WeightParams params;
  const char* name;
};

class ShardSlices : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ShardSlices, RowAndColumnSlicesReassembleBitForBit) {
  const FormatCase& fc = GetParam();
  const WeightFormatTraits& f = WeightFormatOf(fc.format);
  ASSERT_NE(f.slice, nullptr) << fc.name;
  const int64_t rows = 64, cols = 256;
  const StoredMatrix m = RandomMatrix(fc.format, rows, cols, fc.params, 7);
  for (int ranks : {1, 2, 4, 8}) {
    for (int r = 0; r < ranks; ++r) {
      // Column-parallel (rows) slice: a view of the stored bytes.
      const int64_t nr = rows / ranks, r0 = r * nr;
      auto rs = f.slice(m, r0, nr, 0, cols);
      ASSERT_TRUE(rs.ok()) << fc.name << " " << rs.status();
      EXPECT_EQ(rs->codes.keepalive, m.codes.keepalive) << "a row slice is a view";
      for (int64_t i = 0; i < nr; ++i) {
        const std::vector<float> a = Row(*rs, i), b = Row(m, r0 + i);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << fc.name << " rank " << r;
      }
      // Row-parallel (columns) slice: a copy of only this rank's columns.
      const int64_t nc = cols / ranks, c0 = r * nc;
      auto cs = f.slice(m, 0, rows, c0, nc);
      ASSERT_TRUE(cs.ok()) << fc.name << " " << cs.status();
      for (int64_t i = 0; i < rows; ++i) {
        const std::vector<float> a = Row(*cs, i), b = Row(m, i);
        ASSERT_EQ(std::memcmp(a.data(), b.data() + c0, static_cast<size_t>(nc) * sizeof(float)), 0)
            << fc.name << " rank " << r << " row " << i;
      }
    }
  }
}

// Column parallelism at the op level: the CPU backend's product with a rank's row slice equals
// the matching columns of the product with the whole matrix, bit for bit, in every format, for
// one activation row (decode) and for many (the blocked prefill path): each output element is
// summed in the same order whichever rows a kernel call covers. (Row-parallel partial sums are
// added across ranks afterwards, so they match only within float32 summation order.)
TEST_P(ShardSlices, ColumnParallelProductsEqualTheWholeProductsColumnsBitForBit) {
  const FormatCase& fc = GetParam();
  const WeightFormatTraits& f = WeightFormatOf(fc.format);
  const int64_t rows = 64, cols = 256;
  const StoredMatrix m = RandomMatrix(fc.format, rows, cols, fc.params, 8);
  CpuBackend be(BackendOptions{});
  auto whole = be.PrepareWeight(m);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::mt19937 rng(9);
  for (int64_t T : {1, 3, 19}) {
    auto x = be.Allocate(DType::kF32, {T, cols});
    auto full = be.Allocate(DType::kF32, {T, rows});
    ASSERT_TRUE(x.ok() && full.ok());
    for (int64_t i = 0; i < T * cols; ++i) x->data_as<float>()[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
    be.MatMul(*x, *whole, *full);
    ASSERT_TRUE(be.Synchronize().ok());
    for (int ranks : {2, 4, 8}) {
      const int64_t nr = rows / ranks;
      for (int r = 0; r < ranks; ++r) {
        auto slice = f.slice(m, r * nr, nr, 0, cols);
        ASSERT_TRUE(slice.ok()) << slice.status();
        auto w = be.PrepareWeight(*slice);
        auto part = be.Allocate(DType::kF32, {T, nr});
        ASSERT_TRUE(w.ok() && part.ok());
        be.MatMul(*x, *w, *part);
        ASSERT_TRUE(be.Synchronize().ok());
        for (int64_t t = 0; t < T; ++t) {
          ASSERT_EQ(std::memcmp(part->data_as<float>() + t * nr, full->data_as<float>() + t * rows + r * nr,
                                static_cast<size_t>(nr) * sizeof(float)),
                    0)
              << fc.name << " T=" << T << " rank " << r << " of " << ranks << " token " << t;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, ShardSlices,
    ::testing::Values(FormatCase{kWeightF32, {}, "f32"}, FormatCase{kWeightBf16, {}, "bf16"},
                      FormatCase{kWeightFp8Block, {8, 32, 0}, "fp8_8x32"},
                      FormatCase{kWeightInt4Group, {0, 0, 32}, "int4_g32"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ShardSlices, BoundsInsideABlockOrGroupAreRefusedNamingThem) {
  const StoredMatrix fp8 = RandomMatrix(kWeightFp8Block, 64, 256, {32, 128, 0}, 1);
  const WeightFormatTraits& f8 = WeightFormatOf(kWeightFp8Block);
  auto a = f8.slice(fp8, 16, 16, 0, 256);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("rows [16, 32) of 64 do not fall on FP8 blocks of 32"), std::string::npos)
      << a.status();
  auto b = f8.slice(fp8, 0, 64, 64, 64);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("columns [64, 128) of 256 do not fall on FP8 blocks of 128"), std::string::npos)
      << b.status();
  // The last block may be partial: a slice ending at the matrix's edge is fine.
  const StoredMatrix odd = RandomMatrix(kWeightFp8Block, 48, 256, {32, 128, 0}, 2);
  EXPECT_TRUE(f8.slice(odd, 32, 16, 0, 256).ok());
  const StoredMatrix int4 = RandomMatrix(kWeightInt4Group, 8, 256, {0, 0, 128}, 3);
  auto c = WeightFormatOf(kWeightInt4Group).slice(int4, 0, 8, 0, 64);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("do not fall on INT4 groups of 128"), std::string::npos) << c.status();
  // INT4 rows split freely (one scale row per matrix row).
  EXPECT_TRUE(WeightFormatOf(kWeightInt4Group).slice(int4, 3, 2, 0, 256).ok());
}

}  // namespace
}  // namespace llmrt
