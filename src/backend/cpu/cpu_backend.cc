#include "src/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/bf16_dot.h"
#include "src/backend/cpu/fp8_bf16_dot.h"
#include "src/backend/cpu/kernels.h"
#include "src/backend/sampling.h"
#include "src/util/bf16.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// 64-byte aligned host memory.
class HostStorage final : public Storage {
 public:
  explicit HostStorage(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  ~HostStorage() override { std::free(data_); }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// Element i of a norm weight or bias (F32 or BF16 vector).
float VectorAt(const Weight& w, int64_t i) {
  return w.format == kWeightBf16 ? Bf16ToF32(w.data.data_as<uint16_t>()[i]) : w.data.data_as<float>()[i];
}

void RmsNormRow(const float* xi, const Weight& w, float eps, int64_t D, float* o) {
  // Sum of squares in float32 like torch's mean over a float32 tensor; a double accumulator
  // keeps the result independent of the summation order.
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(xi[i]) * xi[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / D) + eps);
  for (int64_t i = 0; i < D; ++i) o[i] = VectorAt(w, i) * (xi[i] * inv);
}

}  // namespace

BackendEntry CpuBackendEntry() {
  BackendEntry e;
  e.kind = BackendKind::kCpu;
  e.available = [] { return true; };
  e.create = [](const BackendOptions& o) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(new CpuBackend(o));
  };
  return e;
}

CpuBackend::CpuBackend(const BackendOptions& options)
    : weight_memory_(cpu::ResolveWeightMemory(options.weight_memory == WeightMemory::kDevice ? WeightMemory::kAuto
                                                                                           : options.weight_memory)),
      pool_(options.num_threads),
      activations_(options.activations),
      exact_tiles_(options.exact_on_tiles && cpu::Bf16IsaAvailable(cpu::Bf16Isa::kAmx)) {}

void CpuBackend::Fail(absl::Status status) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.ok()) error_ = std::move(status);
  failed_.store(true, std::memory_order_relaxed);
}

