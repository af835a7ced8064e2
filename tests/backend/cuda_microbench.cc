// A short benchmark of the CUDA backend's hot ops at real layer shapes, run by
// scripts/gpu_check.sh on a GPU machine (it prints a table; it asserts nothing):
//  - the device copy bandwidth (cudaMemcpy device to device, bytes read + written per second),
//    the yardstick of the memory-bound rows;
//  - MatMul with a Kimi K2 BF16 weight [18432, 7168] (the dense MLP's gate) at T = 1 (weight
//    bytes per second as a fraction of the copy bandwidth), 16, 64, 256 and 4096 tokens
//    (TFLOP/s, against ~790 TFLOP/s BF16 peak);
//  - the same MatMul under the BF16 activation policy (cuBLASLt) at T = 1, 64, 512 and 4096
//    (TFLOP/s as a fraction of the ~790 TFLOP/s dense BF16 peak);
//  - MatMul with the same weight in INT4 g32 and FP8 128x128 blocks, on the tensor cores and on
//    the CUDA-core GEMV (LLMRT_CUDA_QUANT=gemv), at T = 1, 8, 16 (the quantized bytes per second
//    as a fraction of the copy bandwidth: decode batches are meant to be memory-bound) and 256;
//  - MLA decode attention of one token, 64 heads, kv_lora 512 + rope 64, BF16 and FP8 (per-layer
//    scale) KV at 4K, 32K and 128K positions, for each attention kernel (tc, tc-bf16, wgmma,
//    scalar: LLMRT_CUDA_ATTENTION; the tensor-core ones with one and two load stages:
//    LLMRT_CUDA_ATTENTION_STAGES): the cache bytes, read once, per second as a fraction of the
//    copy bandwidth, and the MMA work per second;
//  - the DSA indexer of one token (GLM-5: 32 heads of 128, top 2048) at 32K and 128K positions,
//    BF16 and FP8 KV: scores and selection, the index keys' bytes per second; and over prompts of
//    4,096 and 8,192 tokens in one pass, each scoring kernel (tiled, staged, one thread a
//    position) against the staged one;
//  - sampling from Kimi K2's vocabulary at 1, 16 and 64 rows: greedy, drawing rows that the fast
//    path samples, and drawing rows that take the full sort.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/kernels.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/registry.h"
#include "src/backend/sampling.h"
#include "src/kv/kv_store.h"
#include "src/util/bf16.h"
#include "tests/backend/microbench_util.h"

