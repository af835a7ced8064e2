// The CUDA backend's KV cache, attention, DSA and MoE ops (host side: checks, scratch, launches).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/kernels.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_util.h"
#include "src/util/errors.h"
#include "src/util/log.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// Routed experts on the device: the prepared weights (kept alive here) and, per projection, the
// device array of the experts' weight descriptors the grouped GEMM reads, with the kernel choice.
class CudaExpertBank final : public ExpertBank {
 public:
  ~CudaExpertBank() override { cudaFree(table_); }
  int64_t num_experts() const override { return static_cast<int64_t>(experts_.size()); }

  std::vector<ExpertWeights> experts_;
  int64_t inter_ = 0, hidden_ = 0;
  // Device: [3][E] descriptors (gate, up, down).
  cuda::WeightRef* table_ = nullptr;
  int32_t gemv_bits_[3] = {0, 0, 0};
  bool quant_mma_[3] = {false, false, false};  // every expert INT4 or every one FP8, each QuantMmaApplies
  // Whether every expert's weight of the projection is BF16 (the BF16 and FP8 policies round its
  // input to bfloat16).
  bool bf16_[3] = {false, false, false};
  // The column block when every expert's weight of the projection is FP8 with blocks that take
  // the activation policies, all the same (the BF16 policy rounds its input, the FP8 policy
  // quantizes it per block); else 0 (exact).
  int64_t fp8_block_cols_[3] = {0, 0, 0};
  cuda::ExpertTable Table(int which) const { return {table_ + which * num_experts(), gemv_bits_[which]}; }
};

// The built-in codecs have device kernels; a codec registered later does not.
bool DeviceKvCodec(const KvCodec& c) { return c.id() <= kKvCodecFp8Tiled; }

cuda::Elem KvElem(const KvCodec& c) {
  switch (c.id()) {
    case kKvCodecBf16:
      return cuda::kElemBf16;
    case kKvCodecFp8:
    case kKvCodecFp8Tiled:
      return cuda::kElemFp8E4M3;
    default:
      return cuda::kElemF32;
  }
}

// A row layout of a built-in codec for the kernels. UNSUPPORTED when it has more segments
// than the kernels carry (the models' rows have two or three).
absl::StatusOr<cuda::KvRowRef> RowRefOf(const KvCodec& c, const KvRowLayout& l) {
  cuda::KvRowRef r{};
  r.type = KvElem(c);
  r.row_bytes = l.row_bytes;
  r.width = l.width;
  r.scale_offset = l.scale_offset;
  if (!l.mixed()) return r;
  if (l.segments.size() > static_cast<size_t>(cuda::kMaxKvSegments)) {
    return UnsupportedError(absl::StrCat("a ", c.name(), " KV row of ", l.segments.size(), " parts (the CUDA kernels take ",
                                         cuda::kMaxKvSegments, ")"));
  }
  r.nseg = static_cast<int32_t>(l.segments.size());
  for (size_t i = 0; i < l.segments.size(); ++i) {
    const KvSegment& s = l.segments[i];
    r.seg[i] = {s.start, s.count, s.tile, s.byte_offset, s.first_scale, s.bf16 ? 1 : 0};
  }
  return r;
}

// REQUIRES: CheckKvView(cache) passed.
cuda::KvRef KvOf(const KvCacheView& v) {
  cuda::KvRef r{v.pages.data_as<uint8_t>(), KvElem(*v.codec), v.num_pages, v.num_layers, v.page_size, v.row_bytes, v.width};
  r.row = *RowRefOf(*v.codec, *v.layout);
  if (v.codec->scale_kind() == KvScaleKind::kPerLayer) r.layer_scales = v.scales.data_as<const float>();
  if (v.fresh_rows > 0) {
    r.fresh = v.fresh.data_as<uint16_t>();
    r.fresh_rows = v.fresh_rows;
  }
  return r;
}

cuda::BatchRef BatchOf(const AttentionBatch& b) {
  cuda::BatchRef r{b.token_seq.data_as<int32_t>(),      b.token_ctx.data_as<int32_t>(),
                   b.seq_page_start.data_as<int32_t>(), b.page_ids.data_as<int32_t>(),
                   b.slot_mapping.data_as<int32_t>(),   b.num_tokens,
                   b.max_ctx};
  r.seq_first_token = b.seq_first_token.data_as<int32_t>();
  return r;
}

// The cache view's codec and layer can run here; a per-layer codec's layer must have its scale
// (`needs_scale`: the op reads or writes FP8 values).
absl::Status CheckKvView(const KvCacheView& cache, int64_t layer, bool needs_scale = true) {
  if (cache.codec == nullptr || cache.layout == nullptr || !DeviceKvCodec(*cache.codec)) {
    return UnsupportedError(absl::StrCat("the KV codec ", cache.codec != nullptr ? cache.codec->name() : "(none)",
                                         " has no CUDA kernels; the CUDA backend runs the F32, BF16, FP8 and tiled FP8 "
                                         "codecs"));
  }
  LLMRT_RETURN_IF_ERROR(RowRefOf(*cache.codec, *cache.layout).status());
  if (layer < 0 || layer >= cache.num_layers) return absl::InternalError(absl::StrCat("no KV layer ", layer));
  if (cache.fresh_rows > 0 && !cache.codec->lossy()) {
    return absl::InternalError("the phase policy's BF16 rows with a lossless codec");
  }
  if (needs_scale && cache.codec->scale_kind() == KvScaleKind::kPerLayer &&
      (cache.scale_set == nullptr || cache.scale_set[layer] == 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV layer ", layer, " has no FP8 scale yet (KvCalibrate or a checkpoint scale comes first)"));
  }
  return absl::OkStatus();
}

bool FlatWeight(const Weight& w) { return DenseWeight(w); }

}  // namespace

int64_t CudaBackend::ListTokens(const AttentionBatch& batch, int64_t skip_seq_tokens, cuda::AttentionArgs* a) {
  a->skip_seq_tokens = skip_seq_tokens;
  a->num_seqs = batch.num_seqs;
  a->listed_runs = 0;
  if (skip_seq_tokens <= 0 || batch.host_seq_tokens == nullptr) return batch.max_ctx;
  cuda::ListAttentionTokens(batch.host_seq_tokens, batch.num_seqs, skip_seq_tokens, a);
  if (a->listed_runs == 0 || batch.host_seq_ctx == nullptr) return batch.max_ctx;
  // The longest context the listed tokens attend (the splits are sized for theirs, not for the
  // skipped sequences').
  int64_t longest = 0;
  for (int64_t s = 0; s < batch.num_seqs; ++s) {
    if (batch.host_seq_tokens[s] > 0 && batch.host_seq_tokens[s] < skip_seq_tokens) {
      longest = std::max<int64_t>(longest, batch.host_seq_ctx[s]);
    }
  }
  return longest;
}

