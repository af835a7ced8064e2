// The CUDA backend: lifecycle, memory, the status channel, elementwise ops, norms, rope and
// matmul. KV, attention and MoE ops are in cuda_ops.cc.
#include "src/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/kernels.h"
#include "src/backend/cuda/cublaslt.h"
#include "src/backend/cuda/cuda_util.h"
#include "src/backend/sampling.h"
#include "src/util/errors.h"
#include "src/util/log.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

using cuda::ConstMat;
using cuda::MutMat;

// Pinned staging for host-to-device copies: two halves, so the host fills one while the other
// is copied.
constexpr size_t kStagingHalf = size_t{16} << 20;

// Device memory owned by tensors.
class DeviceStorage final : public Storage {
 public:
  explicit DeviceStorage(void* p) : ptr_(p) {}
  ~DeviceStorage() override { cudaFree(ptr_); }

 private:
  void* ptr_;
};

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

bool DeviceAvailable() { return DeviceCount() > 0; }

}  // namespace

BackendEntry CudaBackendEntry() {
  BackendEntry e;
  e.kind = BackendKind::kCuda;
  e.available = DeviceAvailable;
  e.create = CudaBackend::Create;
  e.device_count = DeviceCount;
  return e;
}

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const BackendOptions& options) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    return UnsupportedError(absl::StrCat("the cuda backend cannot run here: ",
                                         e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device"));
  }
  if (options.activations == QuantizedActivations::kInt8) {
    // An int8-activation path (IMMA / dp4a) is not written yet. Refused rather than silently
    // run exact.
    return absl::UnimplementedError("the cuda backend has no int8-activation matmuls (quantized_activations INT8); "
                                    "use LLM_ACTIVATIONS_EXACT, LLM_ACTIVATIONS_BF16 or the CPU backend");
  }
  if (options.device < 0 || options.device >= n) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.device, " does not exist (", n, " devices)"));
  }
  std::unique_ptr<CudaBackend> be(new CudaBackend(options));
  LLMRT_RETURN_IF_ERROR(be->Init());
  return std::unique_ptr<Backend>(std::move(be));
}

