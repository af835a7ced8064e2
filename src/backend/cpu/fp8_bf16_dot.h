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
// low byte of each bf16, the sign bit ORed in, and two more byte permutes to interleave the
// halves into 32-bit pairs: 2.5 instructions per 32 codes, where the exact path spends 10 (two
// float16 conversions and two float32 FMAs among them) on the same 32 products. The NaN codes
// (0x7F, 0xFF) become a quiet bf16 NaN, the value Fp8E4M3::ToFloat gives them.
//
// The arithmetic. For output (weight row n, activation row t), with the activation row rounded to
// bfloat16 once per call as for BF16 weights (RoundActivationsBf16) and s(n, b) the float32 scale
// of n's block-row in column block b:
//
//   - vdpbf16ps paths (the AVX-512 loop and its exact scalar emulation, bit-identical): 16
//     float32 lanes A start at +0. For each column block b (block_cols columns, a multiple of 32;
//     the last one may be short), in order: 16 lanes P start at +0 and take the block's 32-column
//     sub-blocks as in bf16_dot.h (lane i: the odd pair, then the even pair, each a fused
//     multiply-add with denormals flushed; weights past the row's end read as +0); then
//     A[i] = fma(P[i], s(n, b), A[i]), an ordinary float32 fused multiply-add (IEEE, no flushing).
//     The result is the fixed tree of bf16_dot.h over A.
//   - AMX (Bf16Isa::kAmx, where the CPU has it; the best path there, for every batch size): per
//     column block, `tdpbf16ps` adds the block's 32-column tiles in column order into a float32
//     accumulator that starts at zero (the tiles' own internal summation, as for BF16 weights);
//     then acc = fma(block sum, s(n, b), acc), blocks in order, starting at +0.
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

// Whether an FP8 weight runs under the BF16 policy: block-scaled with whole 32-column sub-blocks
// per scale block (block_cols a multiple of 32: the checkpoints' 128). Others keep the exact path
// under every policy.
bool Fp8SupportsBf16(const Weight& w);
bool Fp8SupportsBf16(const Fp8BlockMatrix& w);

// The code paths are Bf16Isa's. kAvx512Bf16 and kAmx need AVX512_VBMI as well (the code
// conversion); where they are missing the FP8 kernels take the scalar emulation, whose bits are
// the kAvx512Bf16 path's.
bool Fp8Bf16IsaAvailable(Bf16Isa isa);
// The fastest available path (chosen once per process): kAmx wherever the BF16 weights take it,
// so that one process rounds and sums both formats' matmuls the same way.
Bf16Isa BestFp8Bf16Isa();

// For n in [n0, n1), t in [0, x.rows): out[t * ldo + n] = the dot of weight row n (its exact
// values times their block scales) with activation row t, computed as above on `isa`.
// REQUIRES: Fp8SupportsBf16(w), x.cols == w.cols, Fp8Bf16IsaAvailable(isa); for kAmx, x carries
// the tiles' layout (`pairs`, which RoundActivationsBf16 fills wherever AMX is available).
void Fp8MatMulRows(Bf16Isa isa, const Fp8BlockMatrix& w, const Bf16Activations& x, float* out, int64_t ldo,
                   int64_t n0, int64_t n1);
// The same on BestFp8Bf16Isa().
void Fp8MatMulRowsBest(const Fp8BlockMatrix& w, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                       int64_t n1);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_FP8_BF16_DOT_H_