absl::Status CudaBackend::SplitAttention(cuda::AttentionArgs* a, int64_t length) {
  switch (attention_) {
    case BackendOptions::DeviceAttention::kTensorCore: a->kernel = cuda::AttentionKernel::kTensorCore; break;
    case BackendOptions::DeviceAttention::kTensorCoreBf16: a->kernel = cuda::AttentionKernel::kTensorCoreBf16; break;
    case BackendOptions::DeviceAttention::kScalar: a->kernel = cuda::AttentionKernel::kScalar; break;
    case BackendOptions::DeviceAttention::kWgmma: a->kernel = cuda::AttentionKernel::kWgmma; break;
  }
  a->compute_capability = compute_capability_;
  a->max_shared_bytes = shared_optin_;
  a->sm_shared_bytes = shared_per_sm_;
  a->reserved_shared_bytes = shared_reserved_;
  a->stages = attention_stages_;
  a->query_in_registers = attention_query_registers_;
  a->tiles_per_block = attention_tiles_per_block_;
  // As many blocks as the multiprocessors hold (the tensor-core plan's count; else two each),
  // splits of at least 64 positions (two chunks of the tensor-core kernel, one of the warpgroup
  // kernel: a block's fixed work, the query's load, is a fraction of a chunk's), at most 64
  // splits or one a multiprocessor. Batch-1 decode of a short context would otherwise run on a
  // handful of multiprocessors (Kimi K2's 64 heads: 4 blocks; 1 on the warpgroup kernel).
  const cuda::AttentionBlocks ab = cuda::AttentionBlocksOf(*a);
  const int64_t blocks = cuda::GridTokens(*a) * ab.per_token,
                target = (ab.per_sm > 0 ? ab.per_sm : 2) * static_cast<int64_t>(sm_count_);
  a->splits = 1;
  if (blocks == 0 || blocks >= target || length < 128) return absl::OkStatus();
  a->splits = std::min<int64_t>({(target + blocks - 1) / blocks, (length + 63) / 64, std::max(64, sm_count_)});
  // The partial results are per (token, head) of the grid (the listed tokens' positions with
  // listed runs), whichever kernel runs.
  const int64_t pairs = cuda::GridTokens(*a) * a->heads;
  const size_t bytes = static_cast<size_t>(pairs * a->splits * (a->dv + 2)) * sizeof(float);
  LLMRT_ASSIGN_OR_RETURN(void* p, Scratch(kScratchAttention, bytes, "attention splits"));
  a->partial = static_cast<float*>(p);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExpertBank>> CudaBackend::PrepareExperts(std::vector<ExpertWeights> experts) {
  auto bank = std::make_unique<CudaExpertBank>();
  const int64_t E = static_cast<int64_t>(experts.size());
  if (E == 0) return absl::InvalidArgumentError("an expert bank without experts");
  const int64_t I = experts[0].gate.rows, H = experts[0].gate.cols;
  static constexpr const char* kNames[3] = {"gate", "up", "down"};
  std::vector<cuda::WeightRef> refs(static_cast<size_t>(3 * E));
  for (int64_t e = 0; e < E; ++e) {
    const ExpertWeights& x = experts[e];
    if (x.gate.rows != I || x.gate.cols != H || x.up.rows != I || x.up.cols != H || x.down.rows != H ||
        x.down.cols != I) {
      return absl::InvalidArgumentError(absl::StrCat("expert ", e, " has shapes other than expert 0's (gate [", I, ", ",
                                                     H, "]): the grouped GEMM needs one shape"));
    }
    const Weight* w[3] = {&x.gate, &x.up, &x.down};
    for (int j = 0; j < 3; ++j) {
      if (!w[j]->defined() || !SupportsWeightFormat(w[j]->format)) {
        return UnsupportedError(absl::StrCat("expert ", e, " ", kNames[j], ": ",
                                             w[j]->defined() ? "a weight format without a CUDA kernel"
                                                             : "no weights (experts held by other ranks)"));
      }
      refs[j * E + e] = WeightOf(*w[j]);
    }
  }
  // The GEMV kernel serves a projection when every expert's weight takes it in one format; any
  // other mix runs the tiled kernel, which dequantizes each expert's format element by element.
  for (int j = 0; j < 3; ++j) {
    const cuda::Elem type = refs[j * E].type;
    bool gemv = true;
    for (int64_t e = 0; e < E && gemv; ++e) {
      gemv = refs[j * E + e].type == type && cuda::GemvApplies(refs[j * E + e]);
    }
    bank->gemv_bits_[j] = !gemv                        ? 0
                          : type == cuda::kElemInt4    ? 4
                          : type == cuda::kElemFp8E4M3 ? 8
                          : type == cuda::kElemBf16    ? 16
                                                       : 32;
    bool qmma = bank->gemv_bits_[j] == 4 || bank->gemv_bits_[j] == 8;
    for (int64_t e = 0; e < E && qmma; ++e) qmma = cuda::QuantMmaApplies(refs[j * E + e]);
    bank->quant_mma_[j] = qmma;
    bool bf16 = true;
    for (int64_t e = 0; e < E && bf16; ++e) bf16 = refs[j * E + e].type == cuda::kElemBf16;
    bank->bf16_[j] = bf16;
    const cuda::WeightRef& r0 = refs[j * E];
    bool fp8 = r0.type == cuda::kElemFp8E4M3 && Fp8BlocksTakeActivationPolicy(r0.block_rows, r0.block_cols);
    for (int64_t e = 0; e < E && fp8; ++e) {
      const cuda::WeightRef& r = refs[j * E + e];
      fp8 = r.type == cuda::kElemFp8E4M3 && r.block_rows == r0.block_rows && r.block_cols == r0.block_cols;
    }
    bank->fp8_block_cols_[j] = fp8 ? r0.block_cols : 0;
  }
  const size_t bytes = refs.size() * sizeof(cuda::WeightRef);
  LLMRT_ASSIGN_OR_RETURN(void* table, DeviceMalloc(bytes, "the expert weight table"));
  bank->table_ = static_cast<cuda::WeightRef*>(table);
  LLMRT_RETURN_IF_ERROR(CopyToDevice(bank->table_, refs.data(), bytes));
  bank->inter_ = I;
  bank->hidden_ = H;
  bank->experts_ = std::move(experts);
  return std::unique_ptr<ExpertBank>(std::move(bank));
}

namespace {

// The parts of a KvWrite / KvCalibrate (float32 [T, n] each, at most three).
absl::StatusOr<cuda::KvParts> PartsOf(std::initializer_list<Tensor> parts, int64_t rows, int64_t max_width) {
  if (parts.size() < 1 || parts.size() > 3) return absl::InternalError(absl::StrCat(parts.size(), " KV row parts"));
  cuda::KvParts kp{};
  int64_t width = 0;
  for (const Tensor& p : parts) {
    if (p.dim(0) != rows || p.dtype() != DType::kF32) {
      return absl::InternalError(absl::StrCat("a KV row part of ", p.dim(0), " rows for ", rows, " tokens"));
    }
    kp.part[kp.count++] = Const(p);
    width += p.row_size();
  }
  if (width > max_width) {
    return absl::InternalError(absl::StrCat("KV row parts of ", width, " values for rows of ", max_width));
  }
  return kp;
}

}  // namespace

void CudaBackend::KvCalibrate(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts) {
  Run("KvCalibrate", [&]() -> absl::Status {
    LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer, /*needs_scale=*/false));
    LLMRT_CUDA_CHECK(cache.codec->scale_kind() == KvScaleKind::kPerLayer);
    if (parts.size() == 0) return absl::InternalError("KvCalibrate without parts");
    LLMRT_ASSIGN_OR_RETURN(const cuda::KvParts kp, PartsOf(parts, parts.begin()->dim(0), cache.width));
    return Launched(cuda::LaunchKvCalibrate(KvOf(cache), layer, kp, Stream(stream_)));
  });
}

