// Setup and timing helpers shared by the kernel microbenchmarks (programs that print tables).
#ifndef LLMRT_TESTS_BACKEND_MICROBENCH_UTIL_H_
#define LLMRT_TESTS_BACKEND_MICROBENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "hwy/targets.h"

namespace llmrt::microbench {

// The value, or the status printed and the program ended (setup steps of a benchmark).
template <typename T>
T Must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

inline void MustOk(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` timings of fn (seconds).
template <typename Fn>
double Best(int reps, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = Now();
    fn();
    best = std::min(best, Now() - t0);
  }
  return best;
}

// A read of every byte, 8 at a time in four chains: the ceiling of a kernel streaming these
// bytes on one core.
inline uint64_t ReadAll(const uint8_t* p, size_t n) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n / 8; i += 4) {
    a += w[i];
    b ^= w[i + 1];
    c += w[i + 2];
    d ^= w[i + 3];
  }
  return a + b + c + d;
}

// fn(n0, n1) over [0, rows) split between `threads` threads (each its own rows, as the backend's
// pool splits a matmul), timed as one call.
template <typename Fn>
void Split(int threads, int64_t rows, Fn&& fn) {
  std::vector<std::thread> ts;
  const int64_t per = (rows / threads + 31) / 32 * 32;
  for (int i = 1; i < threads; ++i) {
    const int64_t a = std::min(rows, i * per), b = std::min(rows, (i + 1) * per);
    ts.emplace_back([&fn, a, b] { fn(a, b); });
  }
  fn(0, std::min(rows, per));
  for (auto& t : ts) t.join();
}

// "1,4,16" -> {1, 4, 16}.
inline std::vector<int64_t> ParseList(const char* p) {
  std::vector<int64_t> v;
  while (*p) {
    v.push_back(std::stoll(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

// Pins Highway's dynamic dispatch to the target named `name` (as hwy::TargetName spells it,
// "AVX2", "AVX3", "AVX3_ZEN4", ...), to time a smaller instruction set's kernels on a larger
// CPU; false (and the names there are) when this CPU or build lacks it.
inline bool PinTarget(const std::string& name) {
  std::string names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
    names += std::string(" ") + hwy::TargetName(t);
  }
  std::fprintf(stderr, "target %s is not available; available:%s\n", name.c_str(), names.c_str());
  return false;
}

}  // namespace llmrt::microbench

#endif  // LLMRT_TESTS_BACKEND_MICROBENCH_UTIL_H_
