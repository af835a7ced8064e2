// Integer-dot matmuls over int8 activations (the INT8 activation policy: W4A8).
//
// The exact quantized kernels (matmul.cc) turn every weight code into a float32 before an FMA:
// 6-8 vector instructions per 16 codes, so a decode step is bound by instructions, not by the
// bytes it reads. Here each row of activations is rounded once per matmul to int8 codes with
// one float32 scale per 32 columns (scale = max|x| / 127, codes round to nearest even), and a
// block of 32 INT4 weight codes meets its 32 activation codes in one integer dot product
// (AVX-512 VNNI / AVX-VNNI vpdpbusd, or AVX2 vpmaddubsw + vpmaddwd), exact in int32; only the
// block's sum becomes a float: acc += isum * (x_scale * w_scale).
//
// INT4 codes are stored unsigned (u = q + 8, two per byte: column 2j in the low nibble of byte
// j of a 32-column block, column 2j + 1 in the high one). The unsigned-times-signed instructions
// multiply u with the activation codes; the offset is taken back with the block's code sum:
// sum (u - 8) x = sum u x - 8 sum x.
//
// FP8 e4m3 weights stay on the exact path under this policy: their values are not integers,
// and turning them into int8 with a scale per 32 columns would round them a second time (see
// docs/quantization.md).
#ifndef LLMRT_BACKEND_CPU_INT8_DOT_H_
#define LLMRT_BACKEND_CPU_INT8_DOT_H_

#include <cstdint>
#include <vector>

#include "src/backend/backend.h"

namespace llmrt::cpu {

// Activation rows rounded to int8 per 32 columns. Within each chunk of 128 columns (4 blocks;
// the last chunk may hold fewer) the codes of the chunk's even columns come first (block by
// block, 16 each) and then those of its odd columns, so that the low and high nibbles of a run
// of INT4 weight bytes meet their activations with plain loads.
struct Int8Activations {
  static constexpr int64_t kBlock = 32;
  int64_t rows = 0;
  int64_t cols = 0;             // a multiple of kBlock
  std::vector<int8_t> codes;    // [rows, cols], in the chunk order above
  std::vector<float> scales;    // [rows, cols / kBlock]: max|x| / 127 of the block (0 for all zeros)
  std::vector<int32_t> sums;    // [rows, cols / kBlock]: the sum of the block's codes
};

// Rounds rows [0, t) of x (row stride ldx, k columns, k % 32 == 0) into *out. A block holding
// a non-finite value gets a NaN scale and zero codes, so that the non-finite value reaches the
// outputs it feeds, as it would on the exact path.
void QuantizeActivationsInt8(const float* x, int64_t ldx, int64_t t, int64_t k, Int8Activations* out);

// The code paths of the integer dot. Each x86 one is compiled with its own target attributes
// and used only where the CPU reports the instructions.
enum class Int8Isa { kScalar, kAvx2, kAvxVnni, kAvx512Vnni };
const char* Int8IsaName(Int8Isa isa);
// Whether this build has the path and this CPU can run it (kScalar: always).
bool Int8IsaAvailable(Int8Isa isa);
// The fastest available path (chosen once per process).
Int8Isa BestInt8Isa();

// The same on a given path (kScalar: the reference loop; the x86 paths share one AVX2 loop).
// Every path gives bit-identical codes, scales and sums; QuantizeActivationsInt8 above runs
// BestInt8Isa()'s. REQUIRES: Int8IsaAvailable(isa).
void QuantizeActivationsInt8(Int8Isa isa, const float* x, int64_t ldx, int64_t t, int64_t k, Int8Activations* out);

// Whether an INT4 weight can run on int8 activations: every 32-column block has one scale (the
// group is a multiple of 32). Other weights keep the exact path under the INT8 policy.
bool Int4SupportsInt8(const Weight& w);

// For n in [n0, n1), t in [0, x.rows): out[t * ldo + n] = sum over blocks b of
// isum(n, t, b) * (x.scales[t, b] * w_scale(n, b)), with isum the exact int32 dot of the block's
// INT4 codes and activation codes. The float32 sums are formed in one fixed order on every path
// (block b into lane b % 8 with a fused multiply-add, the 8 lanes added pairwise), so every path
// gives bit-identical results. REQUIRES: Int4SupportsInt8(w), x.cols == w.cols, isa available.
void Int4RowsInt8(Int8Isa isa, const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0,
                  int64_t n1);
// The same on BestInt8Isa() (the INT4 entry of the kernel table).
void Int4RowsInt8Best(const Weight& w, const Int8Activations& x, float* out, int64_t ldo, int64_t n0, int64_t n1);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_INT8_DOT_H_
