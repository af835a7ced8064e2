// The CPU backend: host memory, a thread pool, SIMD kernels chosen at run time. Ops run
// synchronously, so Synchronize is a no-op. Its methods are split by op family over
// cpu_backend.cc (memory, elementwise, rope, matmul), attention.cc and moe.cc.
#ifndef LLMRT_BACKEND_CPU_CPU_BACKEND_H_
#define LLMRT_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>

#include "src/backend/backend.h"
#include "src/util/thread_pool.h"

namespace llmrt {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);
  std::string name() const override { return "cpu"; }

  absl::StatusOr<Tensor> Allocate(DType dtype, std::initializer_list<int64_t> shape) override;
  absl::StatusOr<Tensor> ImportHost(std::shared_ptr<Storage> keepalive, const void* data,
                                    DType dtype, const int64_t* shape, int rank) override;
  void Upload(const void* src, size_t bytes, const Tensor& dst) override;
  void Download(const Tensor& src, void* dst, size_t bytes) override;
  void Fill(const Tensor& t, float value) override;
  void Synchronize() override {}

  void Embedding(const Weight& table, const Tensor& ids, const Tensor& out) override;
  void RmsNorm(const Tensor& x, const Weight& w, float eps, const Tensor& out) override;
  void LayerNorm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& out) override;
  void Add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  void AddBias(const Tensor& x, const Weight& bias) override;
  void MatMul(const Tensor& x, const Weight& w, const Tensor& out) override;
  void Rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset,
            const std::vector<float>& inv_freq, float attention_factor, bool interleaved,
            const Tensor& positions) override;

  void KvWrite(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts,
               const AttentionBatch& batch) override;
  void KvExportRows(const KvCacheView& cache, int64_t layer, const std::vector<int32_t>& slots,
                    uint8_t* dst) override;
  void KvImportRows(const KvCacheView& cache, int64_t layer, const std::vector<int32_t>& slots, const uint8_t* src,
                    DType src_dtype, float src_scale, const KvRowLayout* src_tiled) override;
  void GqaAttention(const Tensor& q, const KvCacheView& cache, int64_t layer, const AttentionBatch& batch,
                    int64_t heads, int64_t kv_heads, int64_t head_dim, float scale, const Tensor& out) override;
  void MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d,
                      const Tensor& q_lat) override;
  void MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache, int64_t layer,
                    const AttentionBatch& batch, const MlaDims& d, float scale, const Tensor* selected,
                    const Tensor& out_lat) override;
  void DsaSelect(const Tensor& q, const Tensor& w, const KvCacheView& cache, int64_t layer,
                 const AttentionBatch& batch, int64_t heads, int64_t head_dim, int64_t key_offset, float key_scale,
                 int64_t top_k, const Tensor& selected) override;
  void MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d,
                       const Tensor& out) override;

  void MoeRoute(const Tensor& x, const Weight& gate, const Weight& bias, const RouterParams& p,
                const Tensor& idx, const Tensor& weights) override;
  void MoeExperts(const Tensor& x, const Tensor& idx, const Tensor& weights,
                  const std::vector<ExpertWeights>& experts, const Tensor& out) override;

  ThreadPool& pool() { return pool_; }
  // out [T, rows] = x [T, cols] w^T over raw host pointers (shared by MatMul and MoE).
  void MatMulRaw(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo);
  // The same on the calling thread only.
  static void MatMulRowsSerial(const float* x, int64_t ldx, int64_t t, const Weight& w, float* out, int64_t ldo);

 private:
  ThreadPool pool_;
};

}  // namespace llmrt

#endif  // LLMRT_BACKEND_CPU_CPU_BACKEND_H_