namespace llmrt {
namespace {

using microbench::Must;
using microbench::MustOk;

// Seconds per call of fn, after two warm-up calls, over at least `reps` calls.
template <typename Fn>
double Time(Backend& be, int reps, Fn fn) {
  fn();
  fn();
  MustOk(be.Synchronize(), "warm-up");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  MustOk(be.Synchronize(), "timed calls");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// A one-layer KV store of the codec over the row parts, pages for ctx positions (an FP8 layer
// scale of 0.05 where the codec has one).
std::unique_ptr<KvStore> OneLayerStore(Backend& be, uint32_t codec, std::vector<KvPart> parts, int64_t ctx,
                                       int64_t page) {
  KvStoreOptions o;
  o.codec = FindKvCodec(codec);
  o.shape.num_layers = 1;
  o.shape.parts = std::move(parts);
  o.page_size = page;
  o.num_pages = ctx / page;
  std::unique_ptr<KvStore> store = Must(KvStore::Create(be, o), "KvStore");
  if (codec == kKvCodecFp8) MustOk(store->SetScale(0, 0.05f), "SetScale");
  return store;
}

// One token of one sequence decoding at position ctx - 1 over pages 0 .. ctx / page - 1: the
// attention batch, its metadata uploaded into *meta (which the batch's views point into).
AttentionBatch OneTokenBatch(Backend& be, int64_t ctx, int64_t page, Tensor* meta) {
  const int64_t pages = ctx / page;
  // token_seq [1], token_ctx [1], seq_page_start [2], page_ids [pages], slot [1], first [1]
  std::vector<int32_t> v = {0, static_cast<int32_t>(ctx), 0, static_cast<int32_t>(pages)};
  for (int64_t p = 0; p < pages; ++p) v.push_back(static_cast<int32_t>(p));
  v.push_back(static_cast<int32_t>(ctx - 1));
  v.push_back(0);
  *meta = Must(be.Allocate(DType::kI32, {static_cast<int64_t>(v.size())}), "Allocate");
  MustOk(be.Upload(v.data(), v.size() * 4, *meta), "Upload");
  AttentionBatch batch;
  batch.token_seq = meta->Rows(0, 1);
  batch.token_ctx = meta->Rows(1, 2);
  batch.seq_page_start = meta->Rows(2, 4);
  batch.page_ids = meta->Rows(4, 4 + pages);
  batch.slot_mapping = meta->Rows(4 + pages, 5 + pages);
  batch.seq_first_token = meta->Rows(5 + pages, 6 + pages);
  batch.num_tokens = 1;
  batch.num_seqs = 1;
  batch.max_ctx = ctx;
  batch.total_ctx = ctx;
  batch.min_seq_tokens = 1;
  batch.decode = true;
  return batch;
}

// One sequence prefilling positions 0 .. T - 1 in one pass over pages 0 .. ceil(T / page) - 1.
// A prompt's metadata on the device, and the host facts a step gives (one sequence of T tokens).
struct PrefillMeta {
  Tensor device;
  int32_t seq_tokens = 0, seq_ctx = 0;
};

AttentionBatch PrefillBatch(Backend& be, int64_t T, int64_t page, PrefillMeta* pm) {
  Tensor* meta = &pm->device;
  const int64_t pages = (T + page - 1) / page;
  // token_seq [T], token_ctx [T], seq_page_start [2], page_ids [pages], slots [T], first [1]
  std::vector<int32_t> v(static_cast<size_t>(T), 0);
  for (int64_t t = 0; t < T; ++t) v.push_back(static_cast<int32_t>(t + 1));
  v.push_back(0);
  v.push_back(static_cast<int32_t>(pages));
  for (int64_t p = 0; p < pages; ++p) v.push_back(static_cast<int32_t>(p));
  for (int64_t t = 0; t < T; ++t) v.push_back(static_cast<int32_t>(t));
  v.push_back(0);
  *meta = Must(be.Allocate(DType::kI32, {static_cast<int64_t>(v.size())}), "Allocate");
  MustOk(be.Upload(v.data(), v.size() * 4, *meta), "Upload");
  AttentionBatch batch;
  batch.token_seq = meta->Rows(0, T);
  batch.token_ctx = meta->Rows(T, 2 * T);
  batch.seq_page_start = meta->Rows(2 * T, 2 * T + 2);
  batch.page_ids = meta->Rows(2 * T + 2, 2 * T + 2 + pages);
  batch.slot_mapping = meta->Rows(2 * T + 2 + pages, 3 * T + 2 + pages);
  batch.seq_first_token = meta->Rows(3 * T + 2 + pages, 3 * T + 3 + pages);
  batch.num_tokens = T;
  batch.num_seqs = 1;
  batch.max_ctx = T;
  batch.total_ctx = T * (T + 1) / 2;
  batch.min_seq_tokens = T;
  pm->seq_tokens = pm->seq_ctx = static_cast<int32_t>(T);
  batch.host_seq_tokens = &pm->seq_tokens;
  batch.host_seq_ctx = &pm->seq_ctx;
  return batch;
}

Tensor Random(Backend& be, DType dtype, std::initializer_list<int64_t> shape, std::mt19937& rng) {
  Tensor t = Must(be.Allocate(dtype, shape), "Allocate");
  std::normal_distribution<float> d(0.0f, 1.0f);
  if (dtype == DType::kBF16) {
    std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
    for (auto& x : v) x = F32ToBf16(d(rng) * 0.05f);
    MustOk(be.Upload(v.data(), v.size() * 2, t), "Upload");
  } else {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (auto& x : v) x = d(rng);
    MustOk(be.Upload(v.data(), v.size() * 4, t), "Upload");
  }
  return t;
}

int Main() {
  std::unique_ptr<Backend> be = Must(CreateBackend(BackendKind::kCuda, BackendOptions{}), "the CUDA backend");
  std::mt19937 rng(1);

  // Copy bandwidth: 2 GiB moved per copy (1 GiB read, 1 GiB written).
  const size_t copy_bytes = size_t{1} << 30;
  Tensor a = Must(be->Allocate(DType::kU8, {static_cast<int64_t>(copy_bytes)}), "Allocate");
  Tensor b = Must(be->Allocate(DType::kU8, {static_cast<int64_t>(copy_bytes)}), "Allocate");
  // On the default stream, timed to its completion (a device-to-device copy returns before it
  // ends).
  auto copy = [&] { cudaMemcpyAsync(b.data(), a.data(), copy_bytes, cudaMemcpyDeviceToDevice, nullptr); };
  copy();
  cudaDeviceSynchronize();
  const auto c0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) copy();
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::fprintf(stderr, "the copy failed\n");
    return 1;
  }
  const double t_copy = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() / 10;
  const double copy_bw = 2.0 * copy_bytes / t_copy;
  std::printf("device copy: %.0f GB/s (read + written)\n", copy_bw / 1e9);

  // MatMul, Kimi K2's dense MLP gate [18432, 7168] in BF16.
  const int64_t N = 18432, K = 7168;
  Weight w;
  w.format = kWeightBf16;
  w.rows = N;
  w.cols = K;
  w.data = Random(*be, DType::kBF16, {N, K}, rng);
  std::printf("\nMatMul BF16 [%lld, %lld]\n%6s %12s %12s %14s\n", static_cast<long long>(N), static_cast<long long>(K),
              "T", "ms", "TFLOP/s", "weight GB/s");
  for (int64_t T : {1, 16, 64, 256, 4096}) {
    Tensor x = Random(*be, DType::kF32, {T, K}, rng);
    Tensor out = Must(be->Allocate(DType::kF32, {T, N}), "Allocate");
    const double t = Time(*be, T >= 1024 ? 3 : 20, [&] { be->MatMul(x, w, out); });
    const double wbw = static_cast<double>(N * K * 2) / t;
    std::printf("%6lld %12.3f %12.1f %14.0f", static_cast<long long>(T), t * 1e3, 2.0 * T * N * K / t / 1e12, wbw / 1e9);
    if (T == 1) std::printf("   (%.0f%% of the copy bandwidth)", 100.0 * wbw / copy_bw);
    std::printf("\n");
  }

