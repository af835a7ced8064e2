// The dense (float32 / bfloat16 weight) matmul alone, as prefill and batched decode call it:
// T activation rows x a weight of R rows x K columns, on one thread or several splitting the
// weight rows as the backend's pool does. Prints GFLOP/s per thread against the FMA peak the
// caller states (--peak-gflops: lanes x 2 FMA ports x 2 x GHz for one core) and the weight bytes
// read per second (at 1 row, decode's bandwidth-bound case: use a weight larger than the last-level
// cache, e.g. --rows 65536 --cols 1024); a program that prints a table, not a test.
//
//   llmrt_dense_microbench [--rows 4096] [--cols 4096] [--tokens 1,8,16,32,64,128,512]
//                          [--dtype bf16|f32] [--threads 1] [--reps 3] [--peak-gflops 0]
//                          [--path fma|tiles|bf16]
//
// --path (bf16 weights): fma = the exact policy's float32 FMA kernels (MatMulRows); tiles = the
// exact policy on AMX tiles (activations split into three bf16 parts, SplitActivationsBf16x3,
// the split timed with the matmul); bf16 = the BF16 policy (activations rounded, timed too).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/backend/cpu/bf16_dot.h"
#include "src/backend/cpu/cache_line_vector.h"
#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"
#include "tests/backend/microbench_util.h"

namespace llmrt::cpu {
namespace {

int Main(int argc, char** argv) {
  int64_t rows = 4096, cols = 4096;
  std::vector<int64_t> tokens = {1, 8, 16, 32, 64, 128, 512};
  std::string dtype = "bf16", path = "fma";
  int threads = 1, reps = 3;
  int64_t pad = 0;
  double peak = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--rows") rows = std::atoll(v);
    else if (a == "--cols") cols = std::atoll(v);
    else if (a == "--tokens") tokens = microbench::ParseList(v);
    else if (a == "--dtype") dtype = v;
    else if (a == "--path") path = v;
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--reps") reps = std::atoi(v);
    else if (a == "--pad") pad = std::atoll(v);
    else if (a == "--peak-gflops") peak = std::atof(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (dtype != "bf16" && dtype != "f32") {
    std::fprintf(stderr, "--dtype is bf16 or f32\n");
    return 2;
  }
  if (path != "fma" && path != "tiles" && path != "bf16") {
    std::fprintf(stderr, "--path is fma, tiles or bf16\n");
    return 2;
  }
  if (path != "fma" && dtype != "bf16") {
    std::fprintf(stderr, "--path %s takes --dtype bf16\n", path.c_str());
    return 2;
  }
  if (path == "tiles" && !Bf16IsaAvailable(Bf16Isa::kAmx)) {
    std::fprintf(stderr, "--path tiles needs AMX-BF16 tiles, which this CPU (or OS) does not offer\n");
    return 2;
  }
  const DType wd = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  CacheLineVector<float> wf(static_cast<size_t>(rows * cols));
  for (float& v : wf) v = nd(rng);
  CacheLineVector<uint16_t> wb;
  const void* w = wf.data();
  if (wd == DType::kBF16) {
    wb.resize(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = F32ToBf16(wf[i]);
    w = wb.data();
  }
  int64_t tmax = 1;
  for (int64_t t : tokens) tmax = std::max(tmax, t);
  CacheLineVector<float> x(static_cast<size_t>(tmax * (cols + pad))), out(static_cast<size_t>(tmax * rows));
  for (float& v : x) v = nd(rng);
  Bf16Activations xb;
  std::printf("dense matmul (%s), %s weight %lld x %lld (%.1f MiB), %d thread(s), best of %d\n\n", path.c_str(),
              dtype.c_str(),
              static_cast<long long>(rows), static_cast<long long>(cols),
              static_cast<double>(rows * cols * DTypeSize(wd)) / (1 << 20), threads, reps);
  std::printf(
      "| rows of activations | ms | GFLOP/s per thread | of peak | weight GB/s (all threads) |\n"
      "|---:|---:|---:|---:|---:|\n");
  for (int64_t t : tokens) {
    const double s = microbench::Best(reps, [&] {
      if (path == "fma") {
        microbench::Split(threads, rows, [&](int64_t n0, int64_t n1) {
          MatMulRows(wd, w, cols, x.data(), cols + pad, t, out.data(), rows, n0, n1);
        });
        return;
      }
      if (path == "tiles") {
        SplitActivationsBf16x3(x.data(), cols + pad, t, cols, &xb);
      } else {
        RoundActivationsBf16(x.data(), cols + pad, t, cols, &xb);
      }
      const Bf16Isa isa = path == "tiles" ? Bf16Isa::kAmx : BestBf16Isa();
      microbench::Split(threads, rows, [&](int64_t n0, int64_t n1) {
        Bf16MatMulRows(isa, Bf16Loop::kAuto, wb.data(), cols, xb, out.data(), rows, n0, n1);
      });
    });
    const double gf = 2.0 * static_cast<double>(t * rows * cols) / s / 1e9 / threads;
    const double gbs = static_cast<double>(rows * cols * DTypeSize(wd)) / s / 1e9;
    std::printf("| %lld | %.2f | %.1f | %s | %.2f |\n", static_cast<long long>(t), s * 1e3, gf,
                peak > 0 ? (std::to_string(static_cast<int>(100 * gf / peak + 0.5)) + "%").c_str() : "-", gbs);
  }
  return 0;
}

}  // namespace
}  // namespace llmrt::cpu

int main(int argc, char** argv) { return llmrt::cpu::Main(argc, argv); }