void CudaBackend::KvWrite(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts,
                          const AttentionBatch& batch) {
  Run("KvWrite", [&]() -> absl::Status {
    LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer));
    LLMRT_ASSIGN_OR_RETURN(const cuda::KvParts kp, PartsOf(parts, batch.num_tokens, cache.width));
    LLMRT_CUDA_CHECK(cache.fresh_rows == 0 || batch.num_tokens <= cache.fresh_rows);
    return Launched(cuda::LaunchKvWrite(KvOf(cache), layer, kp, BatchOf(batch), error_word_, Stream(stream_)));
  });
}

void CudaBackend::KvExportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& dst) {
  Run("KvExportRows", [&]() -> absl::Status {
    LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer, /*needs_scale=*/false));
    const int64_t n = slots.numel();
    LLMRT_CUDA_CHECK(dst.bytes() >= static_cast<size_t>(n * cache.row_bytes) && dst.contiguous());
    return Launched(cuda::LaunchKvExportRows(KvOf(cache), layer, slots.data_as<int32_t>(), n, dst.data_as<uint8_t>(),
                                             error_word_, Stream(stream_)));
  });
}

void CudaBackend::KvImportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& src,
                               const KvCodec& src_codec, const KvRowLayout& src_layout, float src_scale) {
  Run("KvImportRows", [&]() -> absl::Status {
    LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer));
    if (!DeviceKvCodec(src_codec)) {
      return UnsupportedError(absl::StrCat("rows of the KV codec ", src_codec.name(), " cannot be decoded on CUDA"));
    }
    LLMRT_ASSIGN_OR_RETURN(const cuda::KvRowRef src_row, RowRefOf(src_codec, src_layout));
    const int64_t n = slots.numel();
    LLMRT_CUDA_CHECK(src_layout.width == cache.width && src.bytes() >= static_cast<size_t>(n * src_layout.row_bytes));
    const bool same = src_codec.id() == cache.codec->id();
    LLMRT_CUDA_CHECK(!same || src_layout.row_bytes == cache.row_bytes);
    return Launched(cuda::LaunchKvImportRows(KvOf(cache), layer, slots.data_as<int32_t>(), n, src.data_as<uint8_t>(),
                                             src_row, src_scale, same, error_word_, Stream(stream_)));
  });
}

// The FlashAttention kernel's arguments that the expanded MLA and the GQA prefill share: the pass,
// the query [T, heads * (nope + rope)], the contexts' row stride, the scale and the output.
cuda::MlaExpandedArgs CudaBackend::FlashArgs(const cuda::BatchRef& b, int64_t S, int64_t heads, const Tensor& q,
                                             int64_t stride, float scale, const Tensor& out) const {
  cuda::MlaExpandedArgs a{};
  a.batch = b;
  a.num_seqs = S;
  a.heads = heads;
  a.q = q.data_as<const float>();
  a.q_ld = q.row_stride();
  a.ctx_stride = stride;
  a.scale = scale;
  a.out = out.data_as<float>();
  a.out_ld = out.row_stride();
  a.max_shared_bytes = shared_optin_;
  return a;
}

bool CudaBackend::GqaFlashAttention(const Tensor& q, const KvCacheView& cache, int64_t layer,
                                    const AttentionBatch& batch, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                    float scale, const Tensor& out) {
  // Whether the pass is taken: decided on the host before anything is enqueued.
  // LLMRT_CUDA_ATTENTION=scalar asks for the float32 reference kernel: it keeps it.
  const int64_t T = batch.num_tokens, S = batch.num_seqs, mode = gqa_flash_min_tokens_;
  if (mode <= 0 || batch.decode || failed_ || !sticky_.ok() || S <= 0 || batch.max_ctx <= 0 ||
      batch.host_seq_tokens == nullptr || batch.host_seq_ctx == nullptr ||
      attention_ == BackendOptions::DeviceAttention::kScalar) {
    return false;
  }
  // The sequences that bring at least `mode` tokens take the FlashAttention form, their contexts'
  // rows gathered at a stride of the longest of them. The others (decoding sequences beside a
  // prompt's chunk) stay on the token-by-token kernel in the same op: a decoding token in a tile
  // of 64 rows per query head would read its whole context once per query head, where the token
  // kernel reads it once per KV head's tile of heads.
  int64_t taken = 0, stride = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (batch.host_seq_tokens[s] < mode) continue;
    ++taken;
    stride = std::max<int64_t>(stride, batch.host_seq_ctx[s]);
  }
  if (taken == 0 || stride <= 0) return false;
  cuda::MlaExpandedPlan plan;
  if (kv_heads <= 0 || heads % kv_heads != 0 || head_dim % 8 != 0 ||
      !cuda::PlanMlaExpanded(head_dim, 0, head_dim, &plan) || plan.shared_bytes > shared_optin_) {
    return false;
  }
  if (!CheckKvView(cache, layer).ok() || cache.width != 2 * kv_heads * head_dim) return false;
  const cuda::KvRef kv = KvOf(cache);
  if (kv.row.nseg == 0 && kv.type == cuda::kElemF32) return false;  // F32 rows: the float32 reference path
  if (q.dim(0) != T || q.row_size() != heads * head_dim || out.dim(0) != T || out.row_size() != heads * head_dim) {
    return false;  // (the token-by-token path reports what is wrong)
  }
  // The taken sequences' context rows, whole (K and V of every KV head), as bfloat16.
  const int64_t W = cache.width;
  const size_t bytes = static_cast<size_t>(taken * stride * W) * sizeof(uint16_t);
  if (bytes > kMlaExpandedMaxBytes || bytes >= gqa_flash_refused_bytes_) return false;
  cudaSetDevice(device_);
  const absl::StatusOr<void*> rows = Scratch(kScratchMlaLatent, bytes, "GQA context rows");
  if (!rows.ok()) {
    if (rows.status().code() == absl::StatusCode::kResourceExhausted) {
      gqa_flash_refused_bytes_ = std::min(gqa_flash_refused_bytes_, bytes);
    }
    Log(LogLevel::kWarning, absl::StrCat("cuda backend: GQA attention runs token by token: ", rows.status().message()));
    return false;
  }
  Run("GqaAttention", [&]() -> absl::Status {
    cudaStream_t s = Stream(stream_);
    uint16_t* ctx_rows = static_cast<uint16_t*>(*rows);
    const cuda::BatchRef b = BatchOf(batch);
    LLMRT_RETURN_IF_ERROR(Launched(
        cuda::LaunchMlaGatherLatent(kv, layer, b, S, W, 0, stride, ctx_rows, ctx_rows, error_word_, s, mode, taken)));
    cuda::MlaExpandedArgs a = FlashArgs(b, S, heads, q, stride, scale, out);
    a.nope = head_dim;  // the whole key: rope was applied before the rows were written
    a.rope = 0;
    a.v = head_dim;
    a.kvx = ctx_rows;
    a.kvx_ld = W;
    a.group = heads / kv_heads;
    a.k_head_step = a.v_head_step = head_dim;
    a.v_off = kv_heads * head_dim;
    a.rope_keys = ctx_rows;  // (no rope part)
    a.min_seq_tokens = mode;
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchMlaExpandedAttention(a, s)));
    if (taken == S) return absl::OkStatus();
    return GqaTokens(q, cache, layer, batch, heads, kv_heads, head_dim, scale, out, mode);
  });
  return true;
}

