#include "src/quant/synthetic_weights.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/quant/synthetic_values.h"

namespace llmrt {
namespace {

using synthetic::Bf16Element;
using synthetic::Fp8Code;
using synthetic::Fp8Scale;
using synthetic::Int4Byte;
using synthetic::Int4Scale;
using synthetic::Mix;
using synthetic::ScaleStream;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Runs fn(r0, r1) over row ranges of [0, rows) on up to one thread per core when the part is
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

// The format's `slice` rule for FP8 blocks (src/quant/formats/fp8_block.cc): each bound a
// multiple of the block size, or the matrix's edge.
absl::Status CheckBlockBounds(const char* dim, int64_t begin, int64_t n, int64_t total, int64_t block) {
  const int64_t end = begin + n;
  if (begin % block != 0 || (end % block != 0 && end != total)) {
    return absl::FailedPreconditionError(absl::StrCat(dim, " [", begin, ", ", end, ") of ", total,
                                                      " do not fall on FP8 blocks of ", block));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t SyntheticStream(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return Mix(h ^ Mix(seed + 0x9e3779b97f4a7c15ull));
}

absl::StatusOr<HostArray> NewSyntheticArray(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
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

absl::Status CheckSyntheticSpec(const SyntheticMatrixSpec& s) {
  if (s.rows < 0 || s.cols < 0 || s.row0 < 0 || s.col0 < 0 || s.part_rows < 0 || s.part_cols < 0 ||
      s.row0 + s.part_rows > s.rows || s.col0 + s.part_cols > s.cols) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic weights: rows [", s.row0, ", ", s.row0 + s.part_rows,
                                                   ") x columns [", s.col0, ", ", s.col0 + s.part_cols,
                                                   ") are not a part of \"", s.name, "\" [", s.rows, ", ", s.cols,
                                                   "]"));
  }
  switch (s.format) {
    case kWeightBf16:
      return absl::OkStatus();
    case kWeightFp8Block: {
      const int64_t br = s.params.block_rows, bc = s.params.block_cols;
      if (br <= 0 || bc <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("synthetic weights: FP8 blocks ", br, " x ", bc, " for \"",
                                                       s.name, "\""));
      }
      if (s.whole()) return absl::OkStatus();
      if (absl::Status st = CheckBlockBounds("rows", s.row0, s.part_rows, s.rows, br); !st.ok()) return st;
      return CheckBlockBounds("columns", s.col0, s.part_cols, s.cols, bc);
    }
    case kWeightInt4Group: {
      const int64_t g = s.params.group;
      if (g <= 0 || g % 2 != 0 || s.cols % g != 0) {
        return absl::DataLossError(absl::StrCat("INT4 group size ", g, " does not divide the ", s.cols,
                                                " columns of \"", s.name, "\""));
      }
      if (s.col0 % g != 0 || s.part_cols % g != 0) {
        return absl::FailedPreconditionError(absl::StrCat("columns [", s.col0, ", ", s.col0 + s.part_cols, ") of ",
                                                          s.cols, " do not fall on INT4 groups of ", g));
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("synthetic weights: \"", s.name, "\" in weight format id ",
                                                     int{s.format}, ", which is not made synthetically"));
  }
}

absl::StatusOr<StoredMatrix> MakeSyntheticPart(const SyntheticMatrixSpec& s) {
  if (absl::Status st = CheckSyntheticSpec(s); !st.ok()) return st;
  StoredMatrix m;
  m.format = s.format;
  m.params = s.params;
  m.rows = s.part_rows;
  m.cols = s.part_cols;
  const int64_t nr = s.part_rows, nc = s.part_cols, r0 = s.row0, c0 = s.col0, cols = s.cols;
  const uint64_t stream = s.stream, scale_stream = ScaleStream(s.stream);
  if (s.format == kWeightFp8Block) {
    const int64_t br = s.params.block_rows, bc = s.params.block_cols, nbc = CeilDiv(cols, bc);
    // The scale blocks the part covers (the format's slice keeps the same ones).
    const int64_t sb0 = r0 / br, snb = CeilDiv(r0 + nr, br) - sb0, scb0 = c0 / bc, sncb = CeilDiv(c0 + nc, bc) - scb0;
    auto codes = NewSyntheticArray(s.name, DType::kF8E4M3, {nr, nc});
    if (!codes.ok()) return codes.status();
    auto scales = NewSyntheticArray(s.name + "_scale_inv", DType::kF32, {snb, sncb});
    if (!scales.ok()) return scales.status();
    m.codes = *std::move(codes);
    m.scales = *std::move(scales);
    auto* out = const_cast<uint8_t*>(m.codes.data);
    auto* sc = reinterpret_cast<float*>(const_cast<uint8_t*>(m.scales.data));
    for (int64_t i = 0; i < snb; ++i) {
      for (int64_t j = 0; j < sncb; ++j) {
        sc[i * sncb + j] = Fp8Scale(scale_stream, static_cast<uint64_t>((sb0 + i) * nbc + scb0 + j));
      }
    }
    ForRows(nr, nc, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) {
        const uint64_t base = static_cast<uint64_t>((r0 + r) * cols + c0);
        uint8_t* row = out + r * nc;
        for (int64_t c = 0; c < nc; ++c) row[c] = Fp8Code(stream, base + static_cast<uint64_t>(c));
      }
    });
    return m;
  }
  if (s.format == kWeightInt4Group) {
    const int64_t g = s.params.group;
    const std::string stem = absl::EndsWith(s.name, "weight") ? s.name.substr(0, s.name.size() - 6) : s.name + ".";
    auto codes = NewSyntheticArray(stem + "weight_packed", DType::kU8, {nr, nc / 2});
    if (!codes.ok()) return codes.status();
    auto scales = NewSyntheticArray(stem + "weight_scale", DType::kBF16, {nr, nc / g});
    if (!scales.ok()) return scales.status();
    m.codes = *std::move(codes);
    m.scales = *std::move(scales);
    auto* out = const_cast<uint8_t*>(m.codes.data);
    auto* sc = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(m.scales.data));
    ForRows(nr, nc, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) {
        const uint64_t scale_base = static_cast<uint64_t>((r0 + r) * (cols / g) + c0 / g);
        for (int64_t j = 0; j < nc / g; ++j) {
          sc[r * (nc / g) + j] = Int4Scale(scale_stream, scale_base + static_cast<uint64_t>(j));
        }
        const uint64_t base = static_cast<uint64_t>((r0 + r) * cols + c0);
        uint8_t* row = out + r * (nc / 2);
        for (int64_t j = 0; j < nc / 2; ++j) row[j] = Int4Byte(stream, base + static_cast<uint64_t>(2 * j));
      }
    });
    return m;
  }
  auto codes = NewSyntheticArray(s.name, DType::kBF16, {nr, nc});
  if (!codes.ok()) return codes.status();
  m.codes = *std::move(codes);
  auto* out = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(m.codes.data));
  ForRows(nr, nc, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      const uint64_t base = static_cast<uint64_t>((r0 + r) * cols + c0);
      uint16_t* row = out + r * nc;
      for (int64_t c = 0; c < nc; ++c) row[c] = Bf16Element(stream, base + static_cast<uint64_t>(c));
    }
  });
  return m;
}

}  // namespace llmrt