absl::Status CudaBackend::Init() {
  if (moe_tile_rows_ != 0 && moe_tile_rows_ != 32 && moe_tile_rows_ != 64 && moe_tile_rows_ != 128) {
    return absl::InvalidArgumentError(absl::StrCat("BackendOptions::device_moe_tile_rows ", moe_tile_rows_,
                                                   ": expected 0 (by the rows an expert gets), 32, 64 or 128"));
  }
  if (dsa_scores_ < 0 || dsa_scores_ > static_cast<int>(cuda::DsaScores::kTensorCores)) {
    return absl::InvalidArgumentError(absl::StrCat("BackendOptions::device_dsa_scores ", dsa_scores_,
                                                   ": expected 0 (tiled), 1 (staged), 2 (one thread a position) or 3 (tensor cores)"));
  }
  LLMRT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  cudaStream_t s = nullptr;
  LLMRT_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  stream_ = s;
  LLMRT_ASSIGN_OR_RETURN(void* err, DeviceMalloc(sizeof(int32_t), "the device error word"));
  error_word_ = static_cast<int32_t*>(err);
  LLMRT_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(error_word_, 0, sizeof(int32_t), s), "cudaMemsetAsync"));
  void* host = nullptr;
  LLMRT_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&host, sizeof(int32_t)), "cudaMallocHost (error word)"));
  error_host_ = static_cast<int32_t*>(host);
  if (cudaMallocHost(&host, 2 * kStagingHalf) != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", 2 * kStagingHalf, " bytes of pinned host memory for upload staging"));
  }
  staging_ = static_cast<uint8_t*>(host);
  for (void*& ev : staging_done_) {
    cudaEvent_t e = nullptr;
    LLMRT_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    ev = e;
  }
  scratch_.resize(kScratchSlots);
  if (activations_ == QuantizedActivations::kBf16 || activations_ == QuantizedActivations::kFp8) {
    LLMRT_ASSIGN_OR_RETURN(cublaslt_workspace_, DeviceMalloc(CublasLtGemm::kWorkspaceBytes, "the cuBLASLt workspace"));
    absl::StatusOr<std::unique_ptr<CublasLtGemm>> gemm = CublasLtGemm::Create(cublaslt_workspace_);
    if (!gemm.ok()) {
      return absl::Status(gemm.status().code(), absl::StrCat("the cuda backend: ", gemm.status().message()));
    }
    cublaslt_ = *std::move(gemm);
  }
  if (cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_) != cudaSuccess || sm_count_ < 1) {
    sm_count_ = 1;
  }
  // The most dynamic shared memory a block may opt into (227 KiB on Hopper, 99 KiB on the
  // consumer chips): kernels that need more take another path.
  if (cudaDeviceGetAttribute(&shared_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_) != cudaSuccess ||
      shared_optin_ < 48 * 1024) {
    shared_optin_ = 48 * 1024;
  }
  // The multiprocessor's shared memory and the driver's reserve per block: the tensor-core
  // attention's plan counts the blocks a multiprocessor holds with them.
  if (cudaDeviceGetAttribute(&shared_per_sm_, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device_) != cudaSuccess) {
    shared_per_sm_ = 0;
  }
  if (cudaDeviceGetAttribute(&shared_reserved_, cudaDevAttrReservedSharedMemoryPerBlock, device_) != cudaSuccess) {
    shared_reserved_ = 0;
  }
  cudaDeviceProp prop;
  const bool have_prop = cudaGetDeviceProperties(&prop, device_) == cudaSuccess;
  // A query refused above (its fallback taken) must not surface as the next launch's error.
  cudaGetLastError();
  if (have_prop) {
    Log(LogLevel::kInfo, absl::StrCat("cuda backend: device ", device_, " ", prop.name, ", compute capability ", prop.major, ".",
                         prop.minor, ", ", prop.totalGlobalMem >> 20, " MiB"));
    // cuBLASLt's 128 x 128 block-scaled FP8 GEMM is a Hopper (sm_90) feature; other devices run
    // the backend's own kernels under the FP8 policy.
    fp8_cublaslt_ = prop.major == 9;
    compute_capability_ = prop.major * 10 + prop.minor;
  }
  return CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);  // (a runtime may be destroyed from a thread whose device is another)
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (graph_captures_ > 0) {
    Log(LogLevel::kInfo, absl::StrCat("cuda backend: ", graph_replays_, " decode passes replayed from ", graph_captures_,
                                      " CUDA graphs"));
  }
  DropGraphs();
  cublaslt_.reset();
  if (cublaslt_workspace_ != nullptr) cudaFree(cublaslt_workspace_);
  for (ScratchBuffer& b : scratch_) cudaFree(b.ptr);
  for (auto& [w, c] : kv_b_bf16_) cudaFree(c.copy);
  for (void* ev : staging_done_) {
    if (ev != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  }
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (error_host_ != nullptr) cudaFreeHost(error_host_);
  if (error_word_ != nullptr) cudaFree(error_word_);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CudaBackend::Fail(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
  failed_ = true;
}

absl::Status CudaBackend::Synchronize() {
  if (!sticky_.ok()) return sticky_;
  cudaSetDevice(device_);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  absl::Status device = CudaStatus(cudaMemcpyAsync(error_host_, error_word_, sizeof(int32_t), cudaMemcpyDeviceToHost, s),
                                   "reading the device error word");
  if (device.ok()) device = AwaitStream();
  if (!device.ok()) {
    // Launch and execution errors of the stream are sticky: the context cannot be used again.
    sticky_ = absl::InternalError(absl::StrCat("the CUDA device failed: ", device.message()));
    return sticky_;
  }
  absl::Status result = std::move(error_);
  error_ = absl::OkStatus();
  failed_ = false;
  if (*error_host_ != cuda::kErrNone) {
    if (result.ok()) {
      result = absl::InternalError(absl::StrCat("a CUDA kernel found ", cuda::ErrorCodeName(*error_host_)));
    }
    *error_host_ = cuda::kErrNone;
    const absl::Status reset = CudaStatus(cudaMemsetAsync(error_word_, 0, sizeof(int32_t), s), "cudaMemsetAsync");
    if (!reset.ok() && result.ok()) result = reset;
  }
  return result;
}

absl::Status CudaBackend::AwaitStream() {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (comm_ == nullptr || comm_->size() < 2) return CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  // The stream may hold collectives: a rank that fails while they run would leave them waiting
  // forever, so the stream is polled and the communicator asked for such a failure meanwhile
  // (it then aborts itself, which ends its kernels).
  for (int polls = 0;; ++polls) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaStatus(e, "cudaStreamQuery");
    LLMRT_RETURN_IF_ERROR(comm_->AsyncError());
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

absl::StatusOr<void*> CudaBackend::DeviceMalloc(size_t bytes, const std::string& what) {
  cudaSetDevice(device_);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e == cudaSuccess) return p;
  cudaGetLastError();  // an allocation failure is not sticky: clear it
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  if (e == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " (", bytes, " bytes) does not fit in the memory of CUDA device ",
                                                     device_, " (", free_bytes, " of ", total, " bytes free)"));
  }
  return CudaStatus(e, absl::StrCat("cudaMalloc for ", what));
}

absl::StatusOr<Tensor> CudaBackend::DoAllocate(DType dtype, const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  LLMRT_ASSIGN_OR_RETURN(void* p, DeviceMalloc(bytes, absl::StrCat("a tensor of ", n, " elements")));
  return Tensor(std::make_shared<DeviceStorage>(p), p, dtype, shape, rank);
}

absl::Status CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  for (size_t off = 0; off < bytes; off += kStagingHalf) {
    const size_t n = std::min(kStagingHalf, bytes - off);
    const int h = staging_next_;
    staging_next_ ^= 1;
    // The half's previous copy must have left it before the host refills it.
    LLMRT_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(staging_done_[h])), "staging"));
    uint8_t* stage = staging_ + h * kStagingHalf;
    std::memcpy(stage, static_cast<const uint8_t*>(src) + off, n);
    LLMRT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(static_cast<uint8_t*>(dst) + off, stage, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync"));
    LLMRT_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(staging_done_[h]), s), "cudaEventRecord"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CudaBackend::ImportHost(std::shared_ptr<Storage> keepalive, const void* data, DType dtype,
                                               const int64_t* shape, int rank) {
  LLMRT_ASSIGN_OR_RETURN(Tensor t, DoAllocate(dtype, shape, rank));
  LLMRT_RETURN_IF_ERROR(CopyToDevice(t.data(), data, t.bytes()));
  // Progress of a load, about once per checkpoint shard (Kimi K2's and GLM-5's are ~4 GiB).
  constexpr uint64_t kLogEvery = uint64_t{4} << 30;
  const uint64_t before = imported_bytes_;
  imported_bytes_ += t.bytes();
  if (imported_bytes_ / kLogEvery != before / kLogEvery) {
    Log(LogLevel::kInfo, absl::StrCat("cuda backend: ", imported_bytes_ >> 20, " MiB of weights uploaded to device ",
                                      device_));
  }
  return t;  // the host bytes were copied into staging: `keepalive` is not needed
}