absl::Status CudaBackend::GqaTokens(const Tensor& q, const KvCacheView& cache, int64_t layer,
                                    const AttentionBatch& batch, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                    float scale, const Tensor& out, int64_t skip_seq_tokens) {
  LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer));
  const int64_t T = batch.num_tokens;
  LLMRT_CUDA_CHECK(kv_heads > 0 && heads % kv_heads == 0 && cache.width == 2 * kv_heads * head_dim);
  LLMRT_CUDA_CHECK(q.dim(0) == T && q.row_size() == heads * head_dim && out.dim(0) == T &&
                   out.row_size() == heads * head_dim);
  cuda::AttentionArgs a{};
  a.kv = KvOf(cache);
  a.layer = layer;
  a.batch = BatchOf(batch);
  a.heads = heads;
  a.kv_group = heads / kv_heads;
  a.q1 = q.data_as<const float>();
  a.q1_ld = q.row_stride();
  a.q1_head = head_dim;
  a.q1_len = head_dim;
  a.k1_off = 0;
  a.k_head_step = head_dim;
  a.v_off = kv_heads * head_dim;
  a.v_head_step = head_dim;
  a.dv = head_dim;
  a.scale = scale;
  a.out = out.data_as<float>();
  a.out_ld = out.row_stride();
  const int64_t length = ListTokens(batch, skip_seq_tokens, &a);
  LLMRT_RETURN_IF_ERROR(SplitAttention(&a, length));
  return Launched(cuda::LaunchAttention(a, error_word_, Stream(stream_)));
}

void CudaBackend::GqaAttention(const Tensor& q, const KvCacheView& cache, int64_t layer, const AttentionBatch& batch,
                               int64_t heads, int64_t kv_heads, int64_t head_dim, float scale, const Tensor& out) {
  if (GqaFlashAttention(q, cache, layer, batch, heads, kv_heads, head_dim, scale, out)) return;
  Run("GqaAttention", [&]() -> absl::Status {
    return GqaTokens(q, cache, layer, batch, heads, kv_heads, head_dim, scale, out, 0);
  });
}

void CudaBackend::MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d, const Tensor& q_lat) {
  Run("MlaAbsorbQuery", [&]() -> absl::Status {
    const int64_t T = q.dim(0);
    LLMRT_CUDA_CHECK(q.row_size() == d.heads * (d.nope + d.rope) && kv_b.rows == d.heads * (d.nope + d.v) &&
                     kv_b.cols == d.kv_lora);
    LLMRT_CUDA_CHECK(q_lat.dim(0) == T && q_lat.row_size() == d.heads * d.kv_lora);
    if (!FlatWeight(kv_b)) return UnsupportedError("an MLA kv_b that is not F32 or BF16");
    return Launched(cuda::LaunchMlaAbsorbQuery(Const(q), WeightOf(kv_b), d.heads, d.nope, d.rope, d.v, d.kv_lora,
                                               Mut(q_lat), Stream(stream_)));
  });
}

void CudaBackend::MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache, int64_t layer,
                               const AttentionBatch& batch, const MlaDims& d, float scale, const Tensor* selected,
                               const Tensor& out_lat) {
  Run("MlaAttention", [&]() -> absl::Status {
    LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer));
    const int64_t T = batch.num_tokens, qw = d.nope + d.rope;
    LLMRT_CUDA_CHECK(cache.width >= d.kv_lora + d.rope && q_lat.dim(0) == T && out_lat.dim(0) == T);
    LLMRT_CUDA_CHECK(q_lat.row_size() == d.heads * d.kv_lora && out_lat.row_size() == d.heads * d.kv_lora);
    LLMRT_CUDA_CHECK(q.dim(0) == T && q.row_size() == d.heads * qw);
    LLMRT_CUDA_CHECK(selected == nullptr || (selected->dim(0) == T && selected->contiguous()));
    cuda::AttentionArgs a{};
    a.kv = KvOf(cache);
    a.layer = layer;
    a.batch = BatchOf(batch);
    a.heads = d.heads;
    a.kv_group = 1;
    a.q1 = q_lat.data_as<const float>();
    a.q1_ld = q_lat.row_stride();
    a.q1_head = d.kv_lora;
    a.q1_len = d.kv_lora;
    a.k1_off = 0;
    a.q2 = q.data_as<const float>() + d.nope;
    a.q2_ld = q.row_stride();
    a.q2_head = qw;
    a.q2_len = d.rope;
    a.k2_off = d.kv_lora;
    a.k_head_step = 0;
    a.v_off = 0;
    a.v_head_step = 0;
    a.dv = d.kv_lora;
    a.scale = scale;
    if (selected != nullptr) {
      a.selected = selected->data_as<const int32_t>();
      a.top_k = selected->row_size();
    }
    a.out = out_lat.data_as<float>();
    a.out_ld = out_lat.row_stride();
    const int64_t length = ListTokens(batch, batch.skip_seq_tokens, &a);  // (the sequences MlaExpandedAttention took)
    LLMRT_RETURN_IF_ERROR(SplitAttention(&a, selected != nullptr ? std::min(length, a.top_k) : length));
    return Launched(cuda::LaunchAttention(a, error_word_, Stream(stream_)));
  });
}