absl::Status CpuBackend::Synchronize() {
  if (!failed_.load(std::memory_order_relaxed)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(error_mu_);
  absl::Status s = std::move(error_);
  error_ = absl::OkStatus();
  failed_.store(false, std::memory_order_relaxed);
  return s;
}

absl::StatusOr<Tensor> CpuBackend::DoAllocate(DType dtype, const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  auto storage = std::make_shared<HostStorage>(bytes);
  if (storage->data() == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  void* data = storage->data();
  return Tensor(std::move(storage), data, dtype, shape, rank);
}

absl::StatusOr<Tensor> CpuBackend::ImportHost(std::shared_ptr<Storage> keepalive, const void* data, DType dtype,
                                              const int64_t* shape, int rank) {
  // Under kHugePages every tensor is copied into the huge-page arena. Otherwise the bytes are
  // used in place, except that kernels load elements in their own type: bytes at an address that
  // is not a multiple of the element size (a safetensors offset may be anything) are copied to
  // aligned memory.
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  if (weight_memory_ == WeightMemory::kHugePages) {
    LLMRT_ASSIGN_OR_RETURN(cpu::HugePageArena::Copy copy, weight_arena_.CopyIn(keepalive, data, bytes, &pool_));
    return Tensor(std::move(copy.keepalive), copy.data, dtype, shape, rank);
  }
  if (reinterpret_cast<uintptr_t>(data) % DTypeSize(dtype) == 0) {
    return Tensor(std::move(keepalive), const_cast<void*>(data), dtype, shape, rank);
  }
  auto storage = std::make_shared<HostStorage>(bytes);
  if (storage->data() == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  std::memcpy(storage->data(), data, bytes);
  void* p = storage->data();
  return Tensor(std::move(storage), p, dtype, shape, rank);
}

bool CpuBackend::SupportsWeightFormat(WeightFormatId format) const { return cpu::FindMatMulKernel(format) != nullptr; }

absl::StatusOr<Weight> CpuBackend::PrepareWeight(const StoredMatrix& m) {
  const WeightFormatTraits* traits = FindWeightFormat(m.format);
  if (traits == nullptr || !SupportsWeightFormat(m.format)) {
    return absl::UnimplementedError(absl::StrCat("weight format ", static_cast<int>(m.format),
                                                 " has no CPU kernel"));
  }
  Weight w;
  w.format = m.format;
  w.quantized = traits->quantized;
  w.rows = m.rows;
  w.cols = m.cols;
  w.params = m.params;
  LLMRT_ASSIGN_OR_RETURN(w.data, ImportHost(m.codes.keepalive, m.codes.data, m.codes.dtype, m.codes.shape.data(),
                                            static_cast<int>(m.codes.shape.size())));
  if (!m.scales.shape.empty()) {
    LLMRT_ASSIGN_OR_RETURN(w.scales, ImportHost(m.scales.keepalive, m.scales.data, m.scales.dtype,
                                                m.scales.shape.data(), static_cast<int>(m.scales.shape.size())));
  }
  return w;
}

absl::StatusOr<std::unique_ptr<ExpertBank>> CpuBackend::PrepareExperts(std::vector<ExpertWeights> experts) {
  return std::unique_ptr<ExpertBank>(new CpuExpertBank(std::move(experts)));
}

absl::Status CpuBackend::Upload(const void* src, size_t bytes, const Tensor& dst) {
  if (bytes > dst.bytes() || !dst.contiguous()) {
    return absl::InternalError(absl::StrCat("upload of ", bytes, " bytes into a ", dst.bytes(), "-byte tensor"));
  }
  if (bytes > 0) std::memcpy(dst.data(), src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::Download(const Tensor& src, void* dst, size_t bytes) {
  if (bytes > src.bytes() || !src.contiguous()) {
    return absl::InternalError(absl::StrCat("download of ", bytes, " bytes from a ", src.bytes(), "-byte tensor"));
  }
  if (bytes > 0) std::memcpy(dst, src.data(), bytes);
  return absl::OkStatus();
}

void CpuBackend::Fill(const Tensor& t, float value) {
  Run("Fill", [&] {
    LLMRT_CHECK(t.dtype() == DType::kF32 && t.contiguous());
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  });
}

void CpuBackend::Embedding(const Weight& table, const Tensor& ids, const Tensor& out) {
  Run("Embedding", [&] {
    const int64_t T = ids.dim(0), H = table.cols;
    LLMRT_CHECK(out.dim(0) == T && out.row_size() == H);
    LLMRT_CHECK(table.format == kWeightBf16 || table.format == kWeightF32);
    const int32_t* id = ids.data_as<int32_t>();
    for (int64_t t = 0; t < T; ++t) {
      LLMRT_CHECK(id[t] >= 0 && id[t] < table.rows);
      float* o = out.data_as<float>() + t * out.row_stride();
      if (table.format == kWeightBf16) {
        Bf16ToF32Array(table.data.data_as<uint16_t>() + id[t] * H, o, H);
      } else {
        std::memcpy(o, table.data.data_as<float>() + id[t] * H, H * sizeof(float));
      }
    }
  });
}

void CpuBackend::RmsNorm(const Tensor& x, const Weight& w, float eps, const Tensor& out) {
  Run("RmsNorm", [&] {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CHECK(w.rows == D && out.dim(0) == T && out.row_size() == D);
    for (int64_t t = 0; t < T; ++t) {
      RmsNormRow(x.data_as<float>() + t * x.row_stride(), w, eps, D, out.data_as<float>() + t * out.row_stride());
    }
  });
}

void CpuBackend::HeadRmsNorm(const Tensor& x, int64_t head_dim, const Weight& w, float eps, const Tensor& out) {
  Run("HeadRmsNorm", [&] {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CHECK(head_dim > 0 && D % head_dim == 0 && w.rows == head_dim && out.dim(0) == T && out.row_size() == D);
    for (int64_t t = 0; t < T; ++t) {
      const float* xi = x.data_as<float>() + t * x.row_stride();
      float* o = out.data_as<float>() + t * out.row_stride();
      for (int64_t g = 0; g < D; g += head_dim) RmsNormRow(xi + g, w, eps, head_dim, o + g);
    }
  });
}

void CpuBackend::LayerNorm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& out) {
  Run("LayerNorm", [&] {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CHECK(w.rows == D && b.rows == D && out.dim(0) == T && out.row_size() == D);
    for (int64_t t = 0; t < T; ++t) {
      const float* xi = x.data_as<float>() + t * x.row_stride();
      float* o = out.data_as<float>() + t * out.row_stride();
      // Biased variance, as torch's layer_norm.
      double sum = 0;
      for (int64_t i = 0; i < D; ++i) sum += xi[i];
      const double mean = sum / D;
      double var = 0;
      for (int64_t i = 0; i < D; ++i) var += (xi[i] - mean) * (xi[i] - mean);
      const float inv = 1.0f / std::sqrt(static_cast<float>(var / D) + eps);
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < D; ++i) o[i] = (xi[i] - m) * inv * VectorAt(w, i) + VectorAt(b, i);
    }
  });
}

void CpuBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  Run("Add", [&] {
    const int64_t T = a.dim(0), D = a.row_size();
    LLMRT_CHECK(b.dim(0) == T && b.row_size() == D && out.dim(0) == T && out.row_size() == D);
    for (int64_t t = 0; t < T; ++t) {
      const float* pa = a.data_as<float>() + t * a.row_stride();
      const float* pb = b.data_as<float>() + t * b.row_stride();
      float* po = out.data_as<float>() + t * out.row_stride();
      for (int64_t i = 0; i < D; ++i) po[i] = pa[i] + pb[i];
    }
  });
}

void CpuBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  Run("SiluMul", [&] {
    const int64_t T = gate.dim(0), D = gate.row_size();
    LLMRT_CHECK(up.dim(0) == T && up.row_size() == D && out.dim(0) == T && out.row_size() == D);
    for (int64_t t = 0; t < T; ++t) {
      const float* g = gate.data_as<float>() + t * gate.row_stride();
      const float* u = up.data_as<float>() + t * up.row_stride();
      float* o = out.data_as<float>() + t * out.row_stride();
      for (int64_t i = 0; i < D; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
}

void CpuBackend::AddBias(const Tensor& x, const Weight& bias) {
  Run("AddBias", [&] {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CHECK(bias.rows == D);
    for (int64_t t = 0; t < T; ++t) {
      float* r = x.data_as<float>() + t * x.row_stride();
      for (int64_t i = 0; i < D; ++i) r[i] += VectorAt(bias, i);
    }
  });
}

void CpuBackend::GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  Run("GatherRows", [&] {
    const int64_t S = rows.dim(0), D = x.row_size();
    LLMRT_CHECK(out.dim(0) == S && out.row_size() == D);
    const int32_t* r = rows.data_as<int32_t>();
    for (int64_t s = 0; s < S; ++s) {
      LLMRT_CHECK(r[s] >= 0 && r[s] < x.dim(0));
      std::memcpy(out.data_as<float>() + s * out.row_stride(), x.data_as<float>() + r[s] * x.row_stride(),
                  D * sizeof(float));
    }
  });
}

void CpuBackend::SampleTokens(const Tensor& logits, const Tensor& params, const Tensor& random_rows,
                              const Tensor& ids) {
  Run("SampleTokens", [&] {
    const int64_t R = logits.dim(0), V = logits.row_size();
    LLMRT_CHECK(ids.numel() == R && params.numel() == R * kSamplingWords && random_rows.numel() <= R);
    const int32_t* words = params.data_as<int32_t>();
    int32_t* out = ids.data_as<int32_t>();
    for (int64_t r = 0; r < R; ++r) {
      SamplingParams p;
      double draw = 0.0;
      UnpackSamplingRow(words + r * kSamplingWords, &p, &draw);
      out[r] = SampleRow(logits.data_as<float>() + r * logits.row_stride(), V, p, draw);
    }
  });
}

const cpu::MatMulKernel* CpuBackend::Int8KernelFor(const Weight& w) const {
  return activations_ == QuantizedActivations::kInt8 && w.quantized ? cpu::FindInt8MatMulKernel(w) : nullptr;
}

bool CpuBackend::UsesBf16Dot(const Weight& w) const {
  // The FP8 policy takes BF16 weights as the BF16 policy does; FP8 weights get e4m3 activations.
  const bool policy = activations_ == QuantizedActivations::kBf16 || activations_ == QuantizedActivations::kFp8;
  return policy && (w.format == kWeightBf16 || (w.format == kWeightFp8Block && cpu::Fp8SupportsBf16(w)));
}

void CpuBackend::Fp8ActivationsFor(const float* x, int64_t ldx, int64_t t, const Weight& w,
                                   cpu::Fp8Bf16Activations* out) const {
  const bool tiles = cpu::BestFp8Bf16Isa() == cpu::Bf16Isa::kAmx;
  if (activations_ == QuantizedActivations::kFp8) {
    cpu::QuantizeActivationsFp8(x, ldx, t, w.cols, w.params.block_cols, out, tiles);
  } else {
    cpu::RoundActivationsFp8Bf16(x, ldx, t, w.cols, out, tiles);
  }
}

namespace {
// The smallest chunk of weight rows a matmul hands to a thread. Decode (a few activation rows,
// bound by the weight reads): 16 rows, so that the pool's shrinking chunks even out the threads'
// finishing times. Prefill and batched decode (bound by arithmetic): 48 rows, whole blocks of
// every blocked kernel (12 or 16 rows, 4-row tiles), and fewer chunks, each of which streams
// its activation blocks again.
size_t RowGrain(int64_t t) { return t >= 8 ? 48 : 16; }
}  // namespace

void CpuBackend::MatMulRaw(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo) {
  // Rounded once per call, read by every worker (as the INT8 policy's codes below).
  // (A lambda names a thread_local, it does not capture it: the workers get these references.)
  if (UsesBf16Dot(w) && w.format == kWeightFp8Block) {
    thread_local cpu::Fp8Bf16Activations rounded;
    cpu::Fp8Bf16Activations& xb = rounded;
    Fp8ActivationsFor(x, ldx, t, w, &xb);
    const cpu::Fp8BlockMatrix m = cpu::Fp8BlockOf(w);
    pool_.ParallelFor(static_cast<size_t>(w.rows), RowGrain(t), [&](size_t n0, size_t n1) {
      cpu::Fp8MatMulRowsBest(m, xb, out, ldo, static_cast<int64_t>(n0), static_cast<int64_t>(n1));
    });
    return;
  }
  if (UsesBf16Dot(w)) {
    thread_local cpu::Bf16Activations rounded;
    cpu::Bf16Activations& xb = rounded;
    cpu::RoundActivationsBf16(x, ldx, t, w.cols, &xb);
    const uint16_t* wp = w.data.data_as<uint16_t>();
    pool_.ParallelFor(static_cast<size_t>(w.rows), RowGrain(t), [&](size_t n0, size_t n1) {
      cpu::Bf16MatMulRowsBest(wp, w.cols, xb, out, ldo, static_cast<int64_t>(n0), static_cast<int64_t>(n1));
    });
    return;
  }
  MatMulRawExact(x, ldx, t, w, out, ldo);
}

void CpuBackend::MatMulExactTiles(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo,
                                  bool pool) {
  // Split once per call, read by every worker; over the pool too (a 64-session step spent 4% of
  // its time splitting and packing on the calling thread while the workers waited).
  thread_local cpu::Bf16Activations split;
  cpu::Bf16Activations& xs = split;
  const cpu::ParallelRunner runner = [this](size_t n, const std::function<void(size_t, size_t)>& body) {
    pool_.ParallelFor(n, 1, body);
  };
  cpu::SplitActivationsBf16x3(x, ldx, t, w.cols, &xs, pool ? &runner : nullptr);
  const uint16_t* wp = w.data.data_as<uint16_t>();
  const auto rows = [&](size_t n0, size_t n1) {
    cpu::Bf16MatMulRows(cpu::Bf16Isa::kAmx, cpu::Bf16Loop::kAuto, wp, w.cols, xs, out, ldo, static_cast<int64_t>(n0),
                        static_cast<int64_t>(n1));
  };
  if (pool) {
    pool_.ParallelFor(static_cast<size_t>(w.rows), RowGrain(t), rows);
  } else {
    rows(0, static_cast<size_t>(w.rows));
  }
}

void CpuBackend::MatMulRawExact(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo) {
  if (UsesExactTiles(w)) {
    MatMulExactTiles(x, ldx, t, w, out, ldo, /*pool=*/true);
    return;
  }
  if (const cpu::MatMulKernel* k = Int8KernelFor(w)) {
    // Rounded once per call, read by every worker (each token row's codes depend on that row only).
    // (A lambda names a thread_local, it does not capture it: the workers get this reference.)
    thread_local cpu::Int8Activations rounded;
    cpu::Int8Activations& xq = rounded;
    cpu::QuantizeActivationsInt8(x, ldx, t, w.cols, &xq);
    pool_.ParallelFor(static_cast<size_t>(w.rows), RowGrain(t), [&](size_t n0, size_t n1) {
      k->rows_int8(w, xq, out, ldo, static_cast<int64_t>(n0), static_cast<int64_t>(n1));
    });
    return;
  }
  thread_local cpu::CacheLineVector<float> scratch;  // INT4's permuted activations, reused across calls
  int64_t ld = 0;
  const float* xp = cpu::PrepareActivations(w, x, ldx, t, scratch, &ld);
  pool_.ParallelFor(static_cast<size_t>(w.rows), RowGrain(t), [&](size_t n0, size_t n1) {
    cpu::MatMulWeightRows(w, xp, ld, t, out, ldo, static_cast<int64_t>(n0), static_cast<int64_t>(n1));
  });
}

void CpuBackend::MatMulRowsSerial(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo) {
  if (UsesBf16Dot(w) && w.format == kWeightFp8Block) {
    thread_local cpu::Fp8Bf16Activations xb;
    Fp8ActivationsFor(x, ldx, t, w, &xb);
    cpu::Fp8MatMulRowsBest(cpu::Fp8BlockOf(w), xb, out, ldo, 0, w.rows);
    return;
  }
  if (UsesBf16Dot(w)) {
    thread_local cpu::Bf16Activations xb;
    cpu::RoundActivationsBf16(x, ldx, t, w.cols, &xb);
    cpu::Bf16MatMulRowsBest(w.data.data_as<uint16_t>(), w.cols, xb, out, ldo, 0, w.rows);
    return;
  }
  if (UsesExactTiles(w)) {
    MatMulExactTiles(x, ldx, t, w, out, ldo, /*pool=*/false);
    return;
  }
  if (const cpu::MatMulKernel* k = Int8KernelFor(w)) {
    thread_local cpu::Int8Activations xq;
    cpu::QuantizeActivationsInt8(x, ldx, t, w.cols, &xq);
    k->rows_int8(w, xq, out, ldo, 0, w.rows);
    return;
  }
  thread_local cpu::CacheLineVector<float> scratch;
  int64_t ld = 0;
  const float* xp = cpu::PrepareActivations(w, x, ldx, t, scratch, &ld);
  cpu::MatMulWeightRows(w, xp, ld, t, out, ldo, 0, w.rows);
}

void CpuBackend::MatMul(const Tensor& x, const Weight& w, const Tensor& out) {
  Run("MatMul", [&] {
    LLMRT_CHECK(x.rank() == 2 && out.rank() == 2);
    LLMRT_CHECK(x.dim(1) == w.cols && out.dim(1) == w.rows && out.dim(0) == x.dim(0));
    MatMulRaw(x.data_as<float>(), x.row_stride(), x.dim(0), w, out.data_as<float>(), out.row_stride());
  });
}

void CpuBackend::Rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const RopeTable& rope,
                      bool interleaved, const Tensor& positions) {
  Run("Rope", [&] {
    const int64_t T = x.dim(0), half = rope.half;
    LLMRT_CHECK(x.row_size() == heads * head_dim && offset + 2 * half <= head_dim);
    const int32_t* pos = positions.data_as<int32_t>();
    const float* inv_freq = rope.inv_freq.data_as<float>();
    thread_local std::vector<float> cs;
    cs.resize(static_cast<size_t>(2 * half));
    for (int64_t t = 0; t < T; ++t) {
      // As transformers: freqs = position (float32) * inv_freq (float32), cos/sin in float32,
      // then times attention_factor.
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];
        cs[2 * i] = std::cos(angle) * rope.attention_factor;
        cs[2 * i + 1] = std::sin(angle) * rope.attention_factor;
      }
      float* row = x.data_as<float>() + t * x.row_stride();
      for (int64_t h = 0; h < heads; ++h) {
        float* v = row + h * head_dim + offset;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[2 * i], s = cs[2 * i + 1];
          float* a = interleaved ? v + 2 * i : v + i;
          float* b = interleaved ? v + 2 * i + 1 : v + i + half;
          const float x1 = *a, x2 = *b;
          *a = x1 * c - x2 * s;
          *b = x2 * c + x1 * s;
        }
      }
    }
  });
}

}  // namespace llmrt