  // The BF16 activation policy: the same weight through cuBLASLt (activations rounded to bf16 by
  // a kernel, then the tensor-core GEMM with the algorithm fixed per weight shape).
  {
    BackendOptions bo;
    bo.activations = QuantizedActivations::kBf16;
    std::unique_ptr<Backend> bf = Must(CreateBackend(BackendKind::kCuda, bo), "the CUDA backend (BF16 activations)");
    Weight bw = w;
    bw.data = Random(*bf, DType::kBF16, {N, K}, rng);
    constexpr double kPeak = 790e12;  // H200 dense BF16 tensor-core peak, FLOP/s
    std::printf("\nMatMul BF16 [%lld, %lld], BF16 activations (cuBLASLt)\n%6s %12s %12s %14s\n",
                static_cast<long long>(N), static_cast<long long>(K), "T", "ms", "TFLOP/s", "of 790 peak");
    for (int64_t T : {1, 64, 512, 4096}) {
      Tensor x = Random(*bf, DType::kF32, {T, K}, rng);
      Tensor out = Must(bf->Allocate(DType::kF32, {T, N}), "Allocate");
      const double t = Time(*bf, T >= 1024 ? 10 : 20, [&] { bf->MatMul(x, bw, out); });
      const double flops = 2.0 * T * N * K / t;
      std::printf("%6lld %12.3f %12.1f %13.0f%%\n", static_cast<long long>(T), t * 1e3, flops / 1e12,
                  100.0 * flops / kPeak);
    }
  }

  // The same shape quantized: random codes (FP8 without NaN codes) and scales, on the tensor cores
  // (the default) and on the CUDA-core GEMV (LLMRT_CUDA_QUANT=gemv), T = 1 .. 16 being the decode
  // batches that should all cost what T = 1 costs.
  BackendOptions gemv_options;
  gemv_options.device_quant_mma = false;
  std::unique_ptr<Backend> gemv_be =
      Must(CreateBackend(BackendKind::kCuda, gemv_options), "the CUDA backend (quantized GEMV)");
  struct Quant {
    const char* name;
    WeightFormatId format;
    int64_t code_bytes;
    Backend* backend;
  };
  for (const Quant& qf : {Quant{"INT4 g32, tensor cores", kWeightInt4Group, N * K / 2, be.get()},
                          Quant{"INT4 g32, CUDA-core GEMV (LLMRT_CUDA_QUANT=gemv)", kWeightInt4Group, N * K / 2,
                                gemv_be.get()},
                          Quant{"FP8 128x128, tensor cores", kWeightFp8Block, N * K, be.get()},
                          Quant{"FP8 128x128, CUDA-core GEMV (LLMRT_CUDA_QUANT=gemv)", kWeightFp8Block, N * K,
                                gemv_be.get()}}) {
    Backend& qb = *qf.backend;
    auto bytes = [&](int64_t n, uint8_t mask) {
      std::vector<uint8_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = static_cast<uint8_t>(rng() & mask);
      Tensor t = Must(qb.Allocate(DType::kU8, {n}), "Allocate");
      MustOk(qb.Upload(v.data(), v.size(), t), "Upload");
      return t;
    };
    Weight qw;
    qw.format = qf.format;
    qw.quantized = true;
    qw.rows = N;
    qw.cols = K;
    if (qf.format == kWeightInt4Group) {
      qw.params.group = 32;
      qw.data = bytes(qf.code_bytes, 0xff);
      qw.scales = Random(qb, DType::kBF16, {N * K / 32}, rng);
    } else {
      qw.params.block_rows = qw.params.block_cols = 128;
      qw.data = bytes(qf.code_bytes, 0x77);  // exponents below 15: no NaN
      qw.scales = Random(qb, DType::kF32, {(N / 128) * (K / 128)}, rng);
    }
    const double weight_bytes = static_cast<double>(qf.code_bytes + qw.scales.bytes());
    std::printf("\nMatMul %s [%lld, %lld]\n%6s %12s %12s %14s\n", qf.name, static_cast<long long>(N),
                static_cast<long long>(K), "T", "ms", "TFLOP/s", "weight GB/s");
    for (int64_t T : {1, 8, 16, 256}) {
      Tensor x = Random(qb, DType::kF32, {T, K}, rng);
      Tensor out = Must(qb.Allocate(DType::kF32, {T, N}), "Allocate");
      const double t = Time(qb, T >= 256 ? 3 : 20, [&] { qb.MatMul(x, qw, out); });
      const double wbw = weight_bytes / t;
      std::printf("%6lld %12.3f %12.1f %14.0f", static_cast<long long>(T), t * 1e3, 2.0 * T * N * K / t / 1e12,
                  wbw / 1e9);
      if (T <= 16) std::printf("   (%.0f%% of the copy bandwidth)", 100.0 * wbw / copy_bw);
      std::printf("\n");
    }
  }