bool CudaBackend::SupportsWeightFormat(WeightFormatId format) const {
  return format == kWeightF32 || format == kWeightBf16 || format == kWeightFp8Block || format == kWeightInt4Group;
}

bool CudaBackend::SupportsKvCodec(const KvCodec& codec) const {
  // The built-ins (F32, BF16, FP8 per layer, FP8 tiled); kernels/attention.cu reads and writes them.
  return codec.id() <= kKvCodecFp8Tiled;
}

namespace {

// The bytes a stored matrix's codes and scales must have in its format, or an error naming the
// mismatch (a loader or quantizer that broke the format's invariants).
absl::Status CheckStoredBytes(const StoredMatrix& m) {
  const std::string what = absl::StrCat("a [", m.rows, ", ", m.cols, "] ", FindWeightFormat(m.format)->name, " matrix");
  int64_t code_bytes = 0, scale_bytes = 0;
  DType code_dtype = DType::kU8, scale_dtype = DType::kU8;
  switch (m.format) {
    case kWeightF32:
    case kWeightBf16:
      code_dtype = m.format == kWeightBf16 ? DType::kBF16 : DType::kF32;
      code_bytes = m.rows * m.cols * static_cast<int64_t>(DTypeSize(code_dtype));
      break;
    case kWeightFp8Block: {
      const int64_t br = m.params.block_rows, bc = m.params.block_cols;
      if (br <= 0 || bc <= 0) return absl::InvalidArgumentError(absl::StrCat(what, " without FP8 block sizes"));
      code_dtype = DType::kF8E4M3;
      code_bytes = m.rows * m.cols;
      scale_dtype = DType::kF32;
      scale_bytes = (m.rows + br - 1) / br * ((m.cols + bc - 1) / bc) * 4;
      break;
    }
    case kWeightInt4Group: {
      const int64_t g = m.params.group;
      if (g <= 0 || g % 2 != 0 || m.cols % g != 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": INT4 group ", g, " does not divide the columns"));
      }
      code_bytes = m.rows * (m.cols / 2);
      scale_dtype = DType::kBF16;
      scale_bytes = m.rows * (m.cols / g) * 2;
      break;
    }
    default:
      return absl::InternalError(absl::StrCat(what, ": not a format of this backend"));
  }
  if (m.codes.dtype != code_dtype || static_cast<int64_t>(m.codes.bytes) != code_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " whose codes (", m.codes.bytes, " bytes) do not match its format (", code_bytes, ")"));
  }
  if (scale_bytes > 0 && (m.scales.dtype != scale_dtype || static_cast<int64_t>(m.scales.bytes) != scale_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " whose scales (", m.scales.bytes, " bytes) do not match its format (", scale_bytes, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Weight> CudaBackend::PrepareWeight(const StoredMatrix& m) {
  if (!SupportsWeightFormat(m.format)) {
    const WeightFormatTraits* t = FindWeightFormat(m.format);
    return UnsupportedError(absl::StrCat("weight format ", t != nullptr ? t->name : "?", " (id ", int{m.format},
                                         ") has no CUDA kernel; the CUDA backend runs F32, BF16, FP8 block-scaled "
                                         "and INT4 group-scaled weights"));
  }
  LLMRT_RETURN_IF_ERROR(CheckStoredBytes(m));
  Weight w;
  w.format = m.format;
  w.quantized = m.format == kWeightFp8Block || m.format == kWeightInt4Group;
  w.rows = m.rows;
  w.cols = m.cols;
  w.params = m.params;
  if (!w.quantized) {
    LLMRT_ASSIGN_OR_RETURN(w.data, ImportHost(m.codes.keepalive, m.codes.data, m.codes.dtype, m.codes.shape.data(),
                                              static_cast<int>(m.codes.shape.size())));
    return w;
  }
  // Codes as bytes, in the stored order (the GEMV kernel reads it as it is: kernels/quant_matmul.cu),
  // and the scales in their dtype.
  const int64_t code_bytes = static_cast<int64_t>(m.codes.bytes);
  LLMRT_ASSIGN_OR_RETURN(w.data, ImportHost(m.codes.keepalive, m.codes.data, DType::kU8, &code_bytes, 1));
  const int64_t scale_count = static_cast<int64_t>(m.scales.bytes / DTypeSize(m.scales.dtype));
  LLMRT_ASSIGN_OR_RETURN(w.scales, ImportHost(m.scales.keepalive, m.scales.data, m.scales.dtype, &scale_count, 1));
  return w;
}

absl::StatusOr<std::optional<Weight>> CudaBackend::MakeSyntheticWeight(const SyntheticMatrixSpec& spec) {
  if (spec.format != kWeightBf16 && spec.format != kWeightFp8Block && spec.format != kWeightInt4Group) {
    return std::nullopt;
  }
  if (!sticky_.ok()) return sticky_;
  // The kernels' index arithmetic relies on it (the loader has checked it already).
  LLMRT_RETURN_IF_ERROR(CheckSyntheticSpec(spec));
  cudaSetDevice(device_);
  cudaStream_t s = Stream(stream_);
  const int64_t nr = spec.part_rows, nc = spec.part_cols;
  // Device tensors in the dtypes and shapes PrepareWeight gives the host-made part: BF16 codes
  // [nr, nc]; quantized codes as bytes and scales in their dtype, flat.
  const auto allocate = [&](DType dtype, std::vector<int64_t> shape, const char* what) -> absl::StatusOr<Tensor> {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    LLMRT_ASSIGN_OR_RETURN(void* p, DeviceMalloc(static_cast<size_t>(n) * DTypeSize(dtype),
                                                 absl::StrCat("the ", what, " of synthetic tensor \"", spec.name, "\"")));
    return Tensor(std::make_shared<DeviceStorage>(p), p, dtype, shape.data(), static_cast<int>(shape.size()));
  };
  Weight w;
  w.format = spec.format;
  w.quantized = spec.format != kWeightBf16;
  w.rows = nr;
  w.cols = nc;
  w.params = spec.params;
  const cuda::SyntheticPartRef part{spec.stream, spec.cols, spec.row0, nr, spec.col0, nc};
  if (spec.format == kWeightBf16) {
    LLMRT_ASSIGN_OR_RETURN(w.data, allocate(DType::kBF16, {nr, nc}, "codes"));
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchSyntheticBf16(part, w.data.data_as<uint16_t>(), s)));
  } else if (spec.format == kWeightFp8Block) {
    const int64_t br = spec.params.block_rows, bc = spec.params.block_cols;
    const int64_t snb = (spec.row0 + nr + br - 1) / br - spec.row0 / br;
    const int64_t sncb = (spec.col0 + nc + bc - 1) / bc - spec.col0 / bc;
    LLMRT_ASSIGN_OR_RETURN(w.data, allocate(DType::kU8, {nr * nc}, "codes"));
    LLMRT_ASSIGN_OR_RETURN(w.scales, allocate(DType::kF32, {snb * sncb}, "block scales"));
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchSyntheticFp8(part, br, bc, w.data.data_as<uint8_t>(),
                                                            w.scales.data_as<float>(), s)));
  } else {
    const int64_t g = spec.params.group;
    LLMRT_ASSIGN_OR_RETURN(w.data, allocate(DType::kU8, {nr * (nc / 2)}, "packed codes"));
    LLMRT_ASSIGN_OR_RETURN(w.scales, allocate(DType::kBF16, {nr * (nc / g)}, "group scales"));
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchSyntheticInt4(part, g, w.data.data_as<uint8_t>(),
                                                             w.scales.data_as<uint16_t>(), s)));
  }
  // Progress of a load, as ImportHost reports uploads.
  constexpr uint64_t kLogEvery = uint64_t{4} << 30;
  const uint64_t before = generated_bytes_;
  generated_bytes_ += w.data.bytes() + (w.scales.data() != nullptr ? w.scales.bytes() : 0);
  if (generated_bytes_ / kLogEvery != before / kLogEvery) {
    Log(LogLevel::kInfo, absl::StrCat("cuda backend: ", generated_bytes_ >> 20, " MiB of synthetic weights generated on device ",
                                      device_));
  }
  return std::optional<Weight>(std::move(w));
}

