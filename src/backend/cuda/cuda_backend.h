// The CUDA backend: device memory, one stream, kernels from kernels/ (the device code), and the
// step contract of src/backend/backend.h on a GPU.
//
// Ops validate shapes on the host, then enqueue kernels on the backend's stream and return.
// Failures travel through the status channel: a host-side check or a failed launch is recorded
// and later ops are skipped until Synchronize; an index a kernel finds out of range (a token id,
// a KV slot, a page, an expert) is written to a device error word that Synchronize reads, and
// the kernel leaves its output alone rather than touch memory outside its buffers. Synchronize
// returns the first failure and clears it; a sticky device error (the context is lost) is
// returned by every later call.
//
// Weights and KV: F32, BF16, FP8 block-scaled and INT4 group-scaled weights (MatMul and the MoE;
// the quantized ones through the dequantizing GEMV of kernels/quant_matmul.cu, or the tiled
// kernel for shapes it does not take), and the four built-in KV codecs (F32, BF16, FP8 with a
// per-layer scale, tiled FP8) including the FP8 phase policy's BF16 fresh rows. Formats and
// codecs registered later are refused with UNSUPPORTED naming them. Activations are float32, as
// on the CPU, so that the two backends agree to the conformance tolerances.
//
// Activation policies: EXACT (the default), and BF16: MatMul with a BF16 weight rounds its
// activations to bfloat16 and multiplies on tensor cores through cuBLASLt (cublaslt.h; shapes it
// does not take run the tiled kernel on the rounded activations), as does a BF16 router gate;
// the MoE's BF16 expert projections run the grouped tiled kernel on rounded activations. INT8 is
// refused.
//
// Memory: Allocate is cudaMalloc (an out-of-memory is RESOURCE_EXHAUSTED naming the bytes and the
// device's free memory); ImportHost and Upload stage host bytes through a pinned double buffer,
// asynchronously in stream order. The MoE, the router and the DSA indexer keep per-op scratch
// that grows to the largest call seen and is then reused (a forward pass of a size seen before
// allocates nothing).
#ifndef LLMRT_BACKEND_CUDA_CUDA_BACKEND_H_
#define LLMRT_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/backend/cuda/cublaslt.h"
#include "src/backend/registry.h"

namespace llmrt::cuda {
struct AttentionArgs;
struct ConstMat;
struct MutMat;
struct Fp8ActOut;
}  // namespace llmrt::cuda

namespace llmrt {

// The CUDA backend's registry entry: available when the CUDA runtime finds a device.
BackendEntry CudaBackendEntry();

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  BackendKind kind() const override { return BackendKind::kCuda; }

  absl::StatusOr<Tensor> ImportHost(std::shared_ptr<Storage> keepalive, const void* data, DType dtype,
                                    const int64_t* shape, int rank) override;
  absl::StatusOr<Weight> PrepareWeight(const StoredMatrix& m) override;
  bool SupportsWeightFormat(WeightFormatId format) const override;
  bool SupportsKvCodec(const KvCodec& codec) const override;
  absl::StatusOr<std::unique_ptr<ExpertBank>> PrepareExperts(std::vector<ExpertWeights> experts) override;
  absl::Status Upload(const void* src, size_t bytes, const Tensor& dst) override;
  absl::Status Download(const Tensor& src, void* dst, size_t bytes) override;
  absl::Status Synchronize() override;

