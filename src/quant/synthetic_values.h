// The values of synthetic weights (llm_runtime_create_synthetic), element by element: the one
// definition the host generator (src/quant/synthetic_weights.cc) and the CUDA kernel
// (kernels/synthetic.cu) both compile (src/util/host_device.h), so a matrix made on the device
// holds exactly the bytes the host would have made.
//
// Counter-based: element i (row-major index in the FULL matrix) of the tensor with stream s is a
// function of (s, i) alone, and block / group scale k of (s, k) alone, with k the index of the
// block or group in the full matrix's scale grid. A part of a matrix (a tensor-parallel rank's
// slice) is therefore made by evaluating the same functions at the part's indices; no sequential
// state, no dependence on thread counts.
//
// Float arithmetic is written so that nvcc's FMA contraction cannot change a bit: every product
// that feeds an addition is exact (an integer below 2^24 times a power of two), so a fused
// multiply-add rounds once to what the separate operations give.
#ifndef LLMRT_QUANT_SYNTHETIC_VALUES_H_
#define LLMRT_QUANT_SYNTHETIC_VALUES_H_

#include <cstdint>

#include "src/quant/fp8.h"
#include "src/util/bf16.h"
#include "src/util/host_device.h"

namespace llmrt::synthetic {

// Standard deviation of synthetic matrix entries (the usual initializer_range of these models).
inline constexpr float kStd = 0.02f;
// Half-width of a uniform distribution of standard deviation kStd: the float kStd * sqrt(3.0f)
// (a literal: std::sqrt is not constexpr; tests/unit/synthetic_weights_test.cc checks it).
inline constexpr float kHalfWidth = 0x1.1bc77ap-5f;
// FP8 block scales are kFp8ScaleUnit (= kHalfWidth / 448 in float) within +-25%: codes spread
// over the whole e4m3 range come back to the distribution of the BF16 values.
inline constexpr float kFp8ScaleUnit = 0x1.4451b0p-14f;
// INT4 group scales are kInt4ScaleUnit (= kStd / sqrt(56.0f / 3.0f) in float, the deviation of
// q uniform in [-7, 7] being sqrt(56 / 3)) within +-25%.
inline constexpr float kInt4ScaleUnit = 0x1.2f5f6cp-8f;

// SplitMix64's finalizer: a bijection of 64-bit words whose outputs pass BigCrush for
// consecutive inputs, so hashing (stream + index) gives independent-looking values per element
// without any sequential state (threads, slices and devices need none).
LLMRT_HD inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The hash of element i of a stream.
LLMRT_HD inline uint64_t Hash(uint64_t stream, uint64_t i) { return Mix(stream + i * 0x9e3779b97f4a7c15ull); }

// Element i of a stream: uniform in [-1, 1) (24 bits; the product and the difference are exact).
LLMRT_HD inline float Uniform(uint64_t stream, uint64_t i) {
  return static_cast<float>(Hash(stream, i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// The stream of a matrix's scales, derived from the stream of its codes.
LLMRT_HD inline uint64_t ScaleStream(uint64_t stream) { return Mix(stream ^ 0x5ca1e5ull); }

// BF16 element i: uniform, standard deviation kStd.
LLMRT_HD inline uint16_t Bf16Element(uint64_t stream, uint64_t i) {
  return F32ToBf16(kHalfWidth * Uniform(stream, i));
}

// FP8 element i: the e4m3 code of a uniform value over [-448, 448] (never NaN: FromFloat
// saturates and its input is finite).
LLMRT_HD inline uint8_t Fp8Code(uint64_t stream, uint64_t i) {
  return Fp8E4M3::FromFloat(Fp8E4M3::kMax * Uniform(stream, i));
}

// FP8 block scale k (row-major in the full matrix's [ceil(rows / block_rows),
// ceil(cols / block_cols)] grid); `scale_stream` is ScaleStream(stream).
LLMRT_HD inline float Fp8Scale(uint64_t scale_stream, uint64_t k) {
  return kFp8ScaleUnit * (1.0f + 0.25f * Uniform(scale_stream, k));
}

// INT4 code of element i: q uniform in [-7, 7], stored q + 8 (a nibble).
LLMRT_HD inline uint8_t Int4Nibble(uint64_t stream, uint64_t i) {
  const uint32_t high = static_cast<uint32_t>(Hash(stream, i) >> 32);
  return static_cast<uint8_t>(high % 15u + 1u);  // (q + 8) with q = high % 15 - 7
}

// The packed byte of elements i and i + 1 (i even: the even column in the low nibble).
LLMRT_HD inline uint8_t Int4Byte(uint64_t stream, uint64_t i) {
  return static_cast<uint8_t>(Int4Nibble(stream, i) | (Int4Nibble(stream, i + 1) << 4));
}

// INT4 group scale k (row-major in the full matrix's [rows, cols / group] grid), bfloat16 bits,
// positive; `scale_stream` is ScaleStream(stream).
LLMRT_HD inline uint16_t Int4Scale(uint64_t scale_stream, uint64_t k) {
  return F32ToBf16(kInt4ScaleUnit * (1.0f + 0.25f * Uniform(scale_stream, k)));
}

}  // namespace llmrt::synthetic

#endif  // LLMRT_QUANT_SYNTHETIC_VALUES_H_
