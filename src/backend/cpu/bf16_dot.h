// bf16 dot-product matmuls for BF16 weights (the BF16 activation policy).
//
// The exact path widens every bf16 weight to float32 and multiplies float32 activations with
// float32 FMAs: 16 products per instruction on AVX-512. Under the BF16 policy each activation
// row is rounded once per matmul to bfloat16 (round to nearest even, NaN kept, as torch's
// float -> bfloat16 cast), and pairs of bf16 activations meet pairs of bf16 weights in one
// `vdpbf16ps` (AVX512_BF16): 32 products per instruction, summed into float32, with the weights
// read in place (no widening). This is what BF16 GEMMs elsewhere compute (llama.cpp's BF16 CPU
// path, cuBLAS with bf16 inputs and float32 accumulation), up to the summation order. (Where the
// instruction issues only once per two cycles, as on the Sapphire Rapids cores this was measured
// on, the GEMM forms its exact steps with float32 FMAs instead; AMD's Zen 4 issues it once per
// cycle and keeps it: see Bf16Loop.) Where the CPU has
// AMX-BF16 tiles, they take every BF16 matmul instead, with their own summation (Bf16Isa::kAmx),
// and under the exact policy too, on float32 activations split into three bf16 parts
// (SplitActivationsBf16x3 below).
//
// What follows is the arithmetic of the vdpbf16ps paths.
//
// Which matmuls: every matmul whose weight is BF16 (dense linears, lm_head, the MoE's BF16
// experts). Not the MoE router (its logits pick the experts: they stay float32 however the
// policy is set), not F32 weights, not INT4 weights (those keep their own paths). FP8 block
// weights follow the same policy with their own kernels (fp8_bf16_dot.h).
//
// The arithmetic, identical on each of these paths (the instruction, the portable scalar emulation,
// the decode GEMV and the prefill GEMM), so that results are bit-identical everywhere and a row's
// result never depends on the other rows of the call or on the thread split:
//   - the columns are taken in blocks of 32 (the row zero-padded to a multiple of 32: weights
//     past the row's end read as +0, activations are stored with zeros there);
//   - one output (weight row n, activation row t) owns 16 float32 lanes, starting at +0; block
//     c adds into lane i, as `vdpbf16ps` does (Intel SDM, VDPBF16PS pseudo-code):
//       lane[i] = fma(x[32c + 2i + 1], w[32c + 2i + 1], lane[i])   then
//       lane[i] = fma(x[32c + 2i],     w[32c + 2i],     lane[i])
//     each a float32 fused multiply-add rounded to nearest even, with denormal inputs (the bf16
//     values and the lane) read as zero and a denormal result flushed to zero, whatever MXCSR
//     says;
//   - the 16 lanes are added in a fixed tree: l[i] + l[i + 8], then + [i + 4], + [i + 2],
//     + [i + 1] (ordinary float32 adds).
#ifndef LLMRT_BACKEND_CPU_BF16_DOT_H_
#define LLMRT_BACKEND_CPU_BF16_DOT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "src/backend/cpu/cache_line_vector.h"