void CudaBackend::MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d, const Tensor& out) {
  Run("MlaProjectValue", [&]() -> absl::Status {
    const int64_t T = o_lat.dim(0);
    LLMRT_CUDA_CHECK(o_lat.row_size() == d.heads * d.kv_lora && kv_b.rows == d.heads * (d.nope + d.v) &&
                     kv_b.cols == d.kv_lora);
    LLMRT_CUDA_CHECK(out.dim(0) == T && out.row_size() == d.heads * d.v);
    if (!FlatWeight(kv_b)) return UnsupportedError("an MLA kv_b that is not F32 or BF16");
    return Launched(cuda::LaunchMlaProjectValue(Const(o_lat), WeightOf(kv_b), d.heads, d.nope, d.v, d.kv_lora,
                                                Mut(out), Stream(stream_)));
  });
}

int64_t CudaBackend::MlaExpandedAttention(const Tensor& q, const Weight& kv_b, const KvCacheView& cache, int64_t layer,
                                          const AttentionBatch& batch, const MlaDims& d, float scale,
                                          const Tensor& out) {
  // Whether (and for which sequences) the pass is taken: decided on the host before anything is
  // enqueued. (LLMRT_CUDA_ATTENTION=scalar asks for the float32 reference kernel: it keeps it.)
  const int64_t T = batch.num_tokens, S = batch.num_seqs, mode = mla_expanded_min_tokens_;
  if (mode == 0 || batch.decode || failed_ || !sticky_.ok() || S <= 0 || batch.max_ctx <= 0 ||
      batch.host_seq_tokens == nullptr || batch.host_seq_ctx == nullptr ||
      attention_ == BackendOptions::DeviceAttention::kScalar) {
    return 0;
  }
  cuda::MlaExpandedPlan plan;
  if (!cuda::PlanMlaExpanded(d.nope, d.rope, d.v, &plan) || plan.shared_bytes > shared_optin_ || d.kv_lora % 8 != 0 ||
      cublaslt_ == nullptr) {
    return 0;
  }
  if (!CheckKvView(cache, layer).ok() || cache.width < d.kv_lora + d.rope) return 0;
  const cuda::KvRef kv = KvOf(cache);
  if (kv.row.nseg == 0 && kv.type == cuda::kElemF32) return 0;  // F32 rows: the float32 reference path
  if ((kv_b.format != kWeightBf16 && kv_b.format != kWeightF32) || kv_b.rows != d.heads * (d.nope + d.v) ||
      kv_b.cols != d.kv_lora) {
    return 0;
  }
  const int64_t N = kv_b.rows, K = d.kv_lora;
  // The sequences that bring at least `threshold` tokens are taken: their contexts' latent rows
  // are gathered at a stride of the longest of them rounded up to 256 (so that cuBLASLt sees few
  // distinct row counts), and expanded. The others (decoding sequences beside a prompt's chunk)
  // are left to the absorbed ops, which the model runs for them.
  const size_t row_bytes = static_cast<size_t>(K + d.rope + N) * sizeof(uint16_t);
  const size_t most_bytes = std::min(kMlaExpandedMaxBytes, mla_expanded_refused_bytes_ - 1);
  const cuda::MlaExpandedChoice choice =
      cuda::ChooseMlaExpanded(batch.host_seq_tokens, batch.host_seq_ctx, S, K, d.nope, d.rope, d.v, mode,
                              static_cast<int64_t>(most_bytes / row_bytes));
  if (choice.threshold <= 0) return 0;
  const int64_t threshold = choice.threshold, taken = choice.taken, stride = choice.stride, R = taken * stride;
  // The kernels take every sequence of at least `threshold` tokens: the gathered rows must hold
  // them all.
  int64_t qualify = 0, longest = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (batch.host_seq_tokens[s] < threshold) continue;
    ++qualify;
    longest = std::max<int64_t>(longest, batch.host_seq_ctx[s]);
  }
  if (qualify != taken || longest > stride) return 0;
  const size_t latent_bytes = static_cast<size_t>(R * (K + d.rope)) * sizeof(uint16_t);
  const size_t kvx_bytes = static_cast<size_t>(R * N) * sizeof(uint16_t);
  if (latent_bytes + kvx_bytes > kMlaExpandedMaxBytes || latent_bytes + kvx_bytes >= mla_expanded_refused_bytes_) {
    return 0;
  }
  if (q.dim(0) != T || q.row_size() != d.heads * (d.nope + d.rope) || out.dim(0) != T ||
      out.row_size() != d.heads * d.v || (kv_b.format == kWeightBf16 && !CublasLtGemm::Aligned(kv_b.data.data()))) {
    return 0;  // (the absorbed ops report what is wrong)
  }
  cudaSetDevice(device_);
  const absl::StatusOr<const CublasLtGemm::Call*> call =
      cublaslt_->Prepare(CublasLtGemm::Operands::kBf16Out, N, K, R, N);
  if (!call.ok() || *call == nullptr) return 0;
  // The buffers, and a float32 kv_b's BF16 copy, before anything is enqueued: where one does not
  // fit in device memory the pass runs absorbed, and so do later passes that need as much.
  absl::StatusOr<void*> lp = Scratch(kScratchMlaLatent, latent_bytes, "expanded MLA latent rows");
  absl::StatusOr<void*> xp = lp.ok() ? Scratch(kScratchMlaExpanded, kvx_bytes, "expanded MLA keys and values")
                                     : lp.status();
  const void* w = kv_b.data.data();
  void* fill = nullptr;  // a new copy to fill
  if (xp.ok() && kv_b.format == kWeightF32) {
    KvBCopy& c = kv_b_bf16_[w];
    if (c.copy != nullptr && (c.weight.owner_before(kv_b.data.storage()) || kv_b.data.storage().owner_before(c.weight) ||
                              c.weight.expired() || c.elements != N * K)) {
      cudaFree(c.copy);  // another weight's, now gone: this address was reused
      c = KvBCopy{};
    }
    if (c.copy == nullptr) {
      const absl::StatusOr<void*> copy =
          DeviceMalloc(static_cast<size_t>(N * K) * sizeof(uint16_t), "a BF16 copy of an MLA kv_b");
      if (copy.ok()) {
        c = KvBCopy{kv_b.data.storage(), *copy, N * K};
        fill = *copy;
      } else {
        kv_b_bf16_.erase(w);
        xp = copy.status();
      }
    }
    if (xp.ok()) w = c.copy;
  }
  if (!xp.ok()) {
    if (xp.status().code() == absl::StatusCode::kResourceExhausted) {
      mla_expanded_refused_bytes_ = std::min(mla_expanded_refused_bytes_, latent_bytes + kvx_bytes);
    }
    Log(LogLevel::kWarning, absl::StrCat("cuda backend: MLA attention runs absorbed: ", xp.status().message()));
    return 0;
  }
  Run("MlaExpandedAttention", [&]() -> absl::Status {
    cudaStream_t s = Stream(stream_);
    if (fill != nullptr) {
      const absl::Status st = Launched(cuda::LaunchRoundToBf16(
          cuda::ConstMat{static_cast<const float*>(kv_b.data.data()), N, K, K}, static_cast<uint16_t*>(fill), s));
      if (!st.ok()) {  // not filled: made again at the next use
        kv_b_bf16_.erase(kv_b.data.data());
        cudaFree(fill);
        return st;
      }
    }
    uint16_t* latent = static_cast<uint16_t*>(*lp);
    uint16_t* rope_keys = latent + R * K;  // 16-byte aligned: K is a multiple of 8
    const cuda::BatchRef b = BatchOf(batch);
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchMlaGatherLatent(kv, layer, b, S, K, d.rope, stride, latent, rope_keys,
                                                               error_word_, s, threshold, taken)));
    LLMRT_RETURN_IF_ERROR(cublaslt_->RunBf16Out(**call, w, latent, static_cast<uint16_t*>(*xp), stream_));
    cuda::MlaExpandedArgs a = FlashArgs(b, S, d.heads, q, stride, scale, out);
    a.nope = d.nope;
    a.rope = d.rope;
    a.v = d.v;
    a.kvx = static_cast<const uint16_t*>(*xp);
    a.kvx_ld = N;
    a.k_head_step = a.v_head_step = d.nope + d.v;
    a.v_off = d.nope;
    a.rope_keys = rope_keys;
    a.min_seq_tokens = threshold;
    return Launched(cuda::LaunchMlaExpandedAttention(a, s));
  });
  return threshold;
}

