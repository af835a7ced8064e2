// INT4 group-quantized matmul kernels alone: the exact path (float32 activations) against the
// W4A8 path (int8 activations, integer dot products, each available instruction set), next to a
// BF16 weight of the same shape on the exact path and a plain read loop over the same bytes,
// with the weights in L2 (the kernels' instruction cost) and streaming from DRAM, on one thread
// or several splitting the rows as the backend's pool does. A program that prints a table, not
// a test.
//
//   llmrt_int4_microbench [--cols 4096] [--group 32] [--l2-rows 256] [--dram-mib 512]
//                         [--tokens 1,4,16] [--threads 1]
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

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/int8_dot.h"
#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"
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

uint8_t* Mutable(const HostArray& a) { return const_cast<uint8_t*>(a.data); }

// Uniform random codes (every nibble) and bf16 scales near 2^-4; or bf16 Gaussian weights.
Matrix Make(CpuBackend& be, WeightFormatId format, int64_t rows, int64_t cols, int64_t group, std::mt19937& rng) {
  Matrix m;
  StoredMatrix& s = m.stored;
  s.format = format;
  s.rows = rows;
  s.cols = cols;
  if (format == kWeightInt4Group) {
    s.params.group = group;
    s.codes = NewHostArray(DType::kU8, {rows, cols / 2});
    uint8_t* q = Mutable(s.codes);
    for (int64_t i = 0; i < rows * cols / 2; ++i) q[i] = static_cast<uint8_t>(rng());
    s.scales = NewHostArray(DType::kBF16, {rows, cols / group});
    auto* sv = reinterpret_cast<uint16_t*>(Mutable(s.scales));
    for (int64_t i = 0; i < rows * (cols / group); ++i) sv[i] = F32ToBf16(std::ldexp(1.0f + (rng() % 64) / 64.0f, -4));
  } else {
    s.codes = NewHostArray(DType::kBF16, {rows, cols});
    auto* q = reinterpret_cast<uint16_t*>(Mutable(s.codes));
    for (int64_t i = 0; i < rows * cols; ++i) q[i] = F32ToBf16(static_cast<float>(static_cast<int>(rng() % 255) - 127) / 512.0f);
  }
  m.w = *be.PrepareWeight(s);
  return m;
}

int g_threads = 1;

void Run(int64_t cols, int64_t group, int64_t l2_rows, int64_t dram_mib, const std::vector<int64_t>& tokens) {
  std::mt19937 rng(1);
  BackendOptions o;
  o.num_threads = 1;
  CpuBackend be(o);
  std::printf("%d thread(s); INT4 g%lld vs BF16, %lld columns; GB/s of weight bytes (codes + scales)\n", g_threads,
              static_cast<long long>(group), static_cast<long long>(cols));
  std::vector<Int8Isa> isas;
  for (Int8Isa isa : {Int8Isa::kAvx2, Int8Isa::kAvxVnni, Int8Isa::kAvx512Vnni}) {
    if (Int8IsaAvailable(isa)) isas.push_back(isa);
  }
  std::printf("\n| matrix | tokens | int4 exact | ");
  for (Int8Isa isa : isas) std::printf("w4a8 %s | ", Int8IsaName(isa));
  std::printf("int4 read loop | bf16 exact | bf16 read loop |\n|---|---:|---:|");
  for (size_t i = 0; i < isas.size(); ++i) std::printf("---:|");
  std::printf("---:|---:|---:|\n");
  // One INT4 byte holds two columns; 2 bytes per BF16 column: the DRAM case keeps the INT4
  // matrix at dram_mib and the BF16 one at 4x its rows' bytes.
  const int64_t dram_rows = dram_mib * 1024 * 1024 / (cols / 2);
  struct Case {
    const char* name;
    int64_t rows;
    int reps;
  };
  const Case cases[] = {{"in L2", l2_rows, 200}, {"from DRAM", dram_rows, 5}};
  for (const Case& c : cases) {
    Matrix q = Make(be, kWeightInt4Group, c.rows, cols, group, rng);
    Matrix b = Make(be, kWeightBf16, c.rows, cols, group, rng);
    const MatrixBytes qb = BytesOf(q.w), bb = BytesOf(b.w);
    const double qbytes = static_cast<double>(c.rows) * static_cast<double>(cols / 2 + cols / group * 2);
    const double bbytes = static_cast<double>(c.rows) * static_cast<double>(cols * 2);
    std::atomic<uint64_t> sink{0};
    auto read_loop = [&](const MatrixBytes& mb, int64_t row_bytes) {
      return Best(c.reps, [&] {
        Split(g_threads, c.rows, [&](int64_t a, int64_t e) { sink += ReadAll(mb.codes + a * row_bytes, (e - a) * row_bytes); });
      });
    };
    const double q_ro = read_loop(qb, cols / 2), b_ro = read_loop(bb, cols * 2);
    for (int64_t T : tokens) {
      std::normal_distribution<float> d(0.0f, 1.0f);
      CacheLineVector<float> x(static_cast<size_t>(T * cols));
      for (auto& v : x) v = d(rng);
      std::vector<float> out(static_cast<size_t>(T * c.rows));
      const int reps = std::max(2, static_cast<int>(c.reps / std::max<int64_t>(1, T / 4)));
      CacheLineVector<float> scratch;
      auto exact = [&](const Weight& w) {
        return Best(reps, [&] {
          int64_t ld = 0;
          const float* xp = PrepareActivations(w, x.data(), cols, T, scratch, &ld);
          Split(g_threads, c.rows, [&](int64_t a, int64_t e) { MatMulWeightRows(w, xp, ld, T, out.data(), c.rows, a, e); });
        });
      };
      const double tq = exact(q.w), tb = exact(b.w);
      Int8Activations xa;
      std::vector<double> ti;
      for (Int8Isa isa : isas) {
        ti.push_back(Best(reps, [&] {
          QuantizeActivationsInt8(isa, x.data(), cols, T, cols, &xa);
          Split(g_threads, c.rows, [&](int64_t a, int64_t e) { Int4RowsInt8(isa, q.w, xa, out.data(), c.rows, a, e); });
        }));
      }
      auto gbs = [](double bytes, double t) { return bytes / t / 1e9; };
      std::printf("| %s (%lld rows) | %lld | %.2f | ", c.name, static_cast<long long>(c.rows), static_cast<long long>(T),
                  gbs(qbytes, tq));
      for (double t : ti) std::printf("%.2f | ", gbs(qbytes, t));
      std::printf("%.2f | %.2f | %.2f |\n", gbs(qbytes, q_ro), gbs(bbytes, tb), gbs(bbytes, b_ro));
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu

int main(int argc, char** argv) {
  int64_t cols = 4096, group = 32, l2_rows = 256, dram_mib = 512;
  std::vector<int64_t> tokens = {1, 4, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--cols") cols = std::atoll(argv[i + 1]);
    else if (a == "--group") group = std::atoll(argv[i + 1]);
    else if (a == "--l2-rows") l2_rows = std::atoll(argv[i + 1]);
    else if (a == "--dram-mib") dram_mib = std::atoll(argv[i + 1]);
    else if (a == "--threads") llmrt::cpu::g_threads = std::atoi(argv[i + 1]);
    else if (a == "--tokens") tokens = llmrt::microbench::ParseList(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--cols N] [--group N] [--l2-rows N] [--dram-mib N] [--tokens 1,4,16] [--threads N]\n",
                   argv[0]);
      return 2;
    }
  }
  llmrt::cpu::Run(cols, group, l2_rows, dram_mib, tokens);
  return 0;
}