absl::Status CudaBackend::Upload(const void* src, size_t bytes, const Tensor& dst) {
  if (bytes > dst.bytes() || !dst.contiguous()) {
    return absl::InternalError(absl::StrCat("upload of ", bytes, " bytes into a ", dst.bytes(), "-byte tensor"));
  }
  if (!sticky_.ok()) return sticky_;
  cudaSetDevice(device_);
  return CopyToDevice(dst.data(), src, bytes);
}

absl::Status CudaBackend::Download(const Tensor& src, void* dst, size_t bytes) {
  if (bytes > src.bytes() || !src.contiguous()) {
    return absl::InternalError(absl::StrCat("download of ", bytes, " bytes from a ", src.bytes(), "-byte tensor"));
  }
  if (!sticky_.ok()) return sticky_;
  if (bytes == 0) return absl::OkStatus();
  cudaSetDevice(device_);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  LLMRT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
  return AwaitStream();
}

absl::StatusOr<void*> CudaBackend::Scratch(int slot, size_t bytes, const char* what) {
  ScratchBuffer& b = scratch_[static_cast<size_t>(slot)];
  if (b.bytes >= bytes && b.ptr != nullptr) return b.ptr;
  if (capturing_) {
    // Growing synchronizes and frees: not while a graph is being recorded (RunPass then runs the
    // pass directly).
    return absl::FailedPreconditionError(absl::StrCat("the scratch of ", what, " would grow during a graph capture"));
  }
  if (slot != kScratchSampling) DropGraphs();  // they name the old buffer (sampling runs outside them)
  // Kernels enqueued earlier may still read the old buffer.
  LLMRT_RETURN_IF_ERROR(AwaitStream());
  size_t grown = std::max(bytes, b.bytes + b.bytes / 2);
  cudaFree(b.ptr);
  b.ptr = nullptr;
  b.bytes = 0;
  absl::StatusOr<void*> p = DeviceMalloc(grown, absl::StrCat("the scratch of ", what));
  if (!p.ok() && grown > bytes) {  // the headroom does not fit: exactly what was asked for
    grown = bytes;
    p = DeviceMalloc(grown, absl::StrCat("the scratch of ", what));
  }
  LLMRT_RETURN_IF_ERROR(p.status());
  b.ptr = *p;
  b.bytes = grown;
  return b.ptr;
}

void CudaBackend::DropGraphs() {
  for (auto& [key, g] : graphs_) {
    if (g.exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g.exec));
  }
  graphs_.clear();
}

