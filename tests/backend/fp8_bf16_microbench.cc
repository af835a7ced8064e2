// FP8 block-scaled matmul kernels alone: the exact path (float32 activations) against the BF16
// policy's paths (`vdpbf16ps` GEMV / GEMM, AMX tiles), with the weights in L2 (the kernels'
// instruction cost) and streaming from DRAM (against a plain read loop over the same bytes), on
// one thread or several splitting the rows as the backend's pool does. A program that prints a
// table, not a test.
//
//   llmrt_fp8_bf16_microbench [--cols 4096] [--l2-rows 256] [--dram-mib 1024] [--tokens 1,16,64]
//                             [--threads 1] [--target AVX2]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/backend/cpu/bf16_dot.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/fp8_bf16_dot.h"
#include "src/backend/cpu/kernels.h"
#include "src/quant/fp8.h"
#include "tests/backend/microbench_util.h"

namespace llmrt::cpu {
namespace {

using microbench::Best;
using microbench::ReadAll;
using microbench::Split;

struct Matrix {
  StoredMatrix stored;
  Weight w;
};

// Gaussian weights quantized with 128 x 128 block scales (as the checkpoints), so the codes have
// the usual share of subnormals.
Matrix MakeFp8(CpuBackend& be, int64_t rows, int64_t cols, std::mt19937& rng) {
  Matrix m;
  StoredMatrix& s = m.stored;
  s.format = kWeightFp8Block;
  s.rows = rows;
  s.cols = cols;
  s.params.block_rows = s.params.block_cols = 128;
  s.codes = NewHostArray(DType::kF8E4M3, {rows, cols});
  const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
  s.scales = NewHostArray(DType::kF32, {sr, sc});
  auto* q = const_cast<uint8_t*>(s.codes.data);
  auto* sv = reinterpret_cast<float*>(const_cast<uint8_t*>(s.scales.data));
  // A block's largest value at about 4.5 sigma maps to 448.
  std::normal_distribution<float> d(0.0f, 448.0f / 4.5f);
  for (int64_t i = 0; i < rows * cols; ++i) q[i] = Fp8E4M3::FromFloat(d(rng));
  for (int64_t i = 0; i < sr * sc; ++i) sv[i] = 0.02f * 4.5f / 448.0f;
  m.w = *be.PrepareWeight(s);
  return m;
}

int g_threads = 1;

void Run(int64_t cols, int64_t l2_rows, int64_t dram_mib, const std::vector<int64_t>& tokens) {
  std::mt19937 rng(1);
  BackendOptions o;
  o.num_threads = 1;
  CpuBackend be(o);
  const int64_t targets = hwy::SupportedTargets();
  std::printf("%d thread(s); Highway target %s; FP8 e4m3, 128x128 block scales, %lld columns; GB/s of codes "
              "(rows x cols bytes)\n",
              g_threads, hwy::TargetName(targets & -targets), static_cast<long long>(cols));
  std::printf("bf16 paths: best %s; avx512-bf16+vbmi %s; amx %s\n", Bf16IsaName(BestFp8Bf16Isa()),
              Fp8Bf16IsaAvailable(Bf16Isa::kAvx512Bf16) ? "yes" : "no",
              Fp8Bf16IsaAvailable(Bf16Isa::kAmx) ? "yes" : "no");
  struct Case {
    const char* name;
    int64_t rows;
    int reps;
  };
  const int64_t dram_rows = dram_mib * 1024 * 1024 / cols;
  const Case cases[] = {{"in L2", l2_rows, 200}, {"from DRAM", dram_rows, 5}};
  std::printf("\n| matrix | tokens | exact GB/s | avx512-bf16 GB/s | amx GB/s | read loop GB/s |\n"
              "|---|---:|---:|---:|---:|---:|\n");
  for (const Case& c : cases) {
    Matrix m = MakeFp8(be, c.rows, cols, rng);
    const Fp8BlockMatrix fm = Fp8BlockOf(m.w);
    const double bytes = static_cast<double>(c.rows) * static_cast<double>(cols);
    std::atomic<uint64_t> sink{0};  // keeps the reads; each thread adds its sum once
    const double ro = Best(c.reps, [&] {
      Split(g_threads, c.rows,
            [&](int64_t a, int64_t b) { sink += ReadAll(fm.codes + a * cols, (b - a) * cols); });
    });
    for (int64_t T : tokens) {
      std::normal_distribution<float> d(0.0f, 1.0f);
      CacheLineVector<float> x(static_cast<size_t>(T * cols));
      for (auto& v : x) v = d(rng);
      std::vector<float> out(static_cast<size_t>(T * c.rows));
      const int reps = std::max(2, static_cast<int>(c.reps / std::max<int64_t>(1, T / 4)));
      // Buffers reused across calls, as the backend's are (thread_local there).
      CacheLineVector<float> scratch;
      Fp8Bf16Activations xb;
      const double te = Best(reps, [&] {
        int64_t ld = 0;
        const float* xp = PrepareActivations(m.w, x.data(), cols, T, scratch, &ld);
        Split(g_threads, c.rows,
              [&](int64_t a, int64_t b) { MatMulWeightRows(m.w, xp, ld, T, out.data(), c.rows, a, b); });
      });
      double tv = 0, ta = 0;
      for (Bf16Isa isa : {Bf16Isa::kAvx512Bf16, Bf16Isa::kAmx}) {
        if (!Fp8Bf16IsaAvailable(isa)) continue;
        const double t = Best(reps, [&] {
          RoundActivationsFp8Bf16(x.data(), cols, T, cols, &xb, isa == Bf16Isa::kAmx);
          Split(g_threads, c.rows, [&](int64_t a, int64_t b) { Fp8MatMulRows(isa, fm, xb, out.data(), c.rows, a, b); });
        });
        (isa == Bf16Isa::kAmx ? ta : tv) = t;
      }
      auto gbs = [&](double t) { return t > 0 ? bytes / t / 1e9 : 0.0; };
      std::printf("| %s (%lld rows) | %lld | %.2f | %.2f | %.2f | %.2f |\n", c.name, static_cast<long long>(c.rows),
                  static_cast<long long>(T), gbs(te), gbs(tv), gbs(ta), gbs(ro));
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu

int main(int argc, char** argv) {
  int64_t cols = 4096, l2_rows = 256, dram_mib = 1024;
  std::vector<int64_t> tokens = {1};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--cols") cols = std::atoll(argv[i + 1]);
    else if (a == "--l2-rows") l2_rows = std::atoll(argv[i + 1]);
    else if (a == "--dram-mib") dram_mib = std::atoll(argv[i + 1]);
    else if (a == "--threads") llmrt::cpu::g_threads = std::atoi(argv[i + 1]);
    else if (a == "--tokens") tokens = llmrt::microbench::ParseList(argv[i + 1]);
    else if (a == "--target") {
      if (!llmrt::microbench::PinTarget(argv[i + 1])) return 2;
    } else {
      std::fprintf(stderr, "usage: %s [--cols N] [--l2-rows N] [--dram-mib N] [--tokens 1,16,64] [--target NAME]\n",
                   argv[0]);
      return 2;
    }
  }
  llmrt::cpu::Run(cols, l2_rows, dram_mib, tokens);
  return 0;
}