  // MLA decode attention, one token, over the attention kernels and KV codecs.
  const int64_t H = 64, L = 512, R = 64, page = 64;
  // Whether the warpgroup kernel takes Kimi K2's rows here (the build's sm_90a code, the device's
  // compute capability and shared memory), so that the `wgmma` rows say what they timed.
  {
    int device = 0, major = 0, minor = 0, optin = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    static float out_row[2];  // 8-byte aligned: the plan looks at the output's alignment only
    for (const bool fp8 : {false, true}) {
      cuda::AttentionArgs pa{};
      pa.heads = H;
      pa.kv_group = 1;
      pa.q1_len = L;
      pa.q2 = out_row;  // present
      pa.q2_len = R;
      pa.k2_off = L;
      pa.dv = L;
      pa.kv.width = L + R;
      pa.kv.type = pa.kv.row.type = fp8 ? cuda::kElemFp8E4M3 : cuda::kElemBf16;
      pa.kv.row_bytes = pa.kv.width * (fp8 ? 1 : 2);
      pa.out = out_row;
      pa.out_ld = H * L;
      pa.kernel = cuda::AttentionKernel::kWgmma;
      pa.compute_capability = major * 10 + minor;
      pa.max_shared_bytes = optin;
      const bool taken = cuda::AttentionBlocksOf(pa).per_token == 1;
      std::printf("wgmma on Kimi K2's %s rows, compute capability %d.%d, %d bytes of shared memory a block: %s\n",
                  fp8 ? "FP8" : "BF16", major, minor, optin,
                  taken ? "the warpgroup kernel (one block of 64 heads a token)" : "not taken (tc-bf16 runs)");
    }
  }
  MlaDims d;
  d.heads = H;
  d.nope = 128;
  d.rope = R;
  d.v = 128;
  d.kv_lora = L;
  struct Kernel {
    const char* name;
    BackendOptions::DeviceAttention kind;
    int stages;  // LLMRT_CUDA_ATTENTION_STAGES
    int terms;   // bfloat16 parts of the query and probabilities (MMA work per product)
    bool query_registers = true;  // BackendOptions::device_attention_query_registers
    int tiles = 0;                // BackendOptions::device_attention_tiles_per_block (0: auto)
  };
  const Kernel kernels[] = {{"tc s1", BackendOptions::DeviceAttention::kTensorCore, 1, 2},
                            {"tc s2", BackendOptions::DeviceAttention::kTensorCore, 2, 2},
                            {"tc s2 t1", BackendOptions::DeviceAttention::kTensorCore, 2, 2, true, 1},
                            {"tc s1 qs", BackendOptions::DeviceAttention::kTensorCore, 1, 2, false},
                            {"tc-bf16 s1", BackendOptions::DeviceAttention::kTensorCoreBf16, 1, 1},
                            {"tc-bf16 s2", BackendOptions::DeviceAttention::kTensorCoreBf16, 2, 1},
                            {"tc-bf16 s2 t1", BackendOptions::DeviceAttention::kTensorCoreBf16, 2, 1, true, 1},
                            {"wgmma", BackendOptions::DeviceAttention::kWgmma, 0, 1},
                            {"scalar", BackendOptions::DeviceAttention::kScalar, 0, 1}};
  std::printf("\nMLA decode attention, %lld heads, KV [%lld + %lld], one token (LLMRT_CUDA_ATTENTION kernels; s1 / s2:\n"
              "LLMRT_CUDA_ATTENTION_STAGES; qs: the query's fragments read from shared memory every chunk, as\n"
              "before 2026-12-05; t1: blocks of one tile of 16 heads, not the plan's two where they fit;\n"
              "wgmma: 64 heads a block on the warpgroup MMAs;\n"
              "TFLOP/s counts each product once per bfloat16 part of the query)\n"
              "%10s %6s %8s %10s %16s %10s\n",
              static_cast<long long>(H), static_cast<long long>(L), static_cast<long long>(R), "kernel", "KV",
              "context", "ms", "KV GB/s (once)", "TFLOP/s");
  for (const Kernel& k : kernels) {
    BackendOptions bo;
    bo.device_attention = k.kind;
    bo.device_attention_stages = k.stages;
    bo.device_attention_query_registers = k.query_registers;
    bo.device_attention_tiles_per_block = k.tiles;
    std::unique_ptr<Backend> ab = Must(CreateBackend(BackendKind::kCuda, bo), "the CUDA backend");
    for (const uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
      for (int64_t ctx : {4096, 32768, 131072}) {
        std::unique_ptr<KvStore> store = OneLayerStore(*ab, codec, {{L, 128, false}, {R, 128, true}}, ctx, page);
        Tensor m;
        const AttentionBatch batch = OneTokenBatch(*ab, ctx, page, &m);
        Tensor q_lat = Random(*ab, DType::kF32, {1, H * L}, rng);
        Tensor q = Random(*ab, DType::kF32, {1, H * (d.nope + R)}, rng);
        Tensor out = Must(ab->Allocate(DType::kF32, {1, H * L}), "Allocate");
        const double t =
            Time(*ab, 5, [&] { ab->MlaAttention(q_lat, q, store->view(), 0, batch, d, 0.1f, nullptr, out); });
        const double kv_bw = static_cast<double>(ctx * store->view().row_bytes) / t;
        // Scores over the latent and rope columns, values over the latent: 2 FLOP per product.
        const double flops = 2.0 * static_cast<double>(H * ctx * (L + R + L)) * k.terms;
        std::printf("%10s %6s %8lld %10.3f %16.0f %10.1f   (%.0f%% of the copy bandwidth)\n", k.name,
                    codec == kKvCodecFp8 ? "FP8" : "BF16", static_cast<long long>(ctx), t * 1e3, kv_bw / 1e9,
                    flops / t / 1e12, 100.0 * kv_bw / copy_bw);
      }
    }
  }

