#include "src/model/synthetic.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"

namespace llmrt {
namespace {

// SplitMix64's finalizer: a bijection of 64-bit words whose outputs pass BigCrush for
// consecutive inputs, so hashing (stream + index) gives independent-looking values per element
// without any sequential state (threads and slices need none).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The stream of tensor `name` under `seed` (FNV-1a of the name, mixed with the seed).
uint64_t TensorStream(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return Mix(h ^ Mix(seed + 0x9e3779b97f4a7c15ull));
}

// Element i of a stream: uniform in [-1, 1) (24 bits, exact in float).
float Uniform(uint64_t stream, uint64_t i) {
  const uint64_t x = Mix(stream + i * 0x9e3779b97f4a7c15ull);
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Half-width of a uniform distribution of standard deviation kSyntheticStd.
const float kHalfWidth = kSyntheticStd * std::sqrt(3.0f);

// Runs fn(r0, r1) over row ranges of [0, rows) on up to one thread per core when the matrix is
// large (Kimi K2's expert matrices are 14.7 M elements each, its lm_head 1.2 G), inline otherwise.
void ForRows(int64_t rows, int64_t cols, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kElementsPerThread = int64_t{1} << 20;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t n = std::min({hw, rows, std::max<int64_t>(1, rows * cols / kElementsPerThread)});
  if (n <= 1) {
    fn(0, rows);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n - 1));
  const int64_t per = (rows + n - 1) / n;
  for (int64_t t = 1; t < n; ++t) {
    const int64_t r0 = std::min(rows, t * per), r1 = std::min(rows, (t + 1) * per);
    threads.emplace_back([&fn, r0, r1] { fn(r0, r1); });
  }
  fn(0, std::min(rows, per));
  for (std::thread& t : threads) t.join();
}

// Host memory of this machine in bytes (0 when unknown).
uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

absl::StatusOr<HostArray> Allocate(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  // A tensor larger than the machine's memory is refused before it is asked for: under
  // overcommit the allocation could succeed and the generator's first touch of it would bring
  // the out-of-memory killer instead of an error.
  const uint64_t bytes = static_cast<uint64_t>(n) * DTypeSize(dtype), phys = PhysicalMemoryBytes();
  if (phys > 0 && bytes > phys) {
    return absl::ResourceExhaustedError(absl::StrCat("synthetic weights: tensor \"", name, "\" needs ", bytes,
                                                     " bytes of host memory; this machine has ", phys));
  }
  try {
    return NewHostArray(dtype, std::move(shape));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("synthetic weights: out of host memory for tensor \"", name,
                                                     "\" (", n * static_cast<int64_t>(DTypeSize(dtype)), " bytes)"));
  }
}

void FillBf16(uint64_t stream, int64_t rows, int64_t cols, uint16_t* out) {
  ForRows(rows, cols, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
      out[i] = F32ToBf16(kHalfWidth * Uniform(stream, static_cast<uint64_t>(i)));
    }
  });
}

// Codes e4m3 of uniform values over the whole range [-448, 448] (never NaN: FromFloat saturates
// and its input is finite); each block's scale, kHalfWidth / 448 within +-25%, brings them back
// to the distribution of FillBf16.
void FillFp8(uint64_t stream, int64_t rows, int64_t cols, const WeightParams& p, uint8_t* codes, float* scales) {
  const int64_t nbr = (rows + p.block_rows - 1) / p.block_rows, nbc = (cols + p.block_cols - 1) / p.block_cols;
  const uint64_t scale_stream = Mix(stream ^ 0x5ca1e5ull);
  for (int64_t b = 0; b < nbr * nbc; ++b) {
    scales[b] = kHalfWidth / Fp8E4M3::kMax * (1.0f + 0.25f * Uniform(scale_stream, static_cast<uint64_t>(b)));
  }
  ForRows(rows, cols, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
      codes[i] = Fp8E4M3::FromFloat(Fp8E4M3::kMax * Uniform(stream, static_cast<uint64_t>(i)));
    }
  });
}