namespace llmrt::cpu {

constexpr int64_t kBf16GemmMinTokens = 8;

// Activation rows rounded to bfloat16: [rows, padded], each row zero-filled past `cols`.
struct Bf16Activations {
  static constexpr int64_t kBlock = 32;  // columns per dot-product block (one 512-bit vector)
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t padded = 0;             // cols rounded up to a multiple of kBlock
  CacheLineVector<uint16_t> values;  // [rows, padded]
  // The same values as float32 (exactly), for the GEMM's FMA tiles, when rows >=
  // kBf16GemmMinTokens (else empty): per block of 32 columns, the 16 odd-column values, then
  // the 16 even-column ones. [rows, padded]
  CacheLineVector<float> split;
  // For the AMX path (where it is the best path), the same values as tiles read them: per group
  // of 16 rows, per pair of columns (2j, 2j + 1), the 16 rows' pairs (rows past `rows` zero):
  // [ceil(rows / 16), padded / 2, 16, 2]. Else empty.
  CacheLineVector<uint16_t> pairs;
  // 1, or 3 for float32 activations split into three bf16 parts (SplitActivationsBf16x3): then
  // `rows` is 3 x the activation rows, the parts of row t are rows 3t, 3t + 1 and 3t + 2, and a
  // matmul's output for row t is the sum of the three parts' dots (only the AMX path reads them).
  // SplitActivationsBf16x3 keeps `values` and `pairs` at their largest size across calls: only
  // their first rows x padded values (and those rows' groups of pairs) are this call's.
  int parts = 1;
};

// Rounds rows [0, t) of x (row stride ldx, k columns) into *out (round to nearest even, NaN
// kept quiet; denormals stay bf16 denormals, which the dot product then reads as zero).
void RoundActivationsBf16(const float* x, int64_t ldx, int64_t t, int64_t k, Bf16Activations* out);

// The exact policy on AMX tiles (float32 activations, BF16 weights). A float32 value a is the
// exact sum of three bfloat16 values: hi = its top 16 bits (truncated), mid = the top 16 bits of
// a - hi (computed exactly), lo = a - hi - mid (at most 8 significant bits left: exactly a
// bfloat16). Every product of a bf16 weight with one part is exact in float32, so
//   w . x = ((w . hi) + (w . mid)) + (w . lo)
// with float32 sums of exact products: the float32 dot product's numerics (another summation
// order than the FMA kernels'), at three tile passes where the FMA kernels take sixteen
// products per instruction. Edges: a non-finite a keeps hi = a (a NaN quieted) and mid = lo = 0,
// so that an infinity stays one; the tiles read bf16 denormals as zero, so parts below 2^-126
// (those of |a| < 2^-110 or so) drop out, relative 2^-16 of a value 2^110 times smaller than 1.
// Rows [0, t) of x (row stride ldx, k columns) into *out with parts = 3 (values and, where the
// AMX path is available, pairs). REQUIRES: Bf16IsaAvailable(Bf16Isa::kAmx) for a matmul on it.
// `parallel`, when given, runs body(c0, c1) over [0, n) split between threads (a pool's
// ParallelFor): calls of more than 16 tokens split and pack in chunks of 16 tokens (three groups
// of 16 rows of parts) on it; the result does not depend on the split.
using ParallelRunner = std::function<void(size_t n, const std::function<void(size_t, size_t)>& body)>;
void SplitActivationsBf16x3(const float* x, int64_t ldx, int64_t t, int64_t k, Bf16Activations* out,
                            const ParallelRunner* parallel = nullptr);

// The rounding alone: rows [0, t) of x (row stride ldx, k columns) as bf16 into out (row stride
// `padded`, a multiple of 32 and >= k; zeros past k), as RoundActivationsBf16 rounds them.
void RoundRowsBf16(const float* x, int64_t ldx, int64_t t, int64_t k, int64_t padded, uint16_t* out);
// The tiles' layout of `rows` rows of bf16 values (row stride `padded`, even): per group of 16 rows,
// per pair of columns, the 16 rows' pairs (rows past `rows` zero): [ceil(rows / 16), padded / 2, 16, 2].
void PackBf16Pairs(const uint16_t* values, int64_t rows, int64_t padded, CacheLineVector<uint16_t>* pairs);

// The code paths. kAvx512Bf16 is compiled with its own target attributes and used only where
// the CPU reports AVX512_BF16 (and F, BW, VL); kScalar emulates the instruction exactly.
//
// kAmx (AMX-BF16 tiles, `tdpbf16ps`, where the CPU has them and the OS grants tile state) takes
// every matmul, whatever its number of rows, so that its results never depend on the batch
// either: per output, the tile instruction adds 32 products of each block of 32 columns at a
// time, blocks in column order, in its own internal order and rounding, which the instruction set
// reference does not pin down and which none of the float32 step sequences reproduces (measured).
// Its results are therefore not the other paths' bits: they are bf16 products summed in float32
// within the float32 dot-product bound, identical for a row whatever the other rows of the call,
// the thread split or the batch. kAmx is the best path where available.
//
// kAvx2Fma (AVX2 and FMA, for CPUs without AVX512_BF16) forms the instruction's steps with
// 8-wide float32 FMAs over the split halves of each block under DAZ / FTZ, as the AVX-512 GEMM
// does: the scalar emulation's bits, at a fraction of its cost. It reads the activations' split
// layout (made for every row count where it is the best path).
enum class Bf16Isa { kScalar, kAvx512Bf16, kAmx, kAvx2Fma };
const char* Bf16IsaName(Bf16Isa isa);
// Whether this build has the path and this CPU can run it (kScalar: always).
bool Bf16IsaAvailable(Bf16Isa isa);
// The fastest available path (chosen once per process).
Bf16Isa BestBf16Isa();

// The loop shapes. kGemv streams each weight row once per group of up to four activation rows
// (decode: bound by the weight bytes); kGemm blocks tokens, weight rows and columns for cache
// reuse (prefill, batched decode; REQUIRES x.rows >= kBf16GemmMinTokens, where the activations
// carry `split`); kAuto takes kGemm from kBf16GemmMinTokens rows on. They give bit-identical
// results (the same per-lane order): the GEMV with `vdpbf16ps`, the GEMM with float32 FMAs over
// the split halves of each block under DAZ / FTZ (the instruction's steps, at twice its rate on
// cores with two FMA ports). kGemmDp (kAvx512Bf16 only) is the GEMM's blocking with `vdpbf16ps`
// tiles over the bf16 values, for cores that issue the instruction once per cycle
// (Bf16DpFullRate); kAuto takes it there from kBf16GemmMinTokens rows on.
enum class Bf16Loop { kAuto, kGemv, kGemm, kGemmDp };
// Whether this CPU issues `vdpbf16ps` at the rate of a float32 FMA (AMD Zen 4 and later), where
// the GEMM is faster on the instruction than on its FMA steps.
bool Bf16DpFullRate();

// For n in [n0, n1), t in [0, x.rows): out[t * ldo + n] = the dot of weight row n (bf16,
// row-major [*, k], row stride k) with activation row t, computed as above.
// REQUIRES: x.cols == k, isa available.
void Bf16MatMulRows(Bf16Isa isa, Bf16Loop loop, const uint16_t* w, int64_t k, const Bf16Activations& x, float* out,
                    int64_t ldo, int64_t n0, int64_t n1);
// The same on BestBf16Isa(), kAuto.
void Bf16MatMulRowsBest(const uint16_t* w, int64_t k, const Bf16Activations& x, float* out, int64_t ldo, int64_t n0,
                        int64_t n1);

// One `vdpbf16ps` on 16 lanes: acc[i] += a[2i + 1] b[2i + 1], then += a[2i] b[2i], on the given
// path (the instruction itself, or its emulation). For the tests that pin the emulation to the
// hardware at the edges (denormals, infinities, NaN). REQUIRES: isa available.
void Bf16DotLanes(Bf16Isa isa, float acc[16], const uint16_t a[32], const uint16_t b[32]);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_BF16_DOT_H_