  // MLA prefill attention, one sequence's prompt of T tokens in one pass (64 heads of Kimi K2's
  // and GLM-5's shapes over BF16 and FP8 rows): the absorbed form (MlaAbsorbQuery, MlaAttention
  // on the default `tc` and on `wgmma`, MlaProjectValue) against the expanded form
  // (LLMRT_CUDA_MLA_PREFILL: gather, the expansion's GEMM on cuBLASLt, FlashAttention-2 on
  // mma.sync). TFLOP/s counts the expanded form's multiply-adds over the causal context
  // (heads x (nope + rope + v) a position), the same work for every row, so the rows compare as
  // speeds. GLM-5 at 2048 tokens, its index_topk: longer prompts run sparse passes.
  {
    std::printf("\nMLA prefill attention, %lld heads, one sequence of T tokens (q, kv_b BF16; absorbed: the three\n"
                "absorbed ops; expanded: LLMRT_CUDA_MLA_PREFILL; TFLOP/s in the expanded form's count)\n"
                "%-8s %-16s %6s %6s %10s %10s %12s\n",
                static_cast<long long>(H), "heads", "form", "KV", "T", "ms", "TFLOP/s", "vs absorbed");
    struct Form {
      const char* name;
      BackendOptions::DeviceAttention kind;
      bool expanded;
    };
    const Form forms[] = {{"absorbed tc", BackendOptions::DeviceAttention::kTensorCore, false},
                          {"absorbed wgmma", BackendOptions::DeviceAttention::kWgmma, false},
                          {"expanded", BackendOptions::DeviceAttention::kTensorCore, true}};
    struct Heads {
      const char* name;
      int64_t nope, v, t_long;
    };
    for (const Heads& hs : {Heads{"Kimi K2", 128, 128, 4096}, Heads{"GLM-5", 192, 256, 2048}}) {
      MlaDims pd = d;
      pd.nope = hs.nope;
      pd.v = hs.v;
      Weight kv_b;
      kv_b.format = kWeightBf16;
      kv_b.rows = H * (pd.nope + pd.v);
      kv_b.cols = L;
      for (const uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
        for (int64_t T : {int64_t{512}, hs.t_long}) {
          double base = 0;
          for (const Form& f : forms) {
            BackendOptions bo;
            bo.device_attention = f.kind;
            bo.device_mla_expanded_min_tokens = f.expanded ? 1 : 0;
            std::unique_ptr<Backend> pb = Must(CreateBackend(BackendKind::kCuda, bo), "the CUDA backend");
            kv_b.data = Random(*pb, DType::kBF16, {kv_b.rows, L}, rng);
            std::unique_ptr<KvStore> store =
                OneLayerStore(*pb, codec, {{L, 128, false}, {R, 128, true}}, (T + page - 1) / page * page, page);
            PrefillMeta m;
            const AttentionBatch batch = PrefillBatch(*pb, T, page, &m);
            Tensor q = Random(*pb, DType::kF32, {T, H * (pd.nope + R)}, rng);
            Tensor q_lat = Must(pb->Allocate(DType::kF32, {T, H * L}), "Allocate");
            Tensor o_lat = Must(pb->Allocate(DType::kF32, {T, H * L}), "Allocate");
            Tensor out = Must(pb->Allocate(DType::kF32, {T, H * pd.v}), "Allocate");
            bool taken = true;
            const double t = Time(*pb, 3, [&] {
              if (f.expanded) {
                taken = pb->MlaExpandedAttention(q, kv_b, store->view(), 0, batch, pd, 0.1f, out) > 0;
              } else {
                pb->MlaAbsorbQuery(q, kv_b, pd, q_lat);
                pb->MlaAttention(q_lat, q, store->view(), 0, batch, pd, 0.1f, nullptr, o_lat);
                pb->MlaProjectValue(o_lat, kv_b, pd, out);
              }
            });
            if (!taken) {
              std::printf("%-8s %-16s %6s %6lld   not taken\n", hs.name, f.name, codec == kKvCodecFp8 ? "FP8" : "BF16",
                          static_cast<long long>(T));
              continue;
            }
            if (base == 0) base = t;
            const double flops = 2.0 * static_cast<double>(H * (pd.nope + R + pd.v)) * T * (T + 1) / 2;
            std::printf("%-8s %-16s %6s %6lld %10.3f %10.1f %11.2fx\n", hs.name, f.name,
                        codec == kKvCodecFp8 ? "FP8" : "BF16", static_cast<long long>(T), t * 1e3, flops / t / 1e12,
                        base / t);
          }
        }
      }
    }
  }

  // GQA prefill attention, GLM-4.5's heads (96 query heads, 8 KV heads of 128), one sequence's
  // prompt of T tokens in one pass: the token-by-token tensor-core kernel (the default) against
  // FlashAttention tiles (LLMRT_CUDA_GQA_PREFILL: the context gathered as bfloat16, 64 tokens of
  // one head a block). TFLOP/s counts 2 x 128 multiply-adds (q.k and p.v) a (head, token,
  // position) over the causal context.
  {
    const int64_t GH = 96, GKV = 8, GD = 128;
    std::printf("\nGQA prefill attention, %lld heads, %lld KV heads of %lld, one sequence of T tokens\n"
                "%-8s %6s %6s %10s %10s %12s\n",
                static_cast<long long>(GH), static_cast<long long>(GKV), static_cast<long long>(GD), "form", "KV", "T",
                "ms", "TFLOP/s", "vs tokens");
    for (const uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
      for (const int64_t T : {512, 4096}) {
        double base = 0;
        for (const bool flash : {false, true}) {
          BackendOptions bo;
          bo.device_gqa_flash_min_tokens = flash ? 1 : 0;
          std::unique_ptr<Backend> gb = Must(CreateBackend(BackendKind::kCuda, bo), "the CUDA backend");
          std::unique_ptr<KvStore> store = OneLayerStore(*gb, codec, {{GKV * GD, GD, false}, {GKV * GD, GD, false}},
                                                         (T + page - 1) / page * page, page);
          PrefillMeta m;
          const AttentionBatch batch = PrefillBatch(*gb, T, page, &m);
          Tensor q = Random(*gb, DType::kF32, {T, GH * GD}, rng);
          Tensor out = Must(gb->Allocate(DType::kF32, {T, GH * GD}), "Allocate");
          const double t = Time(*gb, 3, [&] { gb->GqaAttention(q, store->view(), 0, batch, GH, GKV, GD, 0.088f, out); });
          if (base == 0) base = t;
          const double flops = 2.0 * static_cast<double>(GH * 2 * GD) * T * (T + 1) / 2;
          std::printf("%-8s %6s %6lld %10.3f %10.1f %11.2fx\n", flash ? "flash" : "tokens",
                      codec == kKvCodecFp8 ? "FP8" : "BF16", static_cast<long long>(T), t * 1e3, flops / t / 1e12,
                      base / t);
        }
      }
    }
  }

