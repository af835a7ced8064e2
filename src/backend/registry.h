// Backend selection: every backend registers a factory here; LLM_BACKEND_* resolve through it,
// so neither the runtime nor the C ABI names a concrete backend.
#ifndef LLMRT_BACKEND_REGISTRY_H_
#define LLMRT_BACKEND_REGISTRY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"

namespace llmrt {

// How matmuls treat their activations: kExact multiplies float32 activations (the reference
// numerics); kInt8 rounds them to int8 per 32 values and multiplies INT4 weights with integer
// dot products (CPU; see src/backend/cpu/int8_dot.h); kBf16 rounds the activations of matmuls
// with BF16 weights (and, on the CPU, FP8 block weights) to bfloat16 and multiplies with bf16
// dot products; kFp8 treats BF16 weights as kBf16 does and quantizes the activations of matmuls
// with FP8 block weights to e4m3 per column block of the weight, one float32 scale per row and
// block, multiplying codes by codes (the FP8 block-scaled GEMM of Hopper tensor cores; see
// src/backend/cpu/fp8_bf16_dot.h for the arithmetic).
enum class QuantizedActivations { kExact, kInt8, kBf16, kFp8 };

// Whether FP8 block weights with these blocks take the BF16 and FP8 policies: every scale block
// whole 64-column chunks (the CPU kernels convert 64 codes at a time; the released 128 x 128
// blocks qualify). Other FP8 weights keep the exact path under every policy, on every backend.
inline bool Fp8BlocksTakeActivationPolicy(int64_t block_rows, int64_t block_cols) {
  return block_rows > 0 && block_cols > 0 && block_cols % 64 == 0;
}

struct BackendOptions {
  int num_threads = 0;  // CPU worker threads; 0 = one per core
  WeightMemory weight_memory = WeightMemory::kAuto;
  int device = 0;       // device ordinal (device backends)
  QuantizedActivations activations = QuantizedActivations::kExact;
  // CPU, exact policy: BF16 weights' matmuls on AMX tiles over activations split into three
  // bf16 parts (cpu::SplitActivationsBf16x3) where the CPU has them; false keeps the float32
  // FMA kernels (LLMRT_CPU_EXACT_TILES=0 in the environment).
  bool exact_on_tiles = true;
  // CUDA: which attention kernel runs (kernels/kernels.h, AttentionKernel; LLMRT_CUDA_ATTENTION
  // in the environment: "tc", "tc-bf16", "wgmma" or "scalar"). kTensorCore: bf16 MMAs with the
  // query and the probabilities in two bf16 parts each (within the float32 conformance bounds);
  // kTensorCoreBf16: one part (FlashMLA's numerics, faster); kWgmma: one part, MLA layers with a
  // latent of 512 in BF16 or flat FP8 rows on Hopper's warpgroup MMAs (64 heads a block), everything else as
  // kTensorCoreBf16; kScalar: float32 on the CUDA cores.
  enum class DeviceAttention { kTensorCore, kTensorCoreBf16, kScalar, kWgmma };
  DeviceAttention device_attention = DeviceAttention::kTensorCore;
  // CUDA: the tensor-core attention kernel's row loads (LLMRT_CUDA_ATTENTION_STAGES in the
  // environment: "auto", "1" or "2"). 2: the next chunk of KV rows is copied while this one is
  // computed (two buffers); 1: after it; 0 (auto): 2 where the second buffer keeps as many blocks
  // on a multiprocessor.
  int device_attention_stages = 0;
  // CUDA: whether the tensor-core attention keeps the query's fragments in registers where they
  // fit (the default) or reads them from shared memory every chunk (for comparisons in the
  // microbenchmark; no environment variable).
  bool device_attention_query_registers = true;
  // CUDA: head tiles of 16 per tensor-core attention block (0: auto; 1; 2: two tiles sharing
  // their rows in one block of 8 warps, so each chunk of latent rows is read once per 32 heads,
  // not per 16). For comparisons in the microbenchmark and tests; no environment variable.
  int device_attention_tiles_per_block = 0;
  // CUDA: MLA prefill in expanded form (Backend::MlaExpandedAttention; LLMRT_CUDA_MLA_PREFILL in
  // the environment: "absorbed", the default, "expanded" or a number of tokens). 0: never;
  // kMlaExpandedByCount ("expanded"): in a dense prefill pass, the sequences that bring at least
  // the number of tokens whose choice costs the fewest multiply-adds by count (cuda::
  // ChooseMlaExpanded over AttentionBatch::host_seq_tokens and host_seq_ctx), if that beats the
  // absorbed form; N >= 1: the sequences that bring at least N tokens (for tests and
  // measurements). The others (decoding beside a prompt's chunk) run absorbed in the same pass;
  // decode passes always run absorbed.
  static constexpr int64_t kMlaExpandedByCount = -1;
  int64_t device_mla_expanded_min_tokens = 0;
  // CUDA: GQA prefill on FlashAttention tiles (64 query tokens of one sequence and head a block,
  // the context's K and V gathered once as bfloat16), instead of the token-by-token kernel
  // (LLMRT_CUDA_GQA_PREFILL in the environment: "tokens", the default, "flash" (kGqaFlashTokens
  // tokens a sequence) or a number of tokens). 0: never; N >= 1: in a prefill pass, the sequences
  // that bring at least N tokens (AttentionBatch::host_seq_tokens); the others' tokens (decoding
  // beside a prompt's chunk) run token by token in the same op. Decode passes always run token by
  // token, and so does everything under LLMRT_CUDA_ATTENTION=scalar.
  static constexpr int64_t kGqaFlashTokens = 16;
  int64_t device_gqa_flash_min_tokens = 0;
  // CUDA: whether the routed experts' grouped GEMM may run on the tensor cores under the BF16 and
  // FP8 activation policies (LLMRT_CUDA_MOE in the environment: "mma", the default, "wgmma", or
  // "gemv", the CUDA-core kernel every policy ran before; for comparisons).
  bool device_moe_mma = true;
  // CUDA: with device_moe_mma, the tensor-core grouped GEMM's projections (BF16 experts under the
  // BF16-rounding policies, FP8 experts with column blocks of whole 64-column steps under the FP8
  // policy) run on Hopper's warpgroup MMAs (cuda::LaunchGroupedGemmWgmma; LLMRT_CUDA_MOE=wgmma in
  // the environment) on a device of compute capability 9.0 in a build with sm_90a code; other
  // devices keep the mma.sync kernel. Its tiles take at least 64 rows by default (FP8 up to 128).
  // Every tile size gives every row the same bits, which may differ from the mma.sync kernel's in
  // the last places (the order of a tensor-core sum is the hardware's).
  bool device_moe_wgmma = false;
  // CUDA: the most rows of one expert a tile of that tensor-core grouped GEMM takes
  // (LLMRT_CUDA_MOE_TILE in the environment: "auto", the default, or 32, 64 or 128). 0 (auto):
  // chosen per pass from the rows an expert gets on average (32 up to 32 rows, 64 up to 64, else
  // 128; at least 64 on the warpgroup kernel, device_moe_wgmma), so that each expert's weights are
  // read once per 128 rows of a prefill chunk, not once per 32. FP8 experts take at most 64 on the
  // mma.sync kernel (128 on the warpgroup kernel). Every choice gives every row the same bits.
  int64_t device_moe_tile_rows = 0;
  // CUDA: whether INT4 group-scaled and FP8 block-scaled weights (plain and routed experts; FP8
  // under the exact and BF16 activation policies) run on the tensor cores (LLMRT_CUDA_QUANT in the
  // environment: "mma", the default, or "gemv", the CUDA-core GEMV with float32 activations; for
  // comparisons).
  bool device_quant_mma = true;
  // CUDA: the DSA indexer's scoring kernel (cuda::DsaScores: 0 tiled in registers, the default;
  // 1 staged in shared memory; 2 one thread a position from global memory; 3 the tensor cores,
  // the query in three bfloat16 parts, where the shapes and the key's scale groups allow, else 0).
  // The first three give the same bits; the tensor cores' scores are within float32's bound of
  // them (LLMRT_CUDA_DSA_SCORES in the environment: "tiled", the default, "staged", "thread" or
  // "mma").
  int device_dsa_scores = 0;
  // CUDA: whether the DSA top-k may run in two stages for a few tokens over long contexts
  // (cuda::DsaTopKCandidateBytes; the same positions either way). For comparisons in the
  // microbenchmark; no environment variable.
  bool device_dsa_two_stage_topk = true;
};

struct BackendEntry {
  BackendKind kind = BackendKind::kCpu;
  // Whether the backend can run here (for example a device is present).
  bool (*available)() = nullptr;
  absl::StatusOr<std::unique_ptr<Backend>> (*create)(const BackendOptions& options) = nullptr;
  // How many devices it can run on (BackendOptions.device in [0, count)); null for the CPU.
  int (*device_count)() = nullptr;
};

// Adds a backend (the built-in ones are registered on first use). Thread-safe.
void RegisterBackend(const BackendEntry& entry);

// A backend of `kind`. kAuto picks the first available device backend that accepts the options
// (one that refuses them, UNSUPPORTED, gives way with a warning; another failure is returned),
// else the CPU.
// UNSUPPORTED when `kind` is not part of this build or cannot run here.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, const BackendOptions& options);

// The devices CreateBackend(kind) could use: 0 when `kind` resolves to the CPU (kAuto on a host
// without a device) or is not part of this build or has no device here.
int BackendDeviceCount(BackendKind kind);

}  // namespace llmrt

#endif  // LLMRT_BACKEND_REGISTRY_H_