// INT4 codes q uniform in [-7, 7], stored q + 8 two per byte (even column in the low nibble);
// each group's bfloat16 scale, positive, makes q * scale of standard deviation kSyntheticStd
// within +-25% (q's own deviation is sqrt(56 / 3)).
void FillInt4(uint64_t stream, int64_t rows, int64_t cols, int64_t group, uint8_t* packed, uint16_t* scales) {
  const uint64_t scale_stream = Mix(stream ^ 0x5ca1e5ull);
  const float unit = kSyntheticStd / std::sqrt(56.0f / 3.0f);
  ForRows(rows, cols, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < cols / group; ++g) {
        const int64_t k = r * (cols / group) + g;
        scales[k] = F32ToBf16(unit * (1.0f + 0.25f * Uniform(scale_stream, static_cast<uint64_t>(k))));
      }
      for (int64_t j = 0; j < cols / 2; ++j) {
        uint8_t byte = 0;
        for (int half = 0; half < 2; ++half) {
          const uint64_t i = static_cast<uint64_t>(r * cols + 2 * j + half);
          const uint64_t x = Mix(stream + i * 0x9e3779b97f4a7c15ull);
          const int q = static_cast<int>((x >> 32) % 15) - 7;
          byte |= static_cast<uint8_t>((q + 8) << (4 * half));
        }
        packed[r * (cols / 2) + j] = byte;
      }
    }
  });
}

}  // namespace

WeightFormatId SyntheticFormat(const ModelConfig& c, const std::string& name, WeightParams* params) {
  *params = {};
  const bool in_layers = absl::StartsWith(name, c.prefix + "layers.");
  const bool router = absl::EndsWith(name, ".mlp.gate.weight");
  switch (c.quant.method) {
    case QuantConfig::Method::kFp8Block:
      if (!in_layers || router || absl::EndsWith(name, ".indexer.weights_proj.weight")) return kWeightBf16;
      params->block_rows = c.quant.block_rows;
      params->block_cols = c.quant.block_cols;
      return kWeightFp8Block;
    case QuantConfig::Method::kCompressedInt4:
      if (!in_layers || name.find(".mlp.experts.") == std::string::npos) return kWeightBf16;
      params->group = c.quant.group_size;
      return kWeightInt4Group;
    case QuantConfig::Method::kNone:
      break;
  }
  return kWeightBf16;
}

absl::StatusOr<StoredMatrix> MakeSyntheticMatrix(const ModelConfig& c, uint64_t seed, const std::string& name,
                                                 int64_t rows, int64_t cols) {
  StoredMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.format = SyntheticFormat(c, name, &m.params);
  const uint64_t stream = TensorStream(seed, name);
  if (m.format == kWeightFp8Block) {
    const WeightParams& p = m.params;
    const int64_t nbr = (rows + p.block_rows - 1) / p.block_rows, nbc = (cols + p.block_cols - 1) / p.block_cols;
    auto codes = Allocate(name, DType::kF8E4M3, {rows, cols});
    if (!codes.ok()) return codes.status();
    auto scales = Allocate(name + "_scale_inv", DType::kF32, {nbr, nbc});
    if (!scales.ok()) return scales.status();
    m.codes = *std::move(codes);
    m.scales = *std::move(scales);
    FillFp8(stream, rows, cols, p, const_cast<uint8_t*>(m.codes.data),
            reinterpret_cast<float*>(const_cast<uint8_t*>(m.scales.data)));
    return m;
  }
  if (m.format == kWeightInt4Group) {
    const int64_t g = m.params.group;
    const std::string stem = name.substr(0, name.size() - 6);  // without "weight"
    if (g <= 0 || cols % g != 0) {
      return absl::DataLossError(absl::StrCat("INT4 group size ", g, " does not divide the ", cols, " columns of \"",
                                              name, "\""));
    }
    auto codes = Allocate(stem + "weight_packed", DType::kU8, {rows, cols / 2});
    if (!codes.ok()) return codes.status();
    auto scales = Allocate(stem + "weight_scale", DType::kBF16, {rows, cols / g});
    if (!scales.ok()) return scales.status();
    m.codes = *std::move(codes);
    m.scales = *std::move(scales);
    FillInt4(stream, rows, cols, g, const_cast<uint8_t*>(m.codes.data),
             reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(m.scales.data)));
    return m;
  }
  auto codes = Allocate(name, DType::kBF16, {rows, cols});
  if (!codes.ok()) return codes.status();
  m.codes = *std::move(codes);
  FillBf16(stream, rows, cols, reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(m.codes.data)));
  return m;
}

absl::StatusOr<HostArray> MakeSyntheticVector(const std::string& name, int64_t n) {
  const bool f32 = absl::EndsWith(name, ".e_score_correction_bias");
  auto v = Allocate(name, f32 ? DType::kF32 : DType::kBF16, {n});
  if (!v.ok()) return v.status();
  // NewHostArray zeroes: biases are done; norm weights become 1.
  if (absl::EndsWith(name, "norm.weight")) {
    auto* out = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(v->data));
    std::fill(out, out + n, F32ToBf16(1.0f));
  }
  return v;
}

}  // namespace llmrt