  // MLA's absorbed projections (Kimi K2's 64 heads: kv_b BF16 [64 * 256, 512]) around the
  // absorbed attention: q_lat = W_UK^T q_nope, out = W_UV o_lat, float32 activations. kv_b GB/s
  // counts the half of kv_b an op reads (8 MiB) once a call (the least it reads), against the copy
  // bandwidth.
  {
    const int64_t AH = 64;
    MlaDims ad;
    ad.heads = AH;
    ad.nope = 128;
    ad.rope = 64;
    ad.v = 128;
    ad.kv_lora = 512;
    Weight kv_b;
    kv_b.format = kWeightBf16;
    kv_b.rows = AH * (ad.nope + ad.v);
    kv_b.cols = ad.kv_lora;
    kv_b.data = Random(*be, DType::kBF16, {kv_b.rows, kv_b.cols}, rng);
    std::printf("\nMLA absorbed projections, %lld heads, kv_b BF16 [%lld, %lld]\n%6s %-8s %10s %10s %14s\n",
                static_cast<long long>(AH), static_cast<long long>(kv_b.rows), static_cast<long long>(kv_b.cols), "T",
                "op", "ms", "GFLOP/s", "kv_b GB/s (once)");
    for (int64_t T : {1, 16, 64, 256, 4096}) {
      Tensor q = Random(*be, DType::kF32, {T, AH * (ad.nope + ad.rope)}, rng);
      Tensor lat = Random(*be, DType::kF32, {T, AH * ad.kv_lora}, rng);
      Tensor out = Must(be->Allocate(DType::kF32, {T, AH * ad.v}), "Allocate");
      for (const bool absorb : {true, false}) {
        const double t = Time(*be, T >= 1024 ? 3 : 20, [&] {
          if (absorb) {
            be->MlaAbsorbQuery(q, kv_b, ad, lat);
          } else {
            be->MlaProjectValue(lat, kv_b, ad, out);
          }
        });
        const double half = static_cast<double>(kv_b.rows / 2 * kv_b.cols * 2);  // W_UK or W_UV
        std::printf("%6lld %-8s %10.3f %10.1f %14.0f   (%.0f%% of the copy bandwidth)\n", static_cast<long long>(T),
                    absorb ? "absorb" : "project", t * 1e3, 2.0 * T * AH * 128 * ad.kv_lora / t / 1e9,
                    half / t / 1e9, 100.0 * half / t / copy_bw);
      }
    }
  }

  // The DSA indexer (GLM-5: 32 heads of 128 over the indexer key after the latent and rope of
  // each row) for one token: scores of every position, then the top 2048 (in two stages, the
  // default at these contexts, and in one block per token; "mma 2-st": the tensor-core scores,
  // two stages).
  {
    const int64_t IH = 32, ID = 128, top_k = 2048;
    std::printf("\nDSA indexer, %lld heads x %lld, top %lld, one token (scores and selection)\n%-8s %6s %8s %10s "
                "%22s\n",
                static_cast<long long>(IH), static_cast<long long>(ID), static_cast<long long>(top_k), "top-k",
                "KV", "context", "ms", "index keys GB/s (once)");
    for (const auto& [two_stage, form] : {std::pair<bool, int>{true, 0}, {false, 0}, {true, 3}}) {
      BackendOptions dbo;
      dbo.device_dsa_two_stage_topk = two_stage;
      dbo.device_dsa_scores = form;
      std::unique_ptr<Backend> db = Must(CreateBackend(BackendKind::kCuda, dbo), "the CUDA backend");
      for (const uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
        for (int64_t ctx : {32768, 131072}) {
          std::unique_ptr<KvStore> store =
              OneLayerStore(*db, codec, {{L, 128, false}, {R, 128, true}, {ID, 128, false}}, ctx, page);
          Tensor m;
          const AttentionBatch batch = OneTokenBatch(*db, ctx, page, &m);
          Tensor q = Random(*db, DType::kF32, {1, IH * ID}, rng);
          Tensor w = Random(*db, DType::kF32, {1, IH}, rng);
          Tensor selected = Must(db->Allocate(DType::kI32, {1, top_k}), "Allocate");
          const double t = Time(*db, 5, [&] {
            db->DsaSelect(q, w, store->view(), 0, batch, IH, ID, L + R, 0.088f, top_k, selected);
          });
          const double key_bw = static_cast<double>(ctx * ID * (codec == kKvCodecFp8 ? 1 : 2)) / t;
          std::printf("%-8s %6s %8lld %10.3f %22.0f   (%.0f%% of the copy bandwidth)\n",
                      form == 3 ? "mma 2-st" : two_stage ? "2-stage" : "1-block", codec == kKvCodecFp8 ? "FP8" : "BF16",
                      static_cast<long long>(ctx), t * 1e3, key_bw / 1e9, 100.0 * key_bw / copy_bw);
        }
      }
    }
  }

