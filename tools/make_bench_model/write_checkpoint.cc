// WriteCheckpoint: the generated weights. Values are xorshift64 streams seeded per tensor (and
// per byte offset, so a tensor is produced in chunks without holding it in memory), uniform
// within +-1.7/sqrt(columns) for matrices; norm weights are ones, F32 tensors zeros.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "src/util/bf16.h"
#include "src/util/safetensors.h"
#include "tools/make_bench_model/bench_model.h"

namespace llmrt::bench {

namespace {

namespace fs = std::filesystem;

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Copies the tokenizer files of `from` into `dir` where they differ.
bool CopyTokenizer(const fs::path& from, const fs::path& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    if (!fs::is_regular_file(from / name, ec)) {
      std::fprintf(stderr, "llm-make-bench-model: no %s in the tokenizer directory %s\n", name, from.c_str());
      return false;
    }
    const std::string text = ReadAll(from / name);
    if (fs::exists(dir / name, ec) && ReadAll(dir / name) == text) continue;
    std::ofstream out(dir / name, std::ios::binary);
    out << text;
    if (!out.flush()) {
      std::fprintf(stderr, "llm-make-bench-model: cannot write %s\n", (dir / name).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

bool WriteCheckpoint(const BenchConfig& c, const fs::path& dir, const fs::path& tokenizer_dir, bool* wrote) {
  *wrote = false;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "llm-make-bench-model: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  if (!tokenizer_dir.empty() && !CopyTokenizer(tokenizer_dir, dir)) return false;
  const std::string cfg = ConfigJson(c).dump(2);
  if (ReadAll(dir / "config.json") == cfg && fs::exists(dir / "model.safetensors", ec)) return true;
  std::fprintf(stderr, "llm-make-bench-model: writing a generated checkpoint to %s ...\n", dir.c_str());
  std::vector<llmrt::TensorToWrite> out;
  uint64_t seed = 1;
  // xorshift64 bytes for tensor seed s0 from byte offset `begin` (so chunks are reproducible).
  auto random_bytes = [](uint64_t s0, uint8_t* dst, size_t begin, size_t n, auto map) {
    uint64_t x = s0 * 0x9e3779b97f4a7c15ull + begin + 1;
    for (size_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      dst[i] = map(x);
    }
  };
  auto constant = [](std::vector<uint8_t> pattern) {
    return [pattern](uint8_t* dst, size_t begin, size_t n) {
      for (size_t i = 0; i < n; ++i) dst[i] = pattern[(begin + i) % pattern.size()];
    };
  };
  for (const auto& t : Tensors(c)) {
    const float scale = t.shape.size() == 2 ? 1.0f / std::sqrt(static_cast<float>(t.shape[1])) : 0.01f;
    const bool ones = t.ones, f32 = t.f32;
    const uint64_t s0 = seed++;
    if (IsQuantized(c, t.name, t.shape)) {
      const int64_t rows = t.shape[0], cols = t.shape[1];
      const std::string stem = t.name.substr(0, t.name.size() - 6);  // drop "weight"
      if (c.weights == "fp8") {
        // Codes of magnitude 2^-3..2^1 (exponent 4..8), either sign; scale_inv brings them to
        // the BF16 model's spread.
        out.push_back({t.name, "F8_E4M3", t.shape, nullptr, static_cast<size_t>(rows * cols),
                       [=](uint8_t* dst, size_t begin, size_t n) {
                         random_bytes(s0, dst, begin, n, [](uint64_t x) {
                           return static_cast<uint8_t>((x & 0x80) | (((x >> 8) % 5 + 4) << 3) | ((x >> 16) & 7));
                         });
                       }});
        const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
        float sv = scale * 1.7f / 2.0f;
        std::vector<uint8_t> pat(4);
        std::memcpy(pat.data(), &sv, 4);
        out.push_back({t.name + "_scale_inv", "F32", {br, bc}, nullptr, static_cast<size_t>(br * bc * 4), constant(pat)});
      } else {
        const int64_t g = Int4Group(c);
        out.push_back({stem + "weight_packed", "I32", {rows, cols / 8}, nullptr, static_cast<size_t>(rows * cols / 2),
                       [=](uint8_t* dst, size_t begin, size_t n) {
                         random_bytes(s0, dst, begin, n, [](uint64_t x) { return static_cast<uint8_t>(x >> 24); });
                       }});
        const uint16_t sb = llmrt::F32ToBf16(scale * 1.7f / 7.0f);
        out.push_back({stem + "weight_scale", "BF16", {rows, cols / g}, nullptr, static_cast<size_t>(rows * (cols / g) * 2),
                       constant({static_cast<uint8_t>(sb & 0xFF), static_cast<uint8_t>(sb >> 8)})});
        const int32_t dims[2] = {static_cast<int32_t>(rows), static_cast<int32_t>(cols)};
        std::vector<uint8_t> pat(8);
        std::memcpy(pat.data(), dims, 8);
        out.push_back({stem + "weight_shape", "I32", {2}, nullptr, 8, constant(pat)});
      }
      continue;
    }
    llmrt::TensorToWrite w;
    w.name = t.name;
    w.dtype = t.f32 ? "F32" : "BF16";
    w.shape = t.shape;
    w.bytes = static_cast<size_t>(Numel(t.shape)) * (t.f32 ? 4 : 2);
    w.fill = [=](uint8_t* dst, size_t begin, size_t n) {
      if (f32) {
        std::memset(dst, 0, n);
        return;
      }
      uint16_t* p = reinterpret_cast<uint16_t*>(dst);
      uint64_t x = s0 * 0x9e3779b97f4a7c15ull + begin;
      for (size_t i = 0; i < n / 2; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const float u = static_cast<float>((x >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
        p[i] = llmrt::F32ToBf16(ones ? 1.0f : u * scale * 1.7f);
      }
    };
    out.push_back(std::move(w));
  }
  auto st = llmrt::WriteSafetensors((dir / "model.safetensors").string(), out);
  if (!st.ok()) {
    std::fprintf(stderr, "llm-make-bench-model: %s\n", std::string(st.message()).c_str());
    return false;
  }
  std::ofstream(dir / "config.json") << cfg;
  *wrote = true;
  return true;
}

bool WriteConfigOnly(const BenchConfig& c, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "llm-make-bench-model: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
  out << ConfigJson(c).dump(2);
  out.close();
  if (!out) {
    std::fprintf(stderr, "llm-make-bench-model: cannot write %s\n", (dir / "config.json").c_str());
    return false;
  }
  return true;
}

}  // namespace llmrt::bench
