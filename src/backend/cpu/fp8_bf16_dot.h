// FP8 e4m3 block-scaled weights under the BF16 activation policy: bf16 dot products on the
// codes as they are stored, the weights kept exact.
//
// Every e4m3fn value is a bfloat16 value: 3 mantissa bits fit in bf16's 7, and the exponents
// 2^-9 (the smallest subnormal code) .. 2^8 (448) lie well inside bf16's normal range. So each
// code becomes the bf16 of its own value exactly, with no power-of-two offset to fold anywhere:
// the products and their float32 sums have the magnitudes of an ordinary BF16 matmul on
// weights up to 448, far from float32's overflow and underflow (a product underflows only if
// the activation is below 2^-117, a bf16 denormal that every bf16 path reads as zero anyway).
// In particular the subnormal codes (exponent field 0: m * 2^-9, which real checkpoints hold,
// about one row-block in a hundred of Gaussian weights) become normal bf16 values, so neither
// `vdpbf16ps` nor the AMX tiles, which read denormal inputs as zero, lose them. (Placing the
// code's bits into a bf16 with shifts instead would make every value 2^120 smaller: the
// subnormal codes would be bf16 denormals, read as zero, and small products would fall into
// float32's denormals, flushed.) The conversion is a table lookup, 128 entries for the 7
// magnitude bits in two registers: `vpermi2b` (AVX512_VBMI) per 64 codes for the high and the
// low byte of each bf16, the sign bit ORed in, and two byte unpacks to interleave the halves into
// 16-bit values: 2.5 instructions per 32 codes, where the exact path spends 10 (two float16
// conversions and two float32 FMAs among them) on the same 32 products. The NaN codes (0x7F,
// 0xFF) become a quiet bf16 NaN, the value Fp8E4M3::ToFloat gives them.
//
// Column order. The unpacks interleave within 128-bit lanes, so the 64 values of a 64-column chunk
// come out as two vectors of 32 holding the chunk's columns
//   first:  0-7, 16-23, 32-39, 48-55        second:  8-15, 24-31, 40-47, 56-63
// (pairs of adjacent columns stay together). Rather than spend two more instructions per 64 codes
// restoring the natural order, the activations are stored in this order once per call
// (Fp8Bf16Activations), and every path, the tiles included, takes the columns in it. Scale blocks
// are whole chunks (block_cols a multiple of 64: the checkpoints' 128).
//
// The arithmetic. For output (weight row n, activation row t), with the activation row rounded to
// bfloat16 once per call as for BF16 weights and s(n, b) the float32 scale of n's block-row in
// column block b:
//
//   - vdpbf16ps paths (the AVX-512 loop and its exact scalar emulation, bit-identical): 16
//     float32 lanes A start at +0. For each column block b, in order: 16 lanes P start at +0 and
//     take the block's chunks in order, each as two steps of 32 columns (the first vector, then
//     the second): lane i adds the step's pair (2i + 1, 2i) as one `vdpbf16ps` does (bf16_dot.h:
//     the odd element, then the even one, each a fused multiply-add with denormals flushed;
//     weights past the row's end read as +0, activations there are +0). Then
//     A[i] = fma(P[i], s(n, b), A[i]), an ordinary float32 fused multiply-add (IEEE, no
//     flushing). The result is the fixed tree of bf16_dot.h over A.
//   - AMX (Bf16Isa::kAmx, where the CPU has it; not the path chosen, see BestFp8Bf16Isa): per
//     column block, `tdpbf16ps` adds the block's 32-column steps in the same order into a float32
//     accumulator that starts at zero (the tiles' own internal summation, as for BF16 weights);
//     then acc = fma(block sum, s(n, b), acc), blocks in order, starting at +0.
//
// Decode (fewer than 8 activation rows) runs a GEMV that converts codes in registers; batches run
// a GEMM that converts a panel of codes once for 64 activation rows, with the GEMV's bits.
//
// On either, a row's result depends only on its weight row and activation row: never on the
// other rows of the call, the batch size or the thread split. Both stay within the float32
// dot-product bound of the float64 product of the exact weights with the rounded activations
// (tested).
#ifndef LLMRT_BACKEND_CPU_FP8_BF16_DOT_H_
#define LLMRT_BACKEND_CPU_FP8_BF16_DOT_H_

#include <cstdint>

#include "src/backend/backend.h"
#include "src/backend/cpu/bf16_dot.h"

