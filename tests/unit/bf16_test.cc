#include "src/util/bf16.h"

#include <cmath>
#include <cstring>

#include "gtest/gtest.h"

namespace llmrt {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Independent reference: pick the nearer of the two bf16 neighbours in double precision,
// ties to the even mantissa.
uint16_t ReferenceRound(float f) {
  const uint32_t b = Bits(f);
  const uint16_t lo = static_cast<uint16_t>(b >> 16);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double dlo = Bf16ToF32(lo), dhi = Bf16ToF32(hi), d = f;
  if (std::isinf(dhi) && !std::isinf(d)) {
    // Rounding up overflows to infinity exactly when f is at least halfway to 2^128.
    return (b & 0xffff) >= 0x8000 ? hi : lo;
  }
  const double el = std::fabs(d - dlo), eh = std::fabs(dhi - d);
  if (el < eh) return lo;
  if (eh < el) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16, EveryBf16ValueRoundTrips) {
  for (uint32_t v = 0; v < 65536; ++v) {
    const float f = Bf16ToF32(static_cast<uint16_t>(v));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(f)))) << v;
    } else {
      EXPECT_EQ(F32ToBf16(f), v) << v;
    }
  }
}

TEST(Bf16, RoundsToNearestEvenAgainstReference) {
  // Every bf16 value with all 65536 low-half patterns would be 2^32 cases; sample each
  // exponent/mantissa pair with the interesting low halves (ties, just below/above, extremes).
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff, 0x4000, 0xc000};
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t low : lows) {
      const uint32_t b = (hi << 16) | low;
      float f;
      std::memcpy(&f, &b, 4);
      if (std::isnan(f)) continue;
      ASSERT_EQ(F32ToBf16(f), ReferenceRound(f)) << std::hex << b;
    }
  }
}

TEST(Bf16, NanStaysNan) {
  const float nan = std::nanf("");
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(nan))));
  const uint32_t snan_bits = 0x7f800001;  // payload only in the low half
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(snan))));
}

}  // namespace
}  // namespace llmrt