void CudaBackend::DsaSelect(const Tensor& q, const Tensor& w, const KvCacheView& cache, int64_t layer,
                            const AttentionBatch& batch, int64_t heads, int64_t head_dim, int64_t key_offset,
                            float key_scale, int64_t top_k, const Tensor& selected) {
  Run("DsaSelect", [&]() -> absl::Status {
    LLMRT_RETURN_IF_ERROR(CheckKvView(cache, layer));
    const int64_t T = batch.num_tokens;
    LLMRT_CUDA_CHECK(q.dim(0) == T && q.row_size() == heads * head_dim && w.dim(0) == T && w.row_size() == heads);
    LLMRT_CUDA_CHECK(key_offset + head_dim <= cache.width && selected.dim(0) == T && selected.row_size() == top_k);
    LLMRT_CUDA_CHECK(top_k > 0 && batch.max_ctx >= 0);
    float* scores = nullptr;
    if (batch.max_ctx > top_k) {
      LLMRT_ASSIGN_OR_RETURN(void* p, Scratch(kScratchDsaScores,
                                              static_cast<size_t>(T * batch.max_ctx) * sizeof(float), "DSA scores"));
      scores = static_cast<float*>(p);
    }
    void* candidates = nullptr;
    if (const size_t bytes = dsa_two_stage_topk_ ? cuda::DsaTopKCandidateBytes(T, batch.max_ctx, top_k) : 0;
        bytes > 0) {
      LLMRT_ASSIGN_OR_RETURN(candidates, Scratch(kScratchDsaCandidates, bytes, "DSA top-k candidates"));
    }
    bool tensor_cores = false;
    const absl::Status st = Launched(cuda::LaunchDsaSelect(
        Const(q), Const(w), KvOf(cache), layer, BatchOf(batch), heads, head_dim, key_offset, key_scale, top_k, scores,
        selected.data_as<int32_t>(), selected.row_stride(), error_word_, Stream(stream_),
        static_cast<cuda::DsaScores>(dsa_scores_), candidates, &tensor_cores));
    dsa_tensor_core_passes_ += tensor_cores ? 1 : 0;
    return st;
  });
}

bool CudaBackend::moe_wgmma_available() const {
  return compute_capability_ == 90 && cuda::GroupedGemmWgmmaBuilt();
}

void CudaBackend::MoeRoute(const Tensor& x, const Weight& gate, const Weight& bias, const RouterParams& p,
                           const Tensor& idx, const Tensor& weights) {
  Run("MoeRoute", [&]() -> absl::Status {
    const int64_t T = x.dim(0), E = p.num_experts, K = p.top_k;
    LLMRT_CUDA_CHECK(gate.rows == E && gate.cols == x.row_size() && idx.dim(0) == T && idx.row_size() == K);
    LLMRT_CUDA_CHECK(weights.dim(0) == T && weights.row_size() == K && K >= 1 && K <= E);
    LLMRT_CUDA_CHECK(p.n_group >= 1 && E % p.n_group == 0 && p.topk_group >= 1 && p.topk_group <= p.n_group);
    if (p.n_group > 64) return UnsupportedError(absl::StrCat("noaux_tc routing with ", p.n_group, " groups (at most 64)"));
    if (!FlatWeight(gate) || (bias.defined() && !FlatWeight(bias))) {
      return UnsupportedError("a router gate or bias that is not F32 or BF16");
    }
    const size_t bytes = static_cast<size_t>(T * E) * sizeof(float);
    LLMRT_ASSIGN_OR_RETURN(void* logits, Scratch(kScratchRouterLogits, bytes, "router logits"));
    LLMRT_ASSIGN_OR_RETURN(void* choice, Scratch(kScratchRouterChoice, bytes, "router choices"));
    cuda::MutMat lm{static_cast<float*>(logits), T, E, E};
    // Float32 activations under every policy, as on the CPU: the router's logits choose the
    // experts, a discrete decision that a rounded activation can flip.
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchGemm(Const(x), WeightOf(gate), lm, Stream(stream_))));
    cuda::RouteArgs a{};
    a.logits = static_cast<const float*>(logits);
    a.T = T;
    a.E = E;
    a.K = K;
    a.n_group = p.n_group;
    a.topk_group = p.topk_group;
    a.norm_topk_prob = p.norm_topk_prob;
    a.routed_scaling_factor = p.routed_scaling_factor;
    if (bias.defined()) {
      a.bias = bias.data.data();
      a.bias_type = bias.format == kWeightBf16 ? cuda::kElemBf16 : cuda::kElemF32;
    }
    a.scratch = static_cast<float*>(choice);
    a.idx = idx.data_as<int32_t>();
    a.idx_ld = idx.row_stride();
    a.weights = weights.data_as<float>();
    a.weights_ld = weights.row_stride();
    return Launched(cuda::LaunchMoeRoute(a, Stream(stream_)));
  });
}