absl::Status CudaBackend::RunPass(uint64_t key, const std::function<absl::Status()>& pass) {
  if (key == 0 || failed_ || !sticky_.ok()) return pass();
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) return pass();
    it = graphs_.emplace(key, PassGraph{}).first;
  }
  PassGraph& g = it->second;
  cudaSetDevice(device_);
  cudaStream_t s = Stream(stream_);
  // A recording the driver will not launch (its launch enqueues nothing) is dropped and the pass
  // runs directly, now and for this key from then on; an error that outlives it (a lost
  // context) fails the direct pass's first launch.
  const auto launched = [&](cudaGraphExec_t exec) {
    const cudaError_t e = cudaGraphLaunch(exec, s);
    if (e == cudaSuccess) return true;
    cudaGetLastError();
    cudaGraphExecDestroy(exec);
    g.exec = nullptr;
    g.refused = true;
    Log(LogLevel::kWarning, absl::StrCat("cuda backend: a recorded decode pass did not launch (", cudaGetErrorString(e),
                                         "); it runs without a graph"));
    return false;
  };
  if (g.exec != nullptr) {
    if (!launched(static_cast<cudaGraphExec_t>(g.exec))) return pass();
    ++graph_replays_;
    return absl::OkStatus();
  }
  // The first pass of a key runs directly: it grows the scratch buffers the pass needs, so that
  // the capture below allocates nothing.
  if (g.refused || g.runs++ == 0) return pass();
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    g.refused = true;
    return pass();
  }
  capturing_ = true;
  absl::Status recorded;
  try {
    recorded = pass();
  } catch (...) {  // (host code outside Run): end the capture, so that the stream runs again
    capturing_ = false;
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(s, &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();
    g.refused = true;
    throw;
  }
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  cudaGraphExec_t exec = nullptr;
  cudaError_t inst = cudaErrorUnknown;
  if (recorded.ok() && !failed_ && end == cudaSuccess && graph != nullptr) {
    inst = cudaGraphInstantiate(&exec, graph, 0);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    // Nothing was run, only recorded: forget what the recording reported and run the pass
    // directly (a genuine failure reports itself again there).
    cudaGetLastError();
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    Log(LogLevel::kWarning, absl::StrCat("cuda backend: a decode pass could not be captured (",
                                         !recorded.ok() ? recorded.message()
                                         : failed_      ? error_.message()
                                                        : cudaGetErrorString(end != cudaSuccess ? end : inst),
                                         "); it runs without a graph"));
    failed_ = false;
    error_ = absl::OkStatus();
    g.refused = true;
    return pass();
  }
  g.exec = exec;
  ++graph_captures_;
  return launched(exec) ? absl::OkStatus() : pass();
}

// ---- ops ----

void CudaBackend::Fill(const Tensor& t, float value) {
  Run("Fill", [&]() -> absl::Status {
    LLMRT_CUDA_CHECK(t.dtype() == DType::kF32 && t.contiguous());
    return Launched(cuda::LaunchFill(t.data_as<float>(), t.numel(), value, Stream(stream_)));
  });
}

void CudaBackend::Embedding(const Weight& table, const Tensor& ids, const Tensor& out) {
  Run("Embedding", [&]() -> absl::Status {
    const int64_t T = ids.dim(0);
    LLMRT_CUDA_CHECK(out.dim(0) == T && out.row_size() == table.cols);
    if (!DenseWeight(table)) return UnsupportedError("an embedding table that is not F32 or BF16");
    return Launched(cuda::LaunchEmbedding(WeightOf(table), ids.data_as<int32_t>(), T, Mut(out), error_word_,
                                          Stream(stream_)));
  });
}

void CudaBackend::EmbeddingShard(const Weight& table, int64_t first_id, const Tensor& ids, const Tensor& out) {
  Run("EmbeddingShard", [&]() -> absl::Status {
    const int64_t T = ids.dim(0);
    LLMRT_CUDA_CHECK(out.dim(0) == T && out.row_size() == table.cols);
    if (!DenseWeight(table)) return UnsupportedError("an embedding table that is not F32 or BF16");
    return Launched(cuda::LaunchEmbeddingShard(WeightOf(table), first_id, ids.data_as<int32_t>(), T, Mut(out),
                                               Stream(stream_)));
  });
}

// A collective's host part. Unlike Run, it goes on after a failure (unless the device itself is
// lost): every rank enqueues every collective of a pass, so that NCCL's kernels on the other
// ranks find their peer; this rank's buffers then hold whatever the skipped ops left, and the
// runtime fails the pass on every rank when it collects the ranks' statuses.
template <typename Fn>
void CudaBackend::Collective(const char* op, Fn&& body) {
  if (!sticky_.ok()) return;
  const auto t0 = std::chrono::steady_clock::now();
  cudaSetDevice(device_);
  const absl::Status s = StatusOfBody(body);
  if (!s.ok() && !failed_) Fail(absl::Status(s.code(), absl::StrCat(op, ": ", s.message())));
  // The time to enqueue (and, when NCCL is busy, to wait for room on the stream).
  collective_ns_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                     std::chrono::steady_clock::now() - t0)
                                                     .count()),
                           std::memory_order_relaxed);
}

void CudaBackend::AllReduceSum(const Tensor& x) {
  if (comm_ == nullptr) return;
  Collective("AllReduceSum", [&]() -> absl::Status {
    // The same checks fail on every rank (they run the same plan), so no rank is left waiting.
    LLMRT_CUDA_CHECK(x.dtype() == DType::kF32 && x.contiguous());
    return comm_->AllReduceSum(x.data(), static_cast<size_t>(x.numel()), DType::kF32, failed_);
  });
}