namespace llmrt {

// Collectives are not skipped after a failure (see Backend): the communicator is told, moves no
// data, and makes the collective fail on every rank.
namespace {

// Adds the time from construction to destruction to a counter.
class CollectiveTimer {
 public:
  explicit CollectiveTimer(std::atomic<uint64_t>& ns) : ns_(ns), t0_(std::chrono::steady_clock::now()) {}
  ~CollectiveTimer() {
    ns_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - t0_)
                                            .count()),
                  std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t>& ns_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

void CpuBackend::AllReduceSum(const Tensor& x) {
  if (comm_ == nullptr || comm_->size() == 1) return;
  CollectiveTimer timer(collective_ns_);
  bool failed = failed_.load(std::memory_order_relaxed);
  if (!failed && (x.dtype() != DType::kF32 || !x.contiguous())) {
    Fail(absl::InternalError(absl::StrCat("AllReduceSum: ", x.ShapeString(), " is not contiguous float32")));
    failed = true;
  }
  const absl::Status st = comm_->AllReduceSum(x.data(), static_cast<size_t>(x.numel()), DType::kF32, failed);
  if (!st.ok() && !failed) Fail(st);
}

void CpuBackend::AllGatherColumns(const Tensor& local, const Tensor& scratch, const Tensor& out) {
  const int64_t S = local.dim(0), n = local.row_size();
  const int64_t ranks = comm_ != nullptr ? comm_->size() : 1;
  if (ranks == 1) {
    Run("AllGatherColumns", [&] {
      LLMRT_CHECK(out.dim(0) == S && out.row_size() == n);
      for (int64_t s = 0; s < S; ++s) {
        std::memcpy(out.data_as<float>() + s * out.row_stride(), local.data_as<float>() + s * local.row_stride(),
                    n * sizeof(float));
      }
    });
    return;
  }
  CollectiveTimer timer(collective_ns_);
  bool failed = failed_.load(std::memory_order_relaxed);
  if (!failed && (!local.contiguous() || !scratch.contiguous() || scratch.numel() < ranks * S * n ||
                  out.dim(0) != S || out.row_size() != ranks * n)) {
    Fail(absl::InternalError(absl::StrCat("AllGatherColumns: local ", local.ShapeString(), ", scratch ",
                                          scratch.ShapeString(), ", out ", out.ShapeString(), " do not fit ", ranks,
                                          " ranks")));
    failed = true;
  }
  const absl::Status st = comm_->AllGather(local.data(), scratch.data(), static_cast<size_t>(S * n), DType::kF32, failed);
  if (!st.ok() && !failed) Fail(st);
  // scratch [ranks, S, n] -> out [S, ranks * n]
  Run("AllGatherColumns", [&] {
    for (int64_t r = 0; r < ranks; ++r) {
      for (int64_t s = 0; s < S; ++s) {
        std::memcpy(out.data_as<float>() + s * out.row_stride() + r * n, scratch.data_as<float>() + (r * S + s) * n,
                    n * sizeof(float));
      }
    }
  });
}

void CpuBackend::EmbeddingShard(const Weight& table, int64_t first_id, const Tensor& ids, const Tensor& out) {
  Run("EmbeddingShard", [&] {
    const int64_t T = ids.dim(0), H = table.cols;
    LLMRT_CHECK(out.dim(0) == T && out.row_size() == H);
    LLMRT_CHECK(table.format == kWeightBf16 || table.format == kWeightF32);
    const int32_t* id = ids.data_as<int32_t>();
    for (int64_t t = 0; t < T; ++t) {
      float* o = out.data_as<float>() + t * out.row_stride();
      const int64_t row = static_cast<int64_t>(id[t]) - first_id;
      if (row < 0 || row >= table.rows) {
        std::fill(o, o + H, 0.0f);
      } else if (table.format == kWeightBf16) {
        Bf16ToF32Array(table.data.data_as<uint16_t>() + row * H, o, H);
      } else {
        std::memcpy(o, table.data.data_as<float>() + row * H, H * sizeof(float));
      }
    }
  });
}

}  // namespace llmrt