namespace llmrt::cpu {

// An FP8 block-scaled matrix as these kernels read it (host memory).
struct Fp8BlockMatrix {
  const uint8_t* codes = nullptr;  // [rows, cols] e4m3fn, row-major
  const float* scales = nullptr;   // [ceil(rows / block_rows), ceil(cols / block_cols)]: w = value(q) * scale
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 0, block_cols = 0;
};
// The view of a prepared kWeightFp8Block weight. REQUIRES: w.format == kWeightFp8Block.
Fp8BlockMatrix Fp8BlockOf(const Weight& w);

// The bf16 bits of an e4m3fn code's value: exact, never a bf16 denormal (NaN codes: a quiet NaN
// of the code's sign).
uint16_t Fp8ToBf16Bits(uint8_t code);

// Whether an FP8 weight runs under the BF16 policy: block-scaled with whole 64-column chunks per
// scale block (block_cols a multiple of 64). Others keep the exact path under every policy.
bool Fp8SupportsBf16(const Weight& w);
bool Fp8SupportsBf16(const Fp8BlockMatrix& w);

// Activation rows rounded to bfloat16 (as RoundActivationsBf16 rounds them) in the kernels'
// column order: [rows, padded], padded = cols rounded up to a multiple of 64, zeros past cols,
// each 64-column chunk as its columns 0-7, 16-23, 32-39, 48-55, 8-15, 24-31, 40-47, 56-63.
struct Fp8Bf16Activations {
  static constexpr int64_t kChunk = 64;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t padded = 0;
  CacheLineVector<uint16_t> values;
  // The AMX tiles' layout of `values` (PackBf16Pairs) when asked for; else empty.
  CacheLineVector<uint16_t> pairs;
  // The FP8 activation policy (QuantizeActivationsFp8): `values` hold e4m3 values, and
  // scales[t * CeilDiv(cols, scale_cols) + b] is row t's scale for columns
  // [b * scale_cols, (b + 1) * scale_cols). Empty under the BF16 policy (every scale 1).
  int64_t scale_cols = 0;
  CacheLineVector<float> scales;
};
// The position in Fp8Bf16Activations::values (within its row) of column `col`.
int64_t Fp8Bf16Position(int64_t col);
// Rounds rows [0, t) of x (row stride ldx, k columns) into *out; `tile_layout` also fills
// `pairs`, which the kAmx path reads.
void RoundActivationsFp8Bf16(const float* x, int64_t ldx, int64_t t, int64_t k, Fp8Bf16Activations* out,
                             bool tile_layout = false);

// The FP8 activation policy: rows [0, t) of x quantized per row and block of `block_cols`
// columns (the weight's column blocks) to e4m3: scale = amax / 448 over the block's values (1
// where that is zero or below float32's normal range), codes Fp8E4M3::FromFloat(x * (1 / scale))
// (nearest even, saturating at 448; a NaN or infinite input makes its block's outputs NaN).
// `values` hold the codes' values as bf16 (exact: fp8_bf16_dot.h above) in the kernels' column
// order, `scales` the scales. The CUDA backend's quantization kernel computes the same codes and
// scales bit for bit. REQUIRES: block_cols a positive multiple of 64.
void QuantizeActivationsFp8(const float* x, int64_t ldx, int64_t t, int64_t k, int64_t block_cols,
                            Fp8Bf16Activations* out, bool tile_layout = false);

// The code paths are Bf16Isa's. kAvx512Bf16 and kAmx need AVX512_VBMI as well (the code
// conversion); where they are missing the FP8 kernels take the scalar emulation, whose bits are
// the kAvx512Bf16 path's.
bool Fp8Bf16IsaAvailable(Bf16Isa isa);
// The path FP8 weights take (chosen once per process): kAvx512Bf16 wherever it is available, AMX
// CPUs included, else kScalar. Not the tiles, although BF16 weights take them there: a path must
// serve every batch size (a row's bits may not depend on its batch), and for one activation row
// the tiles cost more per weight byte than the GEMV (the codes are converted, stored and loaded
// back as tiles: about 12 GB/s of codes per core in cache against the GEMV's 16, with a core's
// share of memory bandwidth about 10), so FP8 decode on tiles reads weights at 0.8-0.95x the
// exact path's rate where the GEMV reaches 1.2-1.4x (docs/cpu_performance.md). The tiles remain
// available (kAmx) for the tests and the microbenchmark; they are 2.5-4x the GEMM for batches.
Bf16Isa BestFp8Bf16Isa();

// For n in [n0, n1), t in [0, x.rows): out[t * ldo + n] = the dot of weight row n (its exact
// values times their block scales) with activation row t, computed as above on `isa`. With
// activation scales (the FP8 policy) every block's fold becomes A = fma(P, s(n, b) * sa(t, b), A),
// the two scales multiplied first (one float32 rounding): the products of codes are exact
// (4 x 4 significant bits), so a block sum P is the FP8 GEMM's block sum up to its order.
// REQUIRES: Fp8SupportsBf16(w), x.cols == w.cols, Fp8Bf16IsaAvailable(isa); x.scales empty or
// x.scale_cols == w.block_cols; for kAmx, x carries the tiles' layout (`pairs`, which
// RoundActivationsFp8Bf16 fills wherever AMX is available).
void Fp8MatMulRows(Bf16Isa isa, const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo,
                   int64_t n0, int64_t n1);
// The same on BestFp8Bf16Isa().
void Fp8MatMulRowsBest(const Fp8BlockMatrix& w, const Fp8Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                       int64_t n1);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_FP8_BF16_DOT_H_