void CudaBackend::AllGatherColumns(const Tensor& local, const Tensor& scratch, const Tensor& out) {
  const int64_t S = local.dim(0), n = local.row_size();
  if (comm_ == nullptr) {
    Run("AllGatherColumns", [&]() -> absl::Status {
      LLMRT_CUDA_CHECK(out.dim(0) == S && out.row_size() == n && local.dtype() == DType::kF32 &&
                       out.dtype() == DType::kF32);
      if (S == 0 || n == 0) return absl::OkStatus();
      return CudaStatus(cudaMemcpy2DAsync(out.data(), out.row_stride() * sizeof(float), local.data(),
                                          local.row_stride() * sizeof(float), n * sizeof(float), S,
                                          cudaMemcpyDeviceToDevice, Stream(stream_)),
                        "cudaMemcpy2DAsync");
    });
    return;
  }
  const int64_t ranks = comm_->size();
  Collective("AllGatherColumns", [&]() -> absl::Status {
    LLMRT_CUDA_CHECK(local.dtype() == DType::kF32 && scratch.dtype() == DType::kF32 && out.dtype() == DType::kF32);
    LLMRT_CUDA_CHECK(local.contiguous() && scratch.contiguous() && scratch.numel() >= ranks * S * n);
    LLMRT_CUDA_CHECK(out.dim(0) == S && out.row_size() == ranks * n);
    // scratch [ranks, S, n] = every rank's local, then out [S, ranks * n]: rank r's block of
    // columns [r * n, (r + 1) * n) of each row, as the CPU backend lays them out.
    LLMRT_RETURN_IF_ERROR(comm_->AllGather(local.data(), scratch.data(), static_cast<size_t>(S * n), DType::kF32,
                                           failed_));
    if (S == 0 || n == 0) return absl::OkStatus();
    for (int64_t r = 0; r < ranks; ++r) {
      LLMRT_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpy2DAsync(out.data_as<float>() + r * n, out.row_stride() * sizeof(float),
                            scratch.data_as<float>() + r * S * n, n * sizeof(float), n * sizeof(float), S,
                            cudaMemcpyDeviceToDevice, Stream(stream_)),
          "cudaMemcpy2DAsync"));
    }
    return absl::OkStatus();
  });
}

void CudaBackend::RecordFailure(absl::Status status) { Fail(std::move(status)); }

void CudaBackend::RmsNorm(const Tensor& x, const Weight& w, float eps, const Tensor& out) {
  Run("RmsNorm", [&]() -> absl::Status {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CUDA_CHECK(w.rows == D && out.dim(0) == T && out.row_size() == D && D > 0);
    if (!DenseWeight(w)) return UnsupportedError("a norm weight that is not F32 or BF16");
    return Launched(cuda::LaunchRmsNorm(Const(x), D, WeightOf(w), eps, Mut(out), Stream(stream_)));
  });
}

void CudaBackend::HeadRmsNorm(const Tensor& x, int64_t head_dim, const Weight& w, float eps, const Tensor& out) {
  Run("HeadRmsNorm", [&]() -> absl::Status {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CUDA_CHECK(head_dim > 0 && D % head_dim == 0 && w.rows == head_dim && out.dim(0) == T && out.row_size() == D);
    if (!DenseWeight(w)) return UnsupportedError("a norm weight that is not F32 or BF16");
    return Launched(cuda::LaunchRmsNorm(Const(x), head_dim, WeightOf(w), eps, Mut(out), Stream(stream_)));
  });
}

void CudaBackend::LayerNorm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& out) {
  Run("LayerNorm", [&]() -> absl::Status {
    const int64_t T = x.dim(0), D = x.row_size();
    LLMRT_CUDA_CHECK(w.rows == D && b.rows == D && out.dim(0) == T && out.row_size() == D);
    if (!DenseWeight(w) || !DenseWeight(b)) return UnsupportedError("a norm weight or bias that is not F32 or BF16");
    return Launched(cuda::LaunchLayerNorm(Const(x), WeightOf(w), WeightOf(b), eps, Mut(out), Stream(stream_)));
  });
}

void CudaBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  Run("Add", [&]() -> absl::Status {
    const int64_t T = a.dim(0), D = a.row_size();
    LLMRT_CUDA_CHECK(b.dim(0) == T && b.row_size() == D && out.dim(0) == T && out.row_size() == D);
    return Launched(cuda::LaunchAdd(Const(a), Const(b), Mut(out), Stream(stream_)));
  });
}

void CudaBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  Run("SiluMul", [&]() -> absl::Status {
    const int64_t T = gate.dim(0), D = gate.row_size();
    LLMRT_CUDA_CHECK(up.dim(0) == T && up.row_size() == D && out.dim(0) == T && out.row_size() == D);
    return Launched(cuda::LaunchSiluMul(Const(gate), Const(up), Mut(out), Stream(stream_)));
  });
}

void CudaBackend::AddBias(const Tensor& x, const Weight& bias) {
  Run("AddBias", [&]() -> absl::Status {
    LLMRT_CUDA_CHECK(bias.rows == x.row_size());
    if (!DenseWeight(bias)) return UnsupportedError("a bias that is not F32 or BF16");
    return Launched(cuda::LaunchAddBias(Mut(x), WeightOf(bias), Stream(stream_)));
  });
}

void CudaBackend::GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  Run("GatherRows", [&]() -> absl::Status {
    const int64_t S = rows.dim(0), D = x.row_size();
    LLMRT_CUDA_CHECK(out.dim(0) == S && out.row_size() == D);
    return Launched(cuda::LaunchGatherRows(Const(x), rows.data_as<int32_t>(), S, Mut(out), error_word_, Stream(stream_)));
  });
}

void CudaBackend::SampleTokens(const Tensor& logits, const Tensor& params, const Tensor& random_rows,
                               const Tensor& ids) {
  Run("SampleTokens", [&]() -> absl::Status {
    const int64_t R = logits.dim(0), V = logits.row_size(), n = random_rows.numel();
    LLMRT_CUDA_CHECK(ids.numel() == R && params.numel() == R * kSamplingWords && n <= R && V >= 1);
    static_assert(kSamplingWords == cuda::kSamplingParamWords, "the parameter words of a row");
    void* scratch = nullptr;
    if (n > 0) {
      LLMRT_ASSIGN_OR_RETURN(scratch, Scratch(kScratchSampling, cuda::SamplingScratchBytes(n, V), "sampling"));
    }
    const cuda::SampleArgs a{Const(logits), params.data_as<const int32_t>(), random_rows.data_as<const int32_t>(), n,
                             ids.data_as<int32_t>()};
    return Launched(cuda::LaunchSampleTokens(a, scratch, Stream(stream_)));
  });
}

