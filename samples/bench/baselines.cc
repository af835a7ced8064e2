#include "baselines.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "src/backend/cpu/kernels.h"
#include "src/util/bf16.h"

namespace llm_bench {

namespace {

using Clock = std::chrono::steady_clock;

// Best wall time of 4 runs of fn(thread index) on `threads` threads at once.
template <typename Fn>
double BestParallelSeconds(int threads, Fn fn) {
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { fn(i); });
    for (auto& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

double MemcpyBandwidth(int threads, double* read_only_gbs) {
  const size_t bytes = size_t{1} << 30;
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  const size_t chunk = bytes / threads;
  const double best = BestParallelSeconds(threads, [&](int i) {
    std::memcpy(dst.data() + i * chunk, src.data() + i * chunk, chunk);
  });
  *read_only_gbs = bytes / best / 1e9;
  return 2.0 * bytes / best / 1e9;
}

double KernelStreamBandwidth(int threads) {
  const int64_t K = 4096, rows = (int64_t{1} << 30) / (2 * K);
  std::vector<uint16_t> w(static_cast<size_t>(rows * K), llmrt::F32ToBf16(0.5f));
  std::vector<float> x(K, 1.0f), out(rows);
  const int64_t chunk = rows / threads;
  const double best = BestParallelSeconds(threads, [&](int i) {
    llmrt::cpu::MatMulRows(llmrt::DType::kBF16, w.data(), K, x.data(), K, 1, out.data(), rows, i * chunk,
                           i == threads - 1 ? rows : (i + 1) * chunk);
  });
  return w.size() * 2.0 / best / 1e9;
}

}  // namespace llm_bench
