// FP8 e4m3 conversion, exhaustively against ml_dtypes (tests/data/fp8_e4m3_table.bin, made by
// tools/make_fp8_table.py) and against an independent nearest-value search.
#include "src/quant/fp8.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt {
namespace {

struct Table {
  float decode[256];
  std::vector<uint8_t> encode;  // 2 * 65536 codes
};

Table Load() {
  Table t;
  std::ifstream in(std::string(LLMRT_TEST_DATA) + "/fp8_e4m3_table.bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(t.decode), sizeof(t.decode));
  t.encode.resize(2 * 65536);
  in.read(reinterpret_cast<char*>(t.encode.data()), static_cast<std::streamsize>(t.encode.size()));
  EXPECT_TRUE(in.good());
  return t;
}

TEST(Fp8E4M3, EveryCodeDecodesAsMlDtypes) {
  const Table t = Load();
  for (int c = 0; c < 256; ++c) {
    const float got = Fp8E4M3::ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(t.decode[c])) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(got, t.decode[c]) << c;
    }
  }
  EXPECT_EQ(Fp8E4M3::ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3::ToFloat(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4M3, EncodingMatchesMlDtypesOnEveryBf16PatternAndStickyNeighbour) {
  const Table t = Load();
  for (uint32_t pat = 0; pat < 65536; ++pat) {
    for (uint32_t lo = 0; lo < 2; ++lo) {
      const uint32_t bits = (pat << 16) | lo;
      float x;
      std::memcpy(&x, &bits, 4);
      const uint8_t want = t.encode[pat * 2 + lo];
      const uint8_t got = Fp8E4M3::FromFloat(x);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(Fp8E4M3::ToFloat(got))) << std::hex << bits;
        continue;
      }
      ASSERT_EQ(got, want) << std::hex << "input bits " << bits << " (" << x << ")";
    }
  }
}

// Independent reference: the nearest representable value, ties to the even code.
uint8_t Nearest(float x) {
  if (std::isnan(x)) return 0x7f;
  const double a = std::min<double>(std::fabs(x), 448.0);
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(Fp8E4M3::ToFloat(static_cast<uint8_t>(c)) - a);
    const double bd = std::fabs(Fp8E4M3::ToFloat(static_cast<uint8_t>(best)) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8E4M3, RoundTripsAndMatchesNearestSearchOnAStrideOfAllFloats) {
  for (int c = 0; c < 256; ++c) {
    const float v = Fp8E4M3::ToFloat(static_cast<uint8_t>(c));
    if (!std::isnan(v)) {
      EXPECT_EQ(Fp8E4M3::FromFloat(v), c) << c;
    }
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 65521) {  // a prime stride
    const uint32_t b = static_cast<uint32_t>(bits);
    float x;
    std::memcpy(&x, &b, 4);
    if (std::isnan(x)) continue;
    ASSERT_EQ(Fp8E4M3::FromFloat(x), Nearest(x)) << std::hex << b;
  }
  EXPECT_EQ(Fp8E4M3::FromFloat(1e9f), 0x7e);
  EXPECT_EQ(Fp8E4M3::FromFloat(-INFINITY), 0xfe);
}

}  // namespace
}  // namespace llmrt