  void Fill(const Tensor& t, float value) override;
  void Embedding(const Weight& table, const Tensor& ids, const Tensor& out) override;
  void* device_stream() const override { return stream_; }
  // Decode passes as CUDA graphs: the second pass of a key is captured (the first ran directly,
  // growing every scratch buffer it needs), later ones replay the graph. A scratch buffer that
  // grows afterwards drops every graph (they name its old address); a pass that cannot be
  // captured (an op refused during capture) runs directly from then on.
  bool captures_passes() const override { return true; }
  absl::Status RunPass(uint64_t key, const std::function<absl::Status()>& pass) override;
  // Passes replayed from a graph, and graphs captured, since creation.
  uint64_t graph_replays() const { return graph_replays_; }
  uint64_t graph_captures() const { return graph_captures_; }
  // Collectives go through the communicator (an NcclCommunicator whose stream is this backend's
  // stream: enqueued in order with the ops, no host wait); without one they are identities.
  // After a failure they still run, moving whatever the buffers hold, so that the other ranks
  // are not left waiting; the runtime fails the pass on every rank afterwards.
  void AllReduceSum(const Tensor& x) override;
  void AllGatherColumns(const Tensor& local, const Tensor& scratch, const Tensor& out) override;
  void EmbeddingShard(const Weight& table, int64_t first_id, const Tensor& ids, const Tensor& out) override;
  void RecordFailure(absl::Status status) override;
  void RmsNorm(const Tensor& x, const Weight& w, float eps, const Tensor& out) override;
  void HeadRmsNorm(const Tensor& x, int64_t head_dim, const Weight& w, float eps, const Tensor& out) override;
  void LayerNorm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& out) override;
  void Add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void AddBias(const Tensor& x, const Weight& bias) override;
  void GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  void SampleTokens(const Tensor& logits, const Tensor& params, const Tensor& random_rows,
                    const Tensor& ids) override;
  void MatMul(const Tensor& x, const Weight& w, const Tensor& out) override;
  void Rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const RopeTable& rope, bool interleaved,
            const Tensor& positions) override;

  void KvCalibrate(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts) override;
  void KvWrite(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts,
               const AttentionBatch& batch) override;
  void KvExportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& dst) override;
  void KvImportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& src,
                    const KvCodec& src_codec, const KvRowLayout& src_layout, float src_scale) override;
  void GqaAttention(const Tensor& q, const KvCacheView& cache, int64_t layer, const AttentionBatch& batch,
                    int64_t heads, int64_t kv_heads, int64_t head_dim, float scale, const Tensor& out) override;
  void MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d, const Tensor& q_lat) override;
  void MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache, int64_t layer,
                    const AttentionBatch& batch, const MlaDims& d, float scale, const Tensor* selected,
                    const Tensor& out_lat) override;
  void MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d, const Tensor& out) override;
  void DsaSelect(const Tensor& q, const Tensor& w, const KvCacheView& cache, int64_t layer,
                 const AttentionBatch& batch, int64_t heads, int64_t head_dim, int64_t key_offset, float key_scale,
                 int64_t top_k, const Tensor& selected) override;

  void MoeRoute(const Tensor& x, const Weight& gate, const Weight& bias, const RouterParams& p, const Tensor& idx,
                const Tensor& weights) override;
  void MoeExperts(const Tensor& x, const Tensor& idx, const Tensor& weights, const ExpertBank& experts,
                  const Tensor& out) override;

 protected:
  absl::StatusOr<Tensor> DoAllocate(DType dtype, const int64_t* shape, int rank) override;

 private:
  CudaBackend(int device, QuantizedActivations activations) : device_(device), activations_(activations) {}
  absl::Status Init();
  // out = x w^T for a BF16 weight under the BF16 activation policy (MatMul, the router).
  absl::Status Bf16MatMul(const cuda::ConstMat& x, const Weight& w, const cuda::MutMat& out);
  // The FP8 policy on an FP8 block weight (Fp8BlocksTakeActivationPolicy): cuBLASLt's block-scaled
  // FP8 GEMM, else the GEMV on e4m3 values with activation scales, else the tiled kernel on the
  // dequantized e4m3 activations.
  absl::Status Fp8MatMul(const cuda::ConstMat& x, const Weight& w, const cuda::MutMat& out);
  // x's e4m3 form into scratch `slot` (`what` names it): the scales always ([blocks][rows]), and
  // the outputs named in `want` (codes, values, dequantized: non-null pointers are placeholders).
  absl::StatusOr<cuda::Fp8ActOut> QuantizeFp8(const cuda::ConstMat& x, int64_t block_cols, int slot, const char* what,
                                              bool codes, bool values, bool dequantized);

  // Runs an op's host part (checks and launches); a failure is recorded, and once one is
  // pending later ops are skipped (the contract of a device stream).
  template <typename Fn>
  void Run(const char* op, Fn&& body);
  // A collective's host part: as Run, but it still runs after a failure (see the collectives).
  template <typename Fn>
  void Collective(const char* op, Fn&& body);
  void Fail(absl::Status status);
  // Host bytes to device memory through the pinned double buffer, in stream order.
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes);
  // Per-op device scratch `slot`, grown to at least `bytes` (synchronizing before a reallocation).
  absl::StatusOr<void*> Scratch(int slot, size_t bytes, const char* what);
  // Splits each (token, head) of an attention over `a->splits` blocks when there are too few of
  // them to fill the device and the contexts are long (at most `length` positions attended).
  absl::Status SplitAttention(cuda::AttentionArgs* a, int64_t length);
  // A device allocation of `bytes` with an out-of-memory message naming `what`.
  absl::StatusOr<void*> DeviceMalloc(size_t bytes, const std::string& what);

  int device_ = 0;
  QuantizedActivations activations_ = QuantizedActivations::kExact;
  // The BF16 policy's cuBLASLt handle and plans, and its workspace (device,
  // CublasLtGemm::kWorkspaceBytes, allocated at Init).
  std::unique_ptr<CublasLtGemm> cublaslt_;
  void* cublaslt_workspace_ = nullptr;
  int sm_count_ = 1;
  void* stream_ = nullptr;       // cudaStream_t
  int32_t* error_word_ = nullptr;  // device: the first kernel-detected failure (kernels/kernels.h ErrorCode)
  int32_t* error_host_ = nullptr;  // pinned: its copy at Synchronize
  uint8_t* staging_ = nullptr;   // pinned, 2 halves of kStagingHalf bytes
  void* staging_done_[2] = {nullptr, nullptr};  // cudaEvent_t: the half's last copy finished
  int staging_next_ = 0;
  uint64_t imported_bytes_ = 0;  // ImportHost's total, for the load's progress lines
  bool failed_ = false;
  absl::Status error_;
  absl::Status sticky_;  // a device error that leaves the context unusable
  struct ScratchBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::vector<ScratchBuffer> scratch_;
  // Captured passes by key (RunPass).
  struct PassGraph {
    void* exec = nullptr;  // cudaGraphExec_t
    int runs = 0;          // direct runs so far
    bool refused = false;  // capture failed once: always direct
  };
  static constexpr size_t kMaxGraphs = 256;
  std::unordered_map<uint64_t, PassGraph> graphs_;
  bool capturing_ = false;
  uint64_t graph_replays_ = 0;
  uint64_t graph_captures_ = 0;
  void DropGraphs();
};

}  // namespace llmrt

#endif  // LLMRT_BACKEND_CUDA_CUDA_BACKEND_H_