  // The DSA indexer over a prompt of T tokens in one pass (GLM-5's shapes; the tokens past the
  // first top_k score every position of their causal context): each scoring kernel of
  // BackendOptions::device_dsa_scores (mma: the tensor cores, the query in three bfloat16 parts),
  // scores and selection together. GFLOP/s counts 2 x heads x head_dim a scored (token, position)
  // (the tensor cores' three parts not counted), against the staged kernel.
  {
    const int64_t IH = 32, ID = 128, top_k = 2048;
    std::printf("\nDSA indexer over a prompt of T tokens, %lld heads x %lld, top %lld\n%-10s %6s %6s %10s %10s %10s\n",
                static_cast<long long>(IH), static_cast<long long>(ID), static_cast<long long>(top_k), "scores", "KV",
                "T", "ms", "GFLOP/s", "vs staged");
    const char* names[] = {"tiled", "staged", "thread", "mma"};
    for (const uint32_t codec : {kKvCodecBf16, kKvCodecFp8}) {
      for (const int64_t T : {4096, 8192}) {
        double times[4] = {0, 0, 0, 0};
        for (const int form : {1, 0, 3, 2}) {
          BackendOptions bo;
          bo.device_dsa_scores = form;
          std::unique_ptr<Backend> db = Must(CreateBackend(BackendKind::kCuda, bo), "the CUDA backend");
          std::unique_ptr<KvStore> store = OneLayerStore(*db, codec, {{L, 128, false}, {R, 128, true}, {ID, 128, false}},
                                                         (T + page - 1) / page * page, page);
          PrefillMeta m;
          const AttentionBatch batch = PrefillBatch(*db, T, page, &m);
          Tensor q = Random(*db, DType::kF32, {T, IH * ID}, rng);
          Tensor w = Random(*db, DType::kF32, {T, IH}, rng);
          Tensor selected = Must(db->Allocate(DType::kI32, {T, top_k}), "Allocate");
          times[form] = Time(*db, form == 2 ? 1 : 3, [&] {
            db->DsaSelect(q, w, store->view(), 0, batch, IH, ID, L + R, 0.088f, top_k, selected);
          });
          // Tokens at contexts top_k + 1 .. T score every position of their context.
          const double scored = static_cast<double>(T - top_k) * static_cast<double>(T + top_k + 1) / 2;
          std::printf("%-10s %6s %6lld %10.3f %10.0f %9.2fx\n", names[form], codec == kKvCodecFp8 ? "FP8" : "BF16",
                      static_cast<long long>(T), times[form] * 1e3, 2.0 * IH * ID * scored / times[form] / 1e9,
                      times[1] / times[form]);
        }
      }
    }
  }

  // Sampling from Kimi K2's vocabulary of 163,840 logits per row: greedy rows; drawing rows that
  // the fast path samples (a trained model's peaked logits, with top_k 50 and top_p 0.95, or with
  // the temperature alone); and drawing rows it hands to the full sort (nearly flat logits with the
  // temperature alone, the draw past the best 2,048 candidates: what every drawing row cost before
  // the fast path).
  {
    const int64_t V = 163840;
    std::printf("\nSampling, %lld logits a row\n%6s %-34s %10s %12s\n", static_cast<long long>(V), "rows", "mode",
                "ms", "us per row");
    struct Mode {
      const char* name;
      SamplingParams params;
      bool peaked;
    };
    const Mode modes[] = {{"greedy", {0.0f, 0, 1.0f, 0.0f}, true},
                          {"top_k 50, top_p 0.95 (fast path)", {0.7f, 50, 0.95f, 0.0f}, true},
                          {"temperature 1 (fast path)", {1.0f, 0, 1.0f, 0.0f}, true},
                          {"temperature 1, flat (full sort)", {1.0f, 0, 1.0f, 0.0f}, false}};
    // 64 rows of each shape; a call over `rows` rows samples the first ones.
    std::normal_distribution<float> normal;
    std::vector<float> peaked(static_cast<size_t>(64 * V)), flat(peaked.size());
    for (int64_t r = 0; r < 64; ++r) {
      float* l = peaked.data() + r * V;
      for (int64_t i = 0; i < V; ++i) l[i] = 2.0f * normal(rng);
      for (int i = 0; i < 40; ++i) l[rng() % V] = 14.0f + 2.0f * normal(rng);  // a head well above the tail
    }
    for (float& x : flat) x = 0.05f * normal(rng);
    Tensor l = Must(be->Allocate(DType::kF32, {64, V}), "Allocate");
    for (const int64_t rows : {1, 16, 64}) {
      for (const Mode& mode : modes) {
        const std::vector<float>& logits = mode.peaked ? peaked : flat;
        std::vector<int32_t> words(static_cast<size_t>(rows * kSamplingWords)), drawing;
        for (int64_t r = 0; r < rows; ++r) {
          PackSamplingRow(mode.params, 0.5, words.data() + r * kSamplingWords);
          if (SamplingDraws(mode.params, V)) drawing.push_back(static_cast<int32_t>(r));
        }
        Tensor pw = Must(be->Allocate(DType::kI32, {static_cast<int64_t>(words.size())}), "Allocate");
        Tensor rr = Must(be->Allocate(DType::kI32, {rows}), "Allocate");
        Tensor ids = Must(be->Allocate(DType::kI32, {rows}), "Allocate");
        const Tensor lr = l.Rows(0, rows);
        MustOk(be->Upload(logits.data(), static_cast<size_t>(rows * V) * 4, lr), "Upload");
        MustOk(be->Upload(words.data(), words.size() * 4, pw), "Upload");
        if (!drawing.empty()) MustOk(be->Upload(drawing.data(), drawing.size() * 4, rr), "Upload");
        const Tensor random = rr.Rows(0, static_cast<int64_t>(drawing.size()));
        const double t = Time(*be, 10, [&] { be->SampleTokens(lr, pw, random, ids); });
        std::printf("%6lld %-34s %10.3f %12.1f\n", static_cast<long long>(rows), mode.name, t * 1e3,
                    t * 1e6 / static_cast<double>(rows));
      }
    }
  }