void CudaBackend::MatMul(const Tensor& x, const Weight& w, const Tensor& out) {
  Run("MatMul", [&]() -> absl::Status {
    LLMRT_CUDA_CHECK(x.rank() == 2 && out.rank() == 2);
    LLMRT_CUDA_CHECK(x.dim(1) == w.cols && out.dim(1) == w.rows && out.dim(0) == x.dim(0));
    if (!SupportsWeightFormat(w.format)) return UnsupportedError("MatMul: a weight format without a CUDA kernel");
    const bool bf16_policy = activations_ == QuantizedActivations::kBf16;
    const bool fp8_policy = activations_ == QuantizedActivations::kFp8;
    if ((bf16_policy || fp8_policy) && w.format == kWeightBf16) return Bf16MatMul(Const(x), w, Mut(out));
    const cuda::WeightRef wr = WeightOf(w);
    const bool fp8_blocks = w.format == kWeightFp8Block &&
                            Fp8BlocksTakeActivationPolicy(w.params.block_rows, w.params.block_cols);
    if (fp8_policy && fp8_blocks) return Fp8MatMul(Const(x), w, Mut(out));
    cuda::ConstMat xin = Const(x);
    cudaStream_t s = Stream(stream_);
    if (bf16_policy && fp8_blocks) {
      // The BF16 policy on FP8 weights (as on the CPU): the activations rounded to bfloat16, the
      // weights exact.
      const int64_t T = x.dim(0), K = w.cols;
      LLMRT_ASSIGN_OR_RETURN(void* xr, Scratch(kScratchMatMulBf16, static_cast<size_t>(T * K) * sizeof(float),
                                               "MatMul bf16 activations"));
      const cuda::MutMat r{static_cast<float*>(xr), T, K, K};
      LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchRoundToBf16Values(xin, r, s)));
      xin = cuda::ConstMat{r.data, T, K, K};
    }
    if (xin.rows == 0) return absl::OkStatus();
    if (quant_mma_ && cuda::QuantMmaApplies(wr)) {
      // INT4 and FP8 on the tensor cores (every T: rows stay batch-invariant).
      LLMRT_ASSIGN_OR_RETURN(void* p, Scratch(kScratchQuantAct, cuda::QuantPreparedBytes(xin.rows, w.cols),
                                              "MatMul quantized-weight activations"));
      return Launched(cuda::LaunchQuantMma(xin, wr, p, Mut(out), s));
    }
    return Launched(cuda::LaunchGemm(xin, wr, Mut(out), s));
  });
}

absl::StatusOr<cuda::Fp8ActOut> CudaBackend::QuantizeFp8(const cuda::ConstMat& x, int64_t block_cols, int slot,
                                                         const char* what, bool codes, bool values, bool dequantized,
                                                         int64_t padded_rows) {
  const int64_t T = x.rows, K = x.cols, nb = (K + block_cols - 1) / block_cols;
  const int64_t R = std::max(T, padded_rows);  // the scales' stride and the codes' rows
  // One buffer: the scales, then each requested output, each at a 256-byte boundary.
  auto round = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t scale_bytes = round(static_cast<size_t>(nb * R) * sizeof(float));
  const size_t code_bytes = codes ? round(static_cast<size_t>(R * K)) : 0;
  const size_t value_bytes = values ? round(static_cast<size_t>(T * K) * sizeof(float)) : 0;
  const size_t deq_bytes = dequantized ? round(static_cast<size_t>(T * K) * sizeof(float)) : 0;
  LLMRT_ASSIGN_OR_RETURN(void* p, Scratch(slot, scale_bytes + code_bytes + value_bytes + deq_bytes, what));
  uint8_t* base = static_cast<uint8_t*>(p);
  cuda::Fp8ActOut o;
  o.scales = reinterpret_cast<float*>(base);
  o.scales_ld = R;
  if (codes) o.codes = base + scale_bytes;
  if (values) o.values = reinterpret_cast<float*>(base + scale_bytes + code_bytes);
  if (dequantized) o.dequantized = reinterpret_cast<float*>(base + scale_bytes + code_bytes + value_bytes);
  cudaStream_t s = Stream(stream_);
  if (R > T) {
    // The pad rows: zero scales (the kernel then writes the real ones) and zero codes.
    LLMRT_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(o.scales, 0, static_cast<size_t>(nb * R) * sizeof(float), s),
                                     "cudaMemsetAsync (FP8 activation scales)"));
    if (codes) {
      LLMRT_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(o.codes + T * K, 0, static_cast<size_t>((R - T) * K), s),
                                       "cudaMemsetAsync (FP8 activation pad rows)"));
    }
  }
  LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchQuantizeFp8Act(x, block_cols, o, s)));
  return o;
}