void CudaBackend::MoeExperts(const Tensor& x, const Tensor& idx, const Tensor& weights, const ExpertBank& experts,
                             const Tensor& out) {
  Run("MoeExperts", [&]() -> absl::Status {
    const auto& bank = static_cast<const CudaExpertBank&>(experts);
    const int64_t T = x.dim(0), H = x.row_size(), K = idx.row_size(), E = bank.num_experts(), I = bank.inter_;
    LLMRT_CUDA_CHECK(H == bank.hidden_ && out.dim(0) == T && out.row_size() == H);
    LLMRT_CUDA_CHECK(idx.dim(0) == T && weights.dim(0) == T && weights.row_size() == K && K >= 1);
    const int64_t P = T * K;
    if (P == 0) return absl::OkStatus();
    if (K > 64) return UnsupportedError(absl::StrCat("MoE with ", K, " experts per token (at most 64 on this backend)"));
    if (P >= (int64_t{1} << 31)) return UnsupportedError(absl::StrCat("MoE over ", P, " (token, expert) pairs in one pass"));
    // The activation policies, per projection, as on the CPU: BF16 experts read bf16-rounded
    // inputs under the BF16 and FP8 policies, FP8 experts read them under the BF16 policy and
    // e4m3 inputs with per-block scales under the FP8 policy (the GEMV with activation scales, or
    // the tiled kernel on the dequantized values). The grouped kernels' float32 sums of exact
    // products give the policies' numerics. cuBLASLt does not take them: a grouped GEMM over the
    // device-side routing would need the per-expert row counts on the host (a synchronization
    // per layer) or one GEMM per expert and tile.
    const bool bf16_policy = activations_ == QuantizedActivations::kBf16;
    const bool fp8_policy = activations_ == QuantizedActivations::kFp8;
    auto rounds = [&](int j) {
      return ((bf16_policy || fp8_policy) && bank.bf16_[j]) || (bf16_policy && bank.fp8_block_cols_[j] > 0);
    };
    auto quantizes = [&](int j) { return fp8_policy && bank.fp8_block_cols_[j] > 0; };
    // Whether projection j (k input columns) runs on the tensor-core grouped GEMM: its input
    // bfloat16-rounded and its experts BF16, or its input e4m3 with scales (the GEMV's form) and its
    // experts FP8 in blocks of whole 32-column steps (the products are exact either way).
    auto takes_mma = [&](int j, int64_t k) {
      const bool bf16 = rounds(j) && !quantizes(j) && bank.gemv_bits_[j] == 16;
      const bool fp8 = quantizes(j) && bank.gemv_bits_[j] == 8 && bank.fp8_block_cols_[j] % 32 == 0 && k % 16 == 0;
      return moe_mma_ && (bf16 || fp8);
    };
    // Such a projection on Hopper's warpgroup MMAs (device_moe_wgmma, on a device of compute
    // capability 9.0 with the sm_90a code built); FP8 experts there need column blocks of whole
    // 64-column steps (else the mma.sync kernel).
    const bool wgmma = moe_wgmma_ && moe_wgmma_available();
    auto takes_wgmma = [&](int j, int64_t k) {
      return wgmma && takes_mma(j, k) && (!quantizes(j) || bank.fp8_block_cols_[j] % 64 == 0);
    };
    // Rows a tile takes: 32 for every grouped kernel; where all three projections run on the
    // tensor-core kernel, up to 128 (64 for FP8 experts on the mma.sync kernel), by the rows an
    // expert gets on average (ceil(P / min(E, P))), so that a prefill chunk reads each expert's
    // weights once a tile of up to 128 rows. The rows' bits do not depend on it (the same MMAs over
    // the same steps of k).
    int64_t tile_rows = cuda::kGemmTileRows;
    if (takes_mma(0, H) && takes_mma(1, H) && takes_mma(2, I)) {
      // (The warpgroup kernel's MMAs take 64 rows: by default its tiles take at least that many;
      // it takes FP8 experts in tiles of 128 too.)
      const bool all_wgmma = takes_wgmma(0, H) && takes_wgmma(1, H) && takes_wgmma(2, I);
      const bool fp8 = quantizes(0) || quantizes(1) || quantizes(2);
      tile_rows = cuda::GroupedMmaTileRows(P, E, moe_tile_rows_, fp8 && !all_wgmma);
      if (all_wgmma && moe_tile_rows_ == 0) tile_rows = std::max<int64_t>(tile_rows, 64);
    }
    last_moe_wgmma_ = takes_wgmma(0, H) || takes_wgmma(1, H) || takes_wgmma(2, I);
    // The most tiles a routing can make: an expert with n rows takes ceil(n / tile) <= n / tile + 1
    // tiles, so all take at most ceil(P / tile) + (active experts) <= ceil(P / tile) + min(E, P);
    // no tile is empty, so never more than P either (at decode, P block rows, not E + 1).
    const int64_t max_tiles = std::min(P, (P + tile_rows - 1) / tile_rows + std::min(E, P));
    last_moe_tile_rows_ = tile_rows;
    // Index scratch: perm_token [P], perm_pos [P], counts [2E], tiles 3 * max_tiles + 1.
    const size_t index_bytes = static_cast<size_t>(2 * P + 2 * E + 3 * max_tiles + 1) * sizeof(int32_t);
    LLMRT_ASSIGN_OR_RETURN(void* ip, Scratch(kScratchMoeIndex, index_bytes, "MoE routing indices"));
    LLMRT_ASSIGN_OR_RETURN(void* gp, Scratch(kScratchMoeGate, static_cast<size_t>(P * I) * sizeof(float), "MoE gate"));
    LLMRT_ASSIGN_OR_RETURN(void* up, Scratch(kScratchMoeUp, static_cast<size_t>(P * I) * sizeof(float), "MoE up"));
    LLMRT_ASSIGN_OR_RETURN(void* dp, Scratch(kScratchMoeDown, static_cast<size_t>(P * H) * sizeof(float), "MoE down"));
    int32_t* ints = static_cast<int32_t*>(ip);
    cuda::PermuteArgs pa{};
    pa.idx = idx.data_as<const int32_t>();
    pa.idx_ld = idx.row_stride();
    pa.T = T;
    pa.K = K;
    pa.E = E;
    pa.perm_token = ints;
    pa.perm_pos = ints + P;
    pa.counts = ints + 2 * P;
    pa.tile_expert = ints + 2 * P + 2 * E;
    pa.tile_row0 = pa.tile_expert + max_tiles;
    pa.tile_row1 = pa.tile_row0 + max_tiles;
    pa.tile_count = pa.tile_row1 + max_tiles;
    pa.max_tiles = max_tiles;
    pa.tile_rows = tile_rows;
    cudaStream_t s = Stream(stream_);
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchMoePermute(pa, error_word_, s)));
    const cuda::TileTable tiles{pa.tile_expert, pa.tile_row0, pa.tile_row1, pa.tile_count, max_tiles, T, tile_rows};
    cuda::MutMat g{static_cast<float*>(gp), P, I, I}, u{static_cast<float*>(up), P, I, I};
    cuda::MutMat y{static_cast<float*>(dp), P, H, H};
    const cuda::ConstMat xe = Const(x);
    cuda::ConstMat xr = xe;
    // (A projection on the tensor-core kernel rounds its input itself, into bfloat16 codes.)
    if ((rounds(0) && !takes_mma(0, H)) || (rounds(1) && !takes_mma(1, H))) {
      LLMRT_ASSIGN_OR_RETURN(void* rp, Scratch(kScratchMoeBf16, static_cast<size_t>(T * H) * sizeof(float),
                                               "MoE bf16 activations"));
      const cuda::MutMat r{static_cast<float*>(rp), T, H, H};
      LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchRoundToBf16Values(xe, r, s)));
      xr = {r.data, T, H, H};
    }
    // A projection's input under the FP8 policy: e4m3 values and scales for the GEMV, or the
    // dequantized values for the tiled kernel.
    struct Input {
      cuda::ConstMat x;
      cuda::ActScales act;
    };
    auto quantized = [&](int j, const cuda::ConstMat& src, int slot, const char* what) -> absl::StatusOr<Input> {
      const bool gemv = bank.gemv_bits_[j] == 8;
      LLMRT_ASSIGN_OR_RETURN(cuda::Fp8ActOut q, QuantizeFp8(src, bank.fp8_block_cols_[j], slot, what, false, gemv, !gemv));
      if (gemv) return Input{{q.values, src.rows, src.cols, src.cols}, {q.scales, q.scales_ld}};
      return Input{{q.dequantized, src.rows, src.cols, src.cols}, {}};
    };
    auto input = [&](int j, int slot) -> absl::StatusOr<Input> {
      if (quantizes(j)) return quantized(j, xe, slot, "MoE e4m3 activations");
      return Input{rounds(j) && !takes_mma(j, H) ? xr : xe, {}};
    };
    // A projection's grouped GEMM: on the tensor cores where its input is bfloat16-rounded and its
    // experts BF16, or its input e4m3 with scales and its experts FP8 in blocks of whole 32-column
    // steps (the products are exact either way), else the GEMV or tiled kernel. The choice depends
    // on the weights and the policy alone, never on T (only the tile's size does, which changes
    // no bits), so a row's result does not depend on its batch. (Batch-1 decode of the seed's
    // split runs INT4 experts under EXACT: the quantized MMA kernel, or with LLMRT_CUDA_QUANT=gemv
    // the GEMV.) The tensor-core kernel reads its input as bfloat16 codes (the rounded values, or
    // the e4m3 values, which bfloat16 holds exactly), made once per input: half the bytes of
    // float32 for every column block that reads a row.
    struct Codes {
      const float* x = nullptr;
      int slot = -1;
      const uint16_t* at = nullptr;
    } codes;
    // What the quantized tensor-core kernel last prepared in its scratch (the up projection reuses
    // the gate's when both read the same input in the same format).
    struct Prepared {
      const float* x = nullptr;
      int64_t rows = 0, ld = 0;
      int32_t bits = 0;
      void* at = nullptr;
    } prepared;
    auto grouped = [&](int j, const Input& in, const int32_t* x_rows, int64_t n, int64_t k,
                       const cuda::MutMat& o) -> absl::Status {
      if (takes_mma(j, k)) {
        const int slot = j < 2 ? kScratchMoeCodesIn : kScratchMoeCodesMid;
        if (codes.x != in.x.data || codes.slot != slot) {
          LLMRT_ASSIGN_OR_RETURN(void* cp, Scratch(slot, static_cast<size_t>(in.x.rows * in.x.cols) * sizeof(uint16_t),
                                                   "MoE bfloat16 activation codes"));
          LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchRoundToBf16(in.x, static_cast<uint16_t*>(cp), s)));
          codes = {in.x.data, slot, static_cast<const uint16_t*>(cp)};
        }
        if (takes_wgmma(j, k)) {
          return Launched(
              cuda::LaunchGroupedGemmWgmma(codes.at, in.x.cols, x_rows, bank.Table(j), n, k, tiles, o, error_word_, s,
                                           in.act));
        }
        return Launched(
            cuda::LaunchGroupedGemmMma(codes.at, in.x.cols, x_rows, bank.Table(j), n, k, tiles, o, s, in.act));
      }
      // INT4 experts (every policy) and FP8 experts (exact and BF16 policies: float32 or rounded
      // activations) on the tensor cores, the activations in two bfloat16 parts as for MatMul.
      if (quant_mma_ && bank.quant_mma_[j] && in.act.data == nullptr && k % 32 == 0) {
        LLMRT_ASSIGN_OR_RETURN(void* p, Scratch(kScratchQuantAct, cuda::QuantPreparedBytes(in.x.rows, k),
                                                "MoE quantized-weight activations"));
        const Prepared now{in.x.data, in.x.rows, in.x.ld, bank.gemv_bits_[j], p};
        const bool again = now.x == prepared.x && now.rows == prepared.rows && now.ld == prepared.ld &&
                           now.bits == prepared.bits && now.at == prepared.at;
        prepared = now;
        // An expert gets at most one row per token.
        return Launched(cuda::LaunchGroupedQuantMma(in.x, x_rows, bank.Table(j), n, k, tiles, p, o, s, !again, T));
      }
      return Launched(cuda::LaunchGroupedGemm(in.x, x_rows, bank.Table(j), n, k, tiles, o, s, in.act));
    };
    // [P, I] = x[perm_token] gate_e^T and up_e^T; silu(g) * u; [P, H] = h down_e^T.
    LLMRT_ASSIGN_OR_RETURN(const Input in_gate, input(0, kScratchMoeFp8In));
    LLMRT_RETURN_IF_ERROR(grouped(0, in_gate, pa.perm_token, I, H, g));
    // The up projection reuses the gate's input when both treat it the same way.
    const bool same = quantizes(0) == quantizes(1) && rounds(0) == rounds(1) &&
                      bank.fp8_block_cols_[0] == bank.fp8_block_cols_[1] && bank.gemv_bits_[0] == bank.gemv_bits_[1];
    Input in_up = in_gate;
    if (!same) {
      LLMRT_ASSIGN_OR_RETURN(in_up, input(1, kScratchMoeFp8Mid));
    }
    LLMRT_RETURN_IF_ERROR(grouped(1, in_up, pa.perm_token, I, H, u));
    const cuda::ConstMat gc{g.data, P, I, I}, uc{u.data, P, I, I};
    LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchSiluMul(gc, uc, g, s)));
    Input in_down{gc, {}};
    if (quantizes(2)) {
      LLMRT_ASSIGN_OR_RETURN(in_down, quantized(2, gc, kScratchMoeFp8Mid, "MoE e4m3 intermediate"));
    } else if (rounds(2) && !takes_mma(2, I)) {
      LLMRT_RETURN_IF_ERROR(Launched(cuda::LaunchRoundToBf16Values(gc, g, s)));
    }
    LLMRT_RETURN_IF_ERROR(grouped(2, in_down, nullptr, H, I, y));
    const cuda::ConstMat yc{y.data, P, H, H};
    return Launched(cuda::LaunchMoeCombine(idx.data_as<const int32_t>(), idx.row_stride(), Const(weights), pa.perm_pos,
                                           K, yc, Mut(out), s));
  });
}

}  // namespace llmrt