  // The routed experts under the BF16 policy (MoeExperts: the permutation, the gate, up and down
  // projections on the tensor-core grouped GEMM, the combination), Kimi K2's expert shapes (hidden
  // 7168, intermediate 2048, top 8): tiles of 32 rows (LLMRT_CUDA_MOE_TILE=32, the only size
  // before) against the size chosen per pass (auto), the warpgroup-MMA kernel (LLMRT_CUDA_MOE=wgmma,
  // "wg <tile rows>"; on Hopper) and the CUDA-core GEMV (LLMRT_CUDA_MOE=gemv) for reference. 96 experts over 1,024 tokens give each about 85 rows, as Kimi K2's 384 do over
  // a 4,096-token prefill; 8 experts (llm-bench's synthetic models) over 64 and 4,096 tokens; 96
  // over 64 tokens, a decode batch (tiles of 32 either way). The experts' weights are copies of
  // one random matrix at distinct addresses (8.5 GB for 96 experts), so each is read from memory.
  {
    const int64_t H = 7168, I = 2048, K = 8;
    std::vector<uint16_t> host(static_cast<size_t>(H * I));
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& x : host) x = F32ToBf16(d(rng) * 0.05f);
    std::printf("\nMoE experts, BF16 activations, hidden %lld, intermediate %lld, top %lld\n%8s %6s %8s %-8s %10s %10s "
                "%12s %14s\n",
                static_cast<long long>(H), static_cast<long long>(I), static_cast<long long>(K), "experts", "T",
                "rows/e", "tiles", "ms", "TFLOP/s", "weights GB/s", "vs tiles of 32");
    struct Setting {
      const char* name;
      int64_t tile_rows;
      bool mma, wgmma;
    };
    const Setting settings[] = {
        {"32", 32, true, false}, {"auto", 0, true, false}, {"wgmma", 0, true, true}, {"gemv", 0, false, false}};
    for (const auto& [E, T] : {std::pair<int64_t, int64_t>{96, 1024}, {96, 64}, {8, 64}, {8, 4096}}) {
      double t32 = 0;
      for (const Setting& st : settings) {
        BackendOptions bo;
        bo.activations = QuantizedActivations::kBf16;
        bo.device_moe_tile_rows = st.tile_rows;
        bo.device_moe_mma = st.mma;
        bo.device_moe_wgmma = st.wgmma;
        std::unique_ptr<Backend> mb = Must(CreateBackend(BackendKind::kCuda, bo), "the CUDA backend (MoE)");
        Tensor src = Must(mb->Allocate(DType::kBF16, {I, H}), "Allocate");
        MustOk(mb->Upload(host.data(), host.size() * 2, src), "Upload");
        const auto copy_of = [&](int64_t rows, int64_t cols) {
          Weight w;
          w.format = kWeightBf16;
          w.rows = rows;
          w.cols = cols;
          w.data = Must(mb->Allocate(DType::kBF16, {rows, cols}), "Allocate");
          cudaMemcpyAsync(w.data.data(), src.data(), host.size() * 2, cudaMemcpyDeviceToDevice, nullptr);
          return w;
        };
        std::vector<ExpertWeights> experts(static_cast<size_t>(E));
        for (ExpertWeights& e : experts) {
          e.gate = copy_of(I, H);
          e.up = copy_of(I, H);
          e.down = copy_of(H, I);
        }
        cudaDeviceSynchronize();
        const std::unique_ptr<ExpertBank> bank = Must(mb->PrepareExperts(std::move(experts)), "PrepareExperts");
        // Token t's slots: experts (t + j (E / K)) mod E, or (t + j) mod E with E <= K: every expert
        // gets T K / E rows.
        std::vector<int32_t> idx(static_cast<size_t>(T * K));
        std::vector<float> wts(idx.size(), 0.125f);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < K; ++j) idx[t * K + j] = static_cast<int32_t>((t + j * std::max<int64_t>(E / K, 1)) % E);
        }
        Tensor x = Random(*mb, DType::kF32, {T, H}, rng);
        Tensor ti = Must(mb->Allocate(DType::kI32, {T, K}), "Allocate");
        Tensor tw = Must(mb->Allocate(DType::kF32, {T, K}), "Allocate");
        Tensor out = Must(mb->Allocate(DType::kF32, {T, H}), "Allocate");
        MustOk(mb->Upload(idx.data(), idx.size() * 4, ti), "Upload");
        MustOk(mb->Upload(wts.data(), wts.size() * 4, tw), "Upload");
        const double t = Time(*mb, st.mma ? 5 : 2, [&] { mb->MoeExperts(x, ti, tw, *bank, out); });
        const int64_t rows = T * K / E;
        const auto* cuda = dynamic_cast<const CudaBackend*>(mb.get());
        const int64_t took = cuda != nullptr ? cuda->last_moe_tile_rows() : 0;
        const bool on_wgmma = cuda != nullptr && cuda->last_moe_wgmma();
        if (st.wgmma && !on_wgmma) {
          std::printf("%8lld %6lld %8lld %-8s (no sm_90a device: the mma.sync kernel ran)\n", static_cast<long long>(E),
                      static_cast<long long>(T), static_cast<long long>(T * K / E), st.name);
          continue;
        }
        const std::string label = !st.mma ? std::string("gemv")
                                  : on_wgmma ? absl::StrCat("wg ", took)
                                  : st.tile_rows > 0 ? std::string(st.name)
                                                     : absl::StrCat("auto ", took);
        const char* chosen = label.c_str();
        if (st.tile_rows == 32) t32 = t;
        std::printf("%8lld %6lld %8lld %-8s %10.3f %10.1f %12.0f %13.2fx\n", static_cast<long long>(E),
                    static_cast<long long>(T), static_cast<long long>(rows), chosen, t * 1e3,
                    2.0 * T * K * 3 * H * I / t / 1e12, static_cast<double>(E * 3 * H * I * 2) / t / 1e9, t32 / t);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace llmrt

int main() { return llmrt::Main(); }
