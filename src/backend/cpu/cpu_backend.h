// The CPU backend: host memory, a thread pool, SIMD kernels chosen at run time. Ops run
// synchronously on the calling thread and the pool; an exception inside an op (an internal
// check, an allocation failure in a worker) is caught, recorded, and returned by Synchronize.
// Its methods are split by op family over cpu_backend.cc (memory, elementwise, rope, matmul),
// attention.cc (KV writes, attention, DSA) and moe.cc.
#ifndef LLMRT_BACKEND_CPU_CPU_BACKEND_H_
#define LLMRT_BACKEND_CPU_CPU_BACKEND_H_

#include <atomic>
#include <exception>
#include <new>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/backend.h"
#include "src/backend/cpu/weight_memory.h"
#include "src/backend/registry.h"
#include "src/util/thread_pool.h"

namespace llmrt {
namespace cpu {
struct MatMulKernel;
struct Fp8Bf16Activations;
}  // namespace cpu

// Routed experts on the CPU: the weights as loaded.
class CpuExpertBank final : public ExpertBank {
 public:
  explicit CpuExpertBank(std::vector<ExpertWeights> e) : experts(std::move(e)) {}
  int64_t num_experts() const override { return static_cast<int64_t>(experts.size()); }
  std::vector<ExpertWeights> experts;
};

// The CPU backend's registry entry (always available).
BackendEntry CpuBackendEntry();

// Not final: tests derive from it to watch what the runtime asks of a backend.
class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);
  std::string name() const override { return "cpu"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  WeightMemory weight_memory() const override { return weight_memory_; }

  absl::StatusOr<Tensor> ImportHost(std::shared_ptr<Storage> keepalive, const void* data, DType dtype,
                                    const int64_t* shape, int rank) override;
  absl::StatusOr<Weight> PrepareWeight(const StoredMatrix& m) override;
  bool SupportsWeightFormat(WeightFormatId format) const override;
  // FP8 block-scaled: dequantized a head at a time as the MLA ops read it.
  bool ReadsQuantizedMlaKvB(WeightFormatId format) const override { return format == kWeightFp8Block; }
  absl::StatusOr<std::unique_ptr<ExpertBank>> PrepareExperts(std::vector<ExpertWeights> experts) override;
  absl::Status Upload(const void* src, size_t bytes, const Tensor& dst) override;
  absl::Status Download(const Tensor& src, void* dst, size_t bytes) override;
  absl::Status Synchronize() override;

  void Fill(const Tensor& t, float value) override;
  void Embedding(const Weight& table, const Tensor& ids, const Tensor& out) override;
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

  void AllReduceSum(const Tensor& x) override;
  void AllGatherColumns(const Tensor& local, const Tensor& scratch, const Tensor& out) override;
  void EmbeddingShard(const Weight& table, int64_t first_id, const Tensor& ids, const Tensor& out) override;
  void RecordFailure(absl::Status status) override { Fail(std::move(status)); }

  ThreadPool& pool() { return pool_; }
  // out [T, rows] = x [T, cols] w^T over raw host pointers (shared by MatMul and MoE).
  void MatMulRaw(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo);
  // MatMulRaw without the BF16 activation policy: float32 activations for BF16 and FP8 weights
  // (the MoE router, whose logits choose the experts); INT8 still applies to INT4 weights.
  void MatMulRawExact(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo);
  // The same on the calling thread only.
  void MatMulRowsSerial(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo);
  QuantizedActivations activations() const { return activations_; }

 protected:
  absl::StatusOr<Tensor> DoAllocate(DType dtype, const int64_t* shape, int rank) override;

 private:
  // Runs an op body, turning an exception into the recorded failure; skips the body once a
  // failure is recorded (the contract of a device stream).
  template <typename Fn>
  void Run(const char* op, Fn&& body);
  void Fail(absl::Status status);

  // The INT8 kernel of w when the policy is INT8 and w's format has one, else nullptr.
  const cpu::MatMulKernel* Int8KernelFor(const Weight& w) const;
  // Whether w's matmuls run on the bf16 dot paths (the BF16 or FP8 policy and a BF16 weight, or
  // an FP8 block-scaled one whose blocks are whole 32-column steps: cpu::Fp8SupportsBf16).
  bool UsesBf16Dot(const Weight& w) const;
  // Whether w's float32-activation matmuls run on AMX tiles over split activations (a BF16
  // weight, the CPU's tiles, not turned off; see cpu::SplitActivationsBf16x3).
  bool UsesExactTiles(const Weight& w) const { return exact_tiles_ && w.format == kWeightBf16; }
  // out = x w^T on the tiles (UsesExactTiles), over the pool or on the calling thread.
  void MatMulExactTiles(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo, bool pool);
  // An FP8 weight's activations under the policy: e4m3 per column block (FP8) or bf16 (BF16).
  void Fp8ActivationsFor(const float* x, int64_t ldx, int64_t t, const Weight& w, cpu::Fp8Bf16Activations* out) const;

  const WeightMemory weight_memory_;  // kMapped or kHugePages
  cpu::HugePageArena weight_arena_;   // kHugePages: where ImportHost copies weights
  ThreadPool pool_;
  const QuantizedActivations activations_;
  const bool exact_tiles_;
  std::atomic<bool> failed_{false};
  std::mutex error_mu_;
  absl::Status error_;
  // Per-call buffers of MoeExperts, kept across calls: after the first steps of each size no
  // forward pass allocates.
  struct MoeScratch {
    std::vector<std::vector<std::pair<int32_t, float>>> assigned;  // [E]: (token, weight) in token order
    std::vector<int64_t> active;
    std::vector<size_t> schedule;  // indices into `active`, most rows first (per-expert tasks)
    struct PerExpert {
      std::vector<float> xin, g, u, y;
    };
    std::vector<PerExpert> per_expert;  // [active] when experts are tasks, else [1]
  };
  std::unique_ptr<MoeScratch> moe_;
};

template <typename Fn>
void CpuBackend::Run(const char* op, Fn&& body) {
  if (failed_.load(std::memory_order_relaxed)) return;
  try {
    body();
  } catch (const std::bad_alloc&) {
    Fail(absl::ResourceExhaustedError(absl::StrCat(op, ": out of host memory")));
  } catch (const std::exception& e) {
    Fail(absl::InternalError(absl::StrCat(op, ": ", e.what())));
  } catch (...) {
    Fail(absl::InternalError(absl::StrCat(op, ": unknown exception")));
  }
}

}  // namespace llmrt

#endif  // LLMRT_BACKEND_CPU_CPU_BACKEND_H_