// The FP8 policy on an FP8 block weight. cuBLASLt takes 128 x 128 blocks on Hopper; its plan is
// fixed per weight shape, so a shape takes one path for every T as under the BF16 policy (a T the
// algorithm refuses runs the GEMV, logged). Its activation scales are read at a stride of T
// rounded up to 4, so it multiplies T4 rows, the pad rows zero, into `out` directly when T4 == T
// and otherwise into scratch, whose first T rows are then copied to `out`. The GEMV multiplies
// the e4m3 values with the exact codes and folds each lane's sum with both scales; other shapes
// take the tiled kernel on the dequantized activations (value * scale, rounded once), the nearest
// the exact-product kernels come to the policy's numerics.
absl::Status CudaBackend::Fp8MatMul(const cuda::ConstMat& x, const Weight& w, const cuda::MutMat& out) {
  const int64_t T = x.rows, N = w.rows, K = w.cols, bc = w.params.block_cols;
  if (T == 0 || N == 0) return absl::OkStatus();
  cudaStream_t s = Stream(stream_);
  const cuda::WeightRef wr = WeightOf(w);
  if (fp8_cublaslt_ && w.params.block_rows == 128 && bc == 128 && K > 0 && CublasLtGemm::Aligned(w.data.data()) &&
      CublasLtGemm::Aligned(w.scales.data())) {
    const int64_t T4 = (T + 3) / 4 * 4;
    const bool direct = T4 == T && out.ld % 4 == 0 && CublasLtGemm::Aligned(out.data);
    const int64_t ldd = direct ? out.ld : (N + 3) / 4 * 4;
    LLMRT_ASSIGN_OR_RETURN(const CublasLtGemm::Call* call,
                           cublaslt_->Prepare(CublasLtGemm::Operands::kFp8Block128, N, K, T4, ldd));
    if (call != nullptr) {
      LLMRT_ASSIGN_OR_RETURN(cuda::Fp8ActOut q, QuantizeFp8(x, bc, kScratchMatMulFp8, "MatMul e4m3 activations", true,
                                                            false, false, T4));
      float* d = out.data;
      if (!direct) {
        LLMRT_ASSIGN_OR_RETURN(void* p, Scratch(kScratchMatMulFp8Out, static_cast<size_t>(T4 * ldd) * sizeof(float),
                                                "MatMul FP8 output"));
        d = static_cast<float*>(p);
      }
      LLMRT_RETURN_IF_ERROR(
          cublaslt_->RunFp8(*call, w.data.data(), w.scales.data_as<float>(), q.codes, q.scales, d, stream_));
      if (direct) return absl::OkStatus();
      return CudaStatus(cudaMemcpy2DAsync(out.data, static_cast<size_t>(out.ld) * sizeof(float), d,
                                          static_cast<size_t>(ldd) * sizeof(float), static_cast<size_t>(N) * sizeof(float),
                                          static_cast<size_t>(T), cudaMemcpyDeviceToDevice, s),
                        "cudaMemcpy2DAsync (FP8 output rows)");
    }
  }
  if (cuda::QuantGemvApplies(wr)) {
    LLMRT_ASSIGN_OR_RETURN(cuda::Fp8ActOut q,
                           QuantizeFp8(x, bc, kScratchMatMulFp8, "MatMul e4m3 activations", false, true, false));
    return Launched(cuda::LaunchQuantGemv(cuda::ConstMat{q.values, T, K, K}, wr, out, s, {q.scales, q.scales_ld}));
  }
  LLMRT_ASSIGN_OR_RETURN(cuda::Fp8ActOut q,
                         QuantizeFp8(x, bc, kScratchMatMulFp8, "MatMul e4m3 activations", false, false, true));
  return Launched(cuda::LaunchGemm(cuda::ConstMat{q.dequantized, T, K, K}, wr, out, s));
}

// The BF16 policy: x rounded to bfloat16 (nearest even) into the op's scratch, then cuBLASLt
// (bf16 codes; the algorithm fixed per weight shape, so rows do not depend on the batch), or,
// for shapes and alignments cuBLASLt does not take, the tiled kernel on the rounded values kept
// as float32 (exact products, summed in k order). Either way a weight shape takes one path for
// every T, apart from a T its algorithm refuses (logged).
absl::Status CudaBackend::Bf16MatMul(const cuda::ConstMat& x, const Weight& w, const cuda::MutMat& out) {
  const int64_t T = x.rows, N = w.rows, K = w.cols;
  if (T == 0 || N == 0) return absl::OkStatus();
  cudaStream_t s = Stream(stream_);
  const CublasLtGemm::Call* call = nullptr;
  if (K > 0 && CublasLtGemm::Aligned(w.data.data()) && CublasLtGemm::Aligned(out.data)) {
    LLMRT_ASSIGN_OR_RETURN(call, cublaslt_->Prepare(N, K, T, out.ld));
  }
  if (call != nullptr) {
    LLMRT_ASSIGN_OR_RETURN(void* xb, Scratch(kScratchMatMulBf16, static_cast<size_t>(T * K) * sizeof(uint16_t),
                                             "MatMul bf16 activations"));
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchRoundToBf16(x, static_cast<uint16_t*>(xb), s)));
    return cublaslt_->Run(*call, w.data.data(), xb, out.data, stream_);
  }
  LLMRT_ASSIGN_OR_RETURN(void* xr, Scratch(kScratchMatMulBf16, static_cast<size_t>(T * K) * sizeof(float),
                                           "MatMul bf16 activations"));
  const cuda::MutMat r{static_cast<float*>(xr), T, K, K};
  LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchRoundToBf16Values(x, r, s)));
  return Launched(cuda::LaunchGemm(cuda::ConstMat{r.data, T, K, K}, WeightOf(w), out, s));
}

void CudaBackend::Rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const RopeTable& rope,
                       bool interleaved, const Tensor& positions) {
  Run("Rope", [&]() -> absl::Status {
    LLMRT_CUDA_CHECK(x.row_size() == heads * head_dim && offset + 2 * rope.half <= head_dim);
    LLMRT_CUDA_CHECK(positions.dim(0) == x.dim(0) && rope.inv_freq.numel() >= rope.half);
    return Launched(cuda::LaunchRope(Mut(x), heads, head_dim, offset, rope.inv_freq.data_as<float>(), rope.half,
                                     rope.attention_factor, interleaved, positions.data_as<int32_t>(), Stream(stream_)));
  });
}

}  // namespace llmrt
