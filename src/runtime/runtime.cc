#include "src/runtime/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/kv/kv_sizing.h"
#include "src/sched/scheduler.h"
#include "src/util/bf16.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {

// One session's share of a step.
struct Runtime::Work {
  Session* s = nullptr;
  int64_t n = 0;           // tokens processed
  int64_t base = 0;        // position of the first one
  bool wants_logits = false;
  int64_t logit_row = -1;
  bool prefill = false;
};

// The host side of one forward pass: token ids, positions and the paged-attention metadata.
struct Runtime::BatchArrays {
  std::vector<int32_t> ids, pos, tseq, tctx, pstart{0}, pids, slots, lrows, first;
  bool decode_phase = true;  // no sequence is prefilling or being scored

  // Adds one sequence: `tokens` at positions base.., over the pages of `table`. With
  // all_logits every row's logits are wanted, else (want_last) only the last row's. Returns
  // the logit row of the sequence's first wanted row, or -1.
  int64_t Add(const PageTable& table, int64_t page_size, int64_t base, const int32_t* tokens, int64_t n,
              bool want_last, bool all_logits) {
    const int32_t seq = static_cast<int32_t>(pstart.size() - 1);
    first.push_back(static_cast<int32_t>(ids.size()));
    for (const PageRef& ref : table.entries()) pids.push_back(ref.page);
    pstart.push_back(static_cast<int32_t>(pids.size()));
    const int64_t first_row = static_cast<int64_t>(lrows.size());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = base + i;
      ids.push_back(tokens[i]);
      pos.push_back(static_cast<int32_t>(p));
      tseq.push_back(seq);
      tctx.push_back(static_cast<int32_t>(p + 1));
      slots.push_back(table.entries()[p / page_size].page * static_cast<int32_t>(page_size) +
                      static_cast<int32_t>(p % page_size));
      if (all_logits || (want_last && i == n - 1)) lrows.push_back(static_cast<int32_t>(ids.size() - 1));
    }
    return static_cast<int64_t>(lrows.size()) > first_row ? first_row : -1;
  }
};

namespace {

// The per-layer FP8 KV scales a checkpoint carries (self_attn.k_scale, and v_scale for GQA, as
// vLLM / compressed-tensors kv_cache_scheme write them: stored = x / scale). One scale covers a
// cache row, so a GQA layer uses the larger of its two. Empty when the checkpoint has none;
// an error when only some layers have them or one is not a positive finite scalar.
absl::StatusOr<std::vector<float>> CheckpointKvScales(const Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  std::vector<float> scales;
  int64_t found = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    float s = 0.0f;
    for (const char* which : {"k_scale", "v_scale"}) {
      const std::string name = absl::StrCat(c.prefix, "layers.", i, ".self_attn.", which);
      const TensorInfo* t = ck.Find(name);
      if (t == nullptr) continue;
      float v = 0.0f;
      if (t->numel() != 1 || (t->dtype != DType::kF32 && t->dtype != DType::kBF16)) {
        return FormatError(absl::StrCat(ck.dir(), ": \"", name, "\" must be one F32 or BF16 value"));
      }
      if (t->dtype == DType::kF32) {
        std::memcpy(&v, t->data, sizeof(float));
      } else {
        uint16_t b = 0;
        std::memcpy(&b, t->data, sizeof(b));
        v = Bf16ToF32(b);
      }
      if (!(v > 0.0f) || !std::isfinite(v)) {
        return FormatError(absl::StrCat(ck.dir(), ": \"", name, "\" is ", v, ", not a positive finite scale"));
      }
      s = std::max(s, v);
    }
    if (s > 0.0f) ++found;
    scales.push_back(s);
  }
  if (found == 0) return std::vector<float>();
  if (found != c.num_layers) {
    return FormatError(absl::StrCat(ck.dir(), ": ", found, " of ", c.num_layers,
                                    " layers carry self_attn.k_scale; FP8 KV scales need all or none"));
  }
  return scales;
}

}  // namespace

namespace {

constexpr char kKvMagic[8] = {'L', 'L', 'M', 'R', 'T', 'K', 'V', '1'};
constexpr uint32_t kKvVersion = 1;

uint64_t Fnv1a(const uint8_t* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// What must agree for KV rows to mean the same thing in two runtimes.
uint64_t ModelFingerprint(const ModelConfig& c) {
  const std::string s = absl::StrCat(c.architecture, "|", c.num_layers, "|", c.KvWidth(), "|", c.hidden_size, "|",
                                     c.vocab_size, "|", c.kv_lora_rank, "|", c.qk_rope_head_dim, "|",
                                     c.index_head_dim, "|", c.num_kv_heads, "|", c.head_dim);
  return Fnv1a(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// 0 F32, 1 BF16, 2 FP8 with a scale per layer, 3 tiled FP8.
uint32_t CodecId(DType d, bool tiled) { return tiled ? 3 : d == DType::kF32 ? 0 : d == DType::kBF16 ? 1 : 2; }

struct BlobWriter {
  std::vector<uint8_t>* out;
  template <typename T>
  void Put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out->insert(out->end(), p, p + sizeof(T));
  }
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out->insert(out->end(), b, b + n);
  }
};

struct BlobReader {
  absl::Span<const uint8_t> in;
  size_t pos = 0;
  bool ok = true;
  template <typename T>
  T Get() {
    T v{};
    if (pos + sizeof(T) > in.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  const uint8_t* Bytes(size_t n) {
    if (pos + n > in.size() || n > in.size()) {
      ok = false;
      return nullptr;
    }
    const uint8_t* p = in.data() + pos;
    pos += n;
    return p;
  }
};

}  // namespace

absl::Status Runtime::ExportKv(const Session* session, std::vector<uint8_t>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Session* s = session;
  if (s->in_flight_ || s->destroy_requested_) {
    return absl::FailedPreconditionError("the session is in a step or being destroyed");
  }
  if (s->state_ == SessionState::kFailed || s->state_ == SessionState::kCancelled || s->recomputing_) {
    return absl::FailedPreconditionError("a failed, cancelled or preempted session has no KV to export");
  }
  const ModelConfig& c = model_->config();
  const int64_t P = static_cast<int64_t>(s->context_.size()), L = c.num_layers, W = cache_.width;
  const DType dt = cache_.tiled != nullptr ? DType::kF8E4M3 : cache_.pages.dtype();
  const size_t row = static_cast<size_t>(cache_.row_bytes);
  out->clear();
  BlobWriter w{out};
  w.Bytes(kKvMagic, sizeof(kKvMagic));
  w.Put(kKvVersion);
  w.Put(ModelFingerprint(c));
  w.Put(CodecId(dt, cache_.tiled != nullptr));
  w.Put(static_cast<uint32_t>(L));
  w.Put(static_cast<uint32_t>(W));
  w.Put(static_cast<uint32_t>(P));
  w.Put(static_cast<uint32_t>(s->pending_.size()));
  w.Put(static_cast<uint32_t>(s->unfed_token_.has_value()));
  w.Put(static_cast<int32_t>(s->unfed_token_.value_or(-1)));
  w.Put(s->num_generated_);
  w.Put(static_cast<uint32_t>(s->state_));
  for (uint64_t v : s->rng_.state()) w.Put(v);
  std::vector<float> scales(static_cast<size_t>(L), 0.0f);
  if (dt == DType::kF8E4M3 && cache_.tiled == nullptr) {
    backend_->Download(cache_.scales, scales.data(), scales.size() * sizeof(float));
  }
  w.Bytes(scales.data(), scales.size() * sizeof(float));
  w.Bytes(s->context_.data(), s->context_.size() * sizeof(int32_t));
  for (int32_t t : s->pending_) w.Put(t);
  std::vector<int32_t> slots(static_cast<size_t>(P));
  const int64_t ps = options_.page_size;
  for (int64_t p = 0; p < P; ++p) slots[p] = s->pages_.entries()[p / ps].page * static_cast<int32_t>(ps) + static_cast<int32_t>(p % ps);
  for (int64_t l = 0; l < L; ++l) {
    const size_t at = out->size();
    out->resize(at + row * static_cast<size_t>(P));
    backend_->KvExportRows(cache_, l, slots, out->data() + at);
  }
  w.Put(Fnv1a(out->data(), out->size()));
  return absl::OkStatus();
}

absl::StatusOr<Session*> Runtime::ImportKv(absl::Span<const uint8_t> blob, const SessionOptions& options) {
  // Parse and check everything before touching the runtime.
  if (blob.size() < sizeof(kKvMagic) + sizeof(uint64_t) || std::memcmp(blob.data(), kKvMagic, sizeof(kKvMagic)) != 0) {
    return FormatError("not an llmrt KV export (bad magic or too short)");
  }
  uint64_t sum = 0;
  std::memcpy(&sum, blob.data() + blob.size() - sizeof(uint64_t), sizeof(sum));
  if (Fnv1a(blob.data(), blob.size() - sizeof(uint64_t)) != sum) {
    return FormatError("KV export checksum mismatch: the data was truncated or altered");
  }
  BlobReader r{blob.subspan(0, blob.size() - sizeof(uint64_t)), sizeof(kKvMagic)};
  const uint32_t version = r.Get<uint32_t>();
  const uint64_t fingerprint = r.Get<uint64_t>();
  const uint32_t codec = r.Get<uint32_t>();
  const uint32_t L = r.Get<uint32_t>(), W = r.Get<uint32_t>(), P = r.Get<uint32_t>(), npending = r.Get<uint32_t>();
  const uint32_t has_unfed = r.Get<uint32_t>();
  const int32_t unfed = r.Get<int32_t>();
  const uint32_t generated = r.Get<uint32_t>(), state = r.Get<uint32_t>();
  std::array<uint64_t, 4> rng{};
  for (auto& v : rng) v = r.Get<uint64_t>();
  const ModelConfig& c = model_->config();
  if (!r.ok) return FormatError("KV export header is truncated");
  if (version != kKvVersion) return UnsupportedError(absl::StrCat("KV export version ", version, " (this build reads 1)"));
  if (fingerprint != ModelFingerprint(c) || L != c.num_layers || W != cache_.width) {
    return absl::InvalidArgumentError("the KV export comes from a different model");
  }
  if (codec > 3 || state > static_cast<uint32_t>(SessionState::kFailed)) return FormatError("KV export header is corrupt");
  const DType src = codec == 0 ? DType::kF32 : codec == 1 ? DType::kBF16 : DType::kF8E4M3;
  const KvRowLayout src_layout = TiledKvLayout(c);  // the same model's tiled row
  const KvRowLayout* src_tiled = codec == 3 ? &src_layout : nullptr;
  const uint8_t* scales_p = r.Bytes(static_cast<size_t>(L) * sizeof(float));
  const uint8_t* tokens_p = r.Bytes(static_cast<size_t>(P) * sizeof(int32_t));
  const uint8_t* pending_p = r.Bytes(static_cast<size_t>(npending) * sizeof(int32_t));
  const size_t row = src_tiled != nullptr ? static_cast<size_t>(src_tiled->row_bytes) : static_cast<size_t>(W) * DTypeSize(src);
  const uint8_t* rows_p = r.Bytes(row * P * L);
  if (!r.ok || r.pos != r.in.size()) return FormatError("KV export body does not match its header");
  std::vector<int32_t> tokens(P), pending(npending);
  std::memcpy(tokens.data(), tokens_p, tokens.size() * sizeof(int32_t));
  std::memcpy(pending.data(), pending_p, pending.size() * sizeof(int32_t));
  std::vector<float> scales(L);
  std::memcpy(scales.data(), scales_p, scales.size() * sizeof(float));
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) return FormatError("KV export holds a token outside the vocabulary");
  }
  if (P + npending > static_cast<uint64_t>(c.max_position_embeddings)) {
    return absl::OutOfRangeError("KV export is longer than max_position_embeddings");
  }

  LLMRT_ASSIGN_OR_RETURN(Session * s, CreateSession(options));
  std::lock_guard<std::mutex> lock(mu_);
  if (!kv_->Reserve(s->id_, s->pages_, P)) {
    const uint32_t free_pages = static_cast<uint32_t>(kv_->pool().num_free());
    FinishDestroy(s);
    return KvExhaustedError(absl::StrCat("importing ", P, " positions needs KV pages; ", free_pages, " are free"));
  }
  const int64_t ps = options_.page_size;
  std::vector<int32_t> slots(P);
  for (int64_t p = 0; p < P; ++p) slots[p] = s->pages_.entries()[p / ps].page * static_cast<int32_t>(ps) + static_cast<int32_t>(p % ps);
  for (uint32_t l = 0; l < L; ++l) {
    backend_->KvImportRows(cache_, l, slots, rows_p + static_cast<size_t>(l) * row * P, src, scales[l], src_tiled);
  }
  s->context_ = std::move(tokens);
  s->pending_.assign(pending.begin(), pending.end());
  if (has_unfed) s->unfed_token_ = unfed;
  s->num_generated_ = generated;
  s->state_ = static_cast<SessionState>(state);
  s->rng_.set_state(rng);
  kv_->RegisterPrefix(s->id_, s->pages_, s->context_);
  return s;
}

absl::StatusOr<std::vector<float>> Runtime::Forward(const BatchArrays& a) {
  const ModelConfig& c = model_->config();
  const int64_t T = static_cast<int64_t>(a.ids.size()), S = static_cast<int64_t>(a.lrows.size());
  auto upload = [&](const std::vector<int32_t>& v) -> absl::StatusOr<Tensor> {
    LLMRT_ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(DType::kI32, {static_cast<int64_t>(std::max<size_t>(v.size(), 1))}));
    if (!v.empty()) backend_->Upload(v.data(), v.size() * sizeof(int32_t), t);
    return t;
  };
  ForwardBatch fb;
  fb.num_tokens = T;
  fb.num_logit_rows = S;
  fb.decode_phase = a.decode_phase;
  LLMRT_ASSIGN_OR_RETURN(fb.token_ids, upload(a.ids));
  LLMRT_ASSIGN_OR_RETURN(fb.positions, upload(a.pos));
  LLMRT_ASSIGN_OR_RETURN(fb.attn.token_seq, upload(a.tseq));
  LLMRT_ASSIGN_OR_RETURN(fb.attn.token_ctx, upload(a.tctx));
  LLMRT_ASSIGN_OR_RETURN(fb.attn.seq_page_start, upload(a.pstart));
  LLMRT_ASSIGN_OR_RETURN(fb.attn.page_ids, upload(a.pids));
  LLMRT_ASSIGN_OR_RETURN(fb.attn.slot_mapping, upload(a.slots));
  LLMRT_ASSIGN_OR_RETURN(fb.attn.seq_first_token, upload(a.first));
  LLMRT_ASSIGN_OR_RETURN(fb.logit_rows, upload(a.lrows));
  fb.attn.num_tokens = T;
  fb.attn.num_seqs = static_cast<int64_t>(a.pstart.size() - 1);
  fb.attn.max_ctx = *std::max_element(a.tctx.begin(), a.tctx.end());
  LLMRT_ASSIGN_OR_RETURN(Tensor logits, backend_->Allocate(DType::kF32, {std::max<int64_t>(S, 1), c.vocab_size}));
  LLMRT_RETURN_IF_ERROR(model_->Forward(fb, cache_, logits));
  std::vector<float> host(static_cast<size_t>(S * c.vocab_size));
  if (S > 0) backend_->Download(logits, host.data(), host.size() * sizeof(float));
  return host;
}

absl::Status Runtime::Score(absl::Span<const int32_t> tokens, float* logprobs, int32_t* argmax) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return absl::InvalidArgumentError("scoring needs at least two tokens");
  if (n > c.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat(n, " tokens exceed max_position_embeddings ", c.max_position_embeddings));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i], " at index ", i, " is outside the vocabulary"));
    }
  }
  std::lock_guard<std::mutex> step_lock(step_mu_);
  PageTable table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kv_->Reserve(0, table, n)) {
      return KvExhaustedError(absl::StrCat("scoring ", n, " tokens needs more KV pages than are free"));
    }
  }
  absl::Status status;
  for (int64_t start = 0; start < n && status.ok(); start += options_.max_tokens_per_step) {
    const int64_t m = std::min<int64_t>(options_.max_tokens_per_step, n - start);
    BatchArrays a;
    a.decode_phase = false;
    a.Add(table, options_.page_size, start, tokens.data() + start, m, false, /*all_logits=*/true);
    absl::StatusOr<std::vector<float>> logits = Forward(a);
    if (!logits.ok()) {
      status = logits.status();
      break;
    }
    for (int64_t r = 0; r < m && start + r + 1 < n; ++r) {
      const float* row = logits->data() + r * c.vocab_size;
      const int64_t p = start + r;
      double mx = row[0];
      int32_t best = 0;
      for (int64_t v = 1; v < c.vocab_size; ++v) {
        if (row[v] > mx) {
          mx = row[v];
          best = static_cast<int32_t>(v);
        }
      }
      double sum = 0;
      for (int64_t v = 0; v < c.vocab_size; ++v) sum += std::exp(row[v] - mx);
      logprobs[p] = static_cast<float>(row[tokens[p + 1]] - mx - std::log(sum));
      if (argmax != nullptr) argmax[p] = best;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  kv_->ReleaseAll(0, table);
  return status;
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const std::string& model_dir,
                                                         const RuntimeOptions& options) {
  if (options.kv_dtype != DType::kBF16 && options.kv_dtype != DType::kF32 && options.kv_dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError("kv_dtype must be BF16, F32 or FP8 E4M3");
  }
  if (options.page_size < 1 || options.page_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("page_size_tokens ", options.page_size, " is outside [1, 4096]"));
  }
  if (options.max_sessions < 1 || options.max_tokens_per_step < 1 || options.num_threads < 0) {
    return absl::InvalidArgumentError("max_sessions and max_tokens_per_step must be positive, num_threads >= 0");
  }
  if (options.backend == BackendKind::kCuda) {
    return UnsupportedError("the CUDA backend is not part of this build");
  }
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  rt->backend_ = CreateCpuBackend(CpuBackendOptions{options.num_threads});
  LLMRT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(model_dir));
  rt->checkpoint_ = std::make_unique<Checkpoint>(std::move(ck));
  LLMRT_ASSIGN_OR_RETURN(rt->model_, LoadModel(*rt->checkpoint_, *rt->backend_, options.weights));

  const ModelConfig& c = rt->model_->config();
  if (options.kv_tiled && options.kv_dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError("the tiled KV codec is an FP8 codec");
  }
  const KvSizing sizing =
      SizeKvCache(c, options.kv_dtype, options.kv_budget_bytes, options.page_size, 0, options.kv_tiled);
  const int64_t width = sizing.width;
  LLMRT_CHECK(width == rt->model_->kv_width());
  rt->kv_bytes_per_token_ = sizing.bytes_per_token;
  const uint64_t pages = sizing.pages;
  if (pages == 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_budget_bytes ", options.kv_budget_bytes,
                                                   " holds no page (one page is ", sizing.page_bytes, " bytes)"));
  }
  if (pages > (1u << 30)) return absl::InvalidArgumentError("kv_budget_bytes gives too many pages");
  rt->cache_.num_pages = static_cast<int64_t>(pages);
  rt->cache_.num_layers = c.num_layers;
  rt->cache_.page_size = options.page_size;
  rt->cache_.width = width;
  if (options.kv_tiled) {
    rt->tiled_layout_ = TiledKvLayout(c);
    rt->cache_.tiled = &rt->tiled_layout_;
    rt->cache_.row_bytes = rt->tiled_layout_.row_bytes;
    LLMRT_ASSIGN_OR_RETURN(rt->cache_.pages, rt->backend_->Allocate(DType::kU8, {static_cast<int64_t>(pages), c.num_layers,
                                                                                 options.page_size,
                                                                                 rt->cache_.row_bytes}));
  } else {
    rt->cache_.row_bytes = width * static_cast<int64_t>(DTypeSize(options.kv_dtype));
    LLMRT_ASSIGN_OR_RETURN(rt->cache_.pages, rt->backend_->Allocate(options.kv_dtype,
                                                                    {static_cast<int64_t>(pages), c.num_layers,
                                                                     options.page_size, width}));
  }
  LLMRT_ASSIGN_OR_RETURN(rt->cache_.scales, rt->backend_->Allocate(DType::kF32, {c.num_layers}));
  rt->backend_->Fill(rt->cache_.scales, 0.0f);  // FP8: calibrated by the first write of each layer
  if (options.kv_dtype == DType::kF8E4M3) {
    LLMRT_ASSIGN_OR_RETURN(rt->cache_.fresh, rt->backend_->Allocate(DType::kBF16, {options.max_tokens_per_step, width}));
    rt->cache_.fresh_rows = options.max_tokens_per_step;
    LLMRT_ASSIGN_OR_RETURN(std::vector<float> scales, CheckpointKvScales(*rt->checkpoint_));
    if (options.kv_tiled) {
      rt->kv_scale_source_ = KvScaleSource::kPerTile;  // checkpoint per-layer scales do not apply
    } else if (scales.empty()) {
      rt->kv_scale_source_ = KvScaleSource::kCalibrated;
    } else {
      rt->backend_->Upload(scales.data(), scales.size() * sizeof(float), rt->cache_.scales);
      rt->kv_scale_source_ = KvScaleSource::kCheckpoint;
    }
  }
  std::lock_guard<std::mutex> lock(rt->mu_);
  std::shared_ptr<KvTracker> tracker = options.tracker ? options.tracker : std::shared_ptr<KvTracker>(MakeNoopTracker());
  rt->kv_ = std::make_unique<KvManager>(static_cast<int32_t>(pages), options.page_size, std::move(tracker),
                                        options.prefix_sharing);
  return rt;
}

Runtime::~Runtime() {
  std::lock_guard<std::mutex> step_lock(step_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, s] : sessions_) ReleasePages(s.get());
  sessions_.clear();
}

RuntimeInfo Runtime::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelConfig& c = model_->config();
  RuntimeInfo i;
  i.architecture = c.architecture;
  i.model_type = c.model_type;
  i.backend = BackendKind::kCpu;
  i.kv_dtype = options_.kv_dtype;
  i.kv_tiled = options_.kv_tiled;
  i.vocab_size = c.vocab_size;
  i.num_layers = c.num_layers;
  i.num_parameters = model_->num_parameters();
  i.weight_bytes = model_->weight_bytes();
  i.kv_bytes_per_token = kv_bytes_per_token_;
  i.page_size = options_.page_size;
  i.pages_total = kv_->pool().num_pages();
  i.pages_free = kv_->pool().num_free();
  i.kv_capacity_tokens = static_cast<uint64_t>(i.pages_total * i.page_size);
  for (const auto& [id, s] : sessions_) i.num_sessions += s->destroy_requested_ ? 0 : 1;
  i.max_position_embeddings = c.max_position_embeddings;
  i.pages_shared = kv_->pool().num_shared();
  i.prefix_lookup_tokens = kv_->prefix_stats().lookup_tokens;
  i.prefix_hit_tokens = kv_->prefix_stats().hit_tokens;
  i.integrity_violations = integrity_violations_;
  i.preemptions = preemptions_;
  i.integrity_check_ns = integrity_check_ns_;
  i.resident_weight_bytes = model_->resident_bytes();
  i.weights = options_.weights;
  i.kv_scale_source = kv_scale_source_;
  return i;
}

absl::StatusOr<Session*> Runtime::CreateSession(const SessionOptions& options) {
  const SamplingParams& sp = options.sampling;
  if (!(sp.temperature >= 0.0f) || !(sp.top_p > 0.0f && sp.top_p <= 1.0f) ||
      !(sp.min_p >= 0.0f && sp.min_p <= 1.0f) || sp.top_k < 0) {
    return absl::InvalidArgumentError(
        "sampling options out of range: temperature >= 0, top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1");
  }
  const int64_t vocab = model_->config().vocab_size;
  for (int32_t t : options.stop_tokens) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("stop token ", t, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  int64_t live = 0;
  for (const auto& [id, s] : sessions_) live += s->destroy_requested_ ? 0 : 1;
  if (live >= options_.max_sessions) {
    return absl::OutOfRangeError(absl::StrCat("max_sessions (", options_.max_sessions, ") sessions are alive"));
  }
  const uint64_t id = next_session_id_++;
  auto s = std::make_unique<Session>(this, id, options);
  Session* raw = s.get();
  sessions_.emplace(id, std::move(s));
  return raw;
}

void Runtime::ReleasePages(Session* s) { kv_->ReleaseAll(s->id_, s->pages_); }

void Runtime::FinishDestroy(Session* s) {
  ReleasePages(s);
  sessions_.erase(s->id_);
}

void Runtime::DestroySession(Session* session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session->id());
  if (it == sessions_.end() || it->second.get() != session || session->destroy_requested_) return;
  if (session->in_flight_) {
    session->destroy_requested_ = true;  // the running step frees it at commit
    return;
  }
  FinishDestroy(session);
}

Session* Runtime::FindById(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->destroy_requested_) return nullptr;
  return it->second.get();
}

absl::Status Runtime::Append(Session* s, absl::Span<const int32_t> tokens) {
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  switch (s->state_) {
    case SessionState::kDecoding:
      return absl::FailedPreconditionError("the session is generating; wait for it to finish or cancel it");
    case SessionState::kCancelled:
      return absl::FailedPreconditionError("the session was cancelled");
    case SessionState::kFailed:
      return absl::FailedPreconditionError("the session failed; destroy it");
    default:
      break;
  }
  if (s->recomputing_) {
    return absl::FailedPreconditionError("the session is generating (recomputing after preemption)");
  }
  const size_t extra = s->unfed_token_ ? 1 : 0;
  const uint64_t total = s->context_.size() + s->pending_.size() + extra + tokens.size();
  if (total > static_cast<uint64_t>(model_->config().max_position_embeddings)) {
    return absl::OutOfRangeError(absl::StrCat("the context would hold ", total,
                                              " tokens, past max_position_embeddings ",
                                              model_->config().max_position_embeddings));
  }
  if (tokens.empty()) return absl::OkStatus();
  if (s->unfed_token_) {
    s->pending_.push_back(*s->unfed_token_);
    s->unfed_token_.reset();
  }
  s->pending_.insert(s->pending_.end(), tokens.begin(), tokens.end());
  s->state_ = SessionState::kPrefill;
  s->num_generated_ = 0;
  return absl::OkStatus();
}

absl::Status Runtime::Cancel(Session* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s->state_ == SessionState::kCancelled) return absl::OkStatus();
  s->state_ = SessionState::kCancelled;
  s->pending_.clear();
  s->report_cancel_ = true;
  s->recomputing_ = false;
  if (!s->in_flight_) ReleasePages(s);  // else the running step releases them at commit
  return absl::OkStatus();
}

absl::Status Runtime::CopyLogits(const Session* s, float* out, size_t capacity, size_t* count) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = static_cast<size_t>(model_->config().vocab_size);
  *count = n;
  if (s->logits_.empty()) return absl::FailedPreconditionError("the session has not sampled a position yet");
  if (capacity < n) {
    return absl::ResourceExhaustedError(absl::StrCat("logits need ", n, " floats, buffer holds ", capacity));
  }
  std::memcpy(out, s->logits_.data(), n * sizeof(float));
  return absl::OkStatus();
}

size_t Runtime::MaxStepResults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

Runtime::SessionSnapshot Runtime::Snapshot(const Session* s) const {
  std::lock_guard<std::mutex> lock(mu_);
  return {s->state_, s->id_, static_cast<uint32_t>(s->context_.size()),
          static_cast<uint32_t>(s->pending_.size()), s->num_generated_,
          static_cast<uint32_t>(s->pages_.num_pages())};
}

std::vector<int32_t> Runtime::FailedPages(const Session* s) const {
  std::lock_guard<std::mutex> lock(mu_);
  return s->failed_pages_;
}

// Gives a running session's pages back; its processed tokens queue again in front of its
// pending ones, and it recomputes them when pages are free (the tokens it then produces are
// the ones it would have produced: every position's computation is batch-independent).
void Runtime::Preempt(Session* s) {
  ReleasePages(s);
  for (auto it = s->context_.rbegin(); it != s->context_.rend(); ++it) s->pending_.push_front(*it);
  s->context_.clear();
  if (s->state_ == SessionState::kDecoding) s->recomputing_ = true;
  s->state_ = SessionState::kPrefill;
  ++preemptions_;
}

void Runtime::Abort(Session* s, std::vector<int32_t> failed_entries, std::vector<StepResult>* results) {
  ++integrity_violations_;
  StepResult r;
  r.session = s;
  r.session_id = s->id_;
  r.finish = FinishReason::kError;
  s->failed_pages_.clear();
  std::vector<std::string> where;
  for (int32_t e : failed_entries) {
    if (e < 0) {
      where.push_back("vetoed by the tracker");
      continue;
    }
    const PageRef& ref = s->pages_.entries()[e];
    s->failed_pages_.push_back(ref.page);
    where.push_back(absl::StrCat("entry ", e, " (page ", ref.page, ", expected tag ", ref.tag, ", found ",
                                 ref.page >= 0 && ref.page < kv_->pool().num_pages() ? kv_->pool().tag(ref.page) : 0,
                                 ")"));
  }
  r.failed_pages = s->failed_pages_;
  r.status = KvIntegrityError(absl::StrCat("session ", s->id_, ": KV page verification failed: ",
                                           absl::StrJoin(where, "; ")));
  s->state_ = SessionState::kFailed;
  s->pending_.clear();
  s->recomputing_ = false;
  // Entries that no longer match are dropped without touching their pages (someone else owns
  // them now); pages the corrupted entries used to name are orphans, reclaimed below.
  ReleasePages(s);
  kv_->ReclaimOrphans([&](const std::function<void(const PageTable&)>& fn) {
    for (const auto& [id, other] : sessions_) fn(other->pages_);
  });
  results->push_back(std::move(r));
}

absl::Status Runtime::InjectKvFault(KvFault fault, const std::vector<int64_t>& args) {
  std::lock_guard<std::mutex> lock(mu_);
  auto entry = [&](int64_t id, int64_t index) -> absl::StatusOr<PageRef*> {
    Session* s = FindById(static_cast<uint64_t>(id));
    if (s == nullptr) return absl::InvalidArgumentError(absl::StrCat("no session with id ", id));
    auto& e = s->pages_.mutable_entries();
    if (index < 0 || index >= static_cast<int64_t>(e.size())) {
      return absl::InvalidArgumentError(absl::StrCat("session ", id, " has no page-table entry ", index));
    }
    return &e[index];
  };
  switch (fault) {
    case KvFault::kFreeMappedPage: {
      if (args.size() != 2) return absl::InvalidArgumentError("free-mapped-page takes {session id, entry}");
      LLMRT_ASSIGN_OR_RETURN(PageRef * ref, entry(args[0], args[1]));
      kv_->pool().ForceFree(ref->page);  // the session still maps it: the real-world race
      return absl::OkStatus();
    }
    case KvFault::kCorruptEntry: {
      if (args.size() != 3) return absl::InvalidArgumentError("corrupt-entry takes {session id, entry, page}");
      LLMRT_ASSIGN_OR_RETURN(PageRef * ref, entry(args[0], args[1]));
      if (args[2] < 0 || args[2] >= kv_->pool().num_pages()) return absl::InvalidArgumentError("no such page");
      ref->page = static_cast<int32_t>(args[2]);
      return absl::OkStatus();
    }
    case KvFault::kSwapPages: {
      if (args.size() != 4) return absl::InvalidArgumentError("swap-pages takes {id a, entry a, id b, entry b}");
      LLMRT_ASSIGN_OR_RETURN(PageRef * a, entry(args[0], args[1]));
      LLMRT_ASSIGN_OR_RETURN(PageRef * b, entry(args[2], args[3]));
      std::swap(a->page, b->page);  // the mapping is swapped; each side still expects its own tag
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown fault");
}

absl::Status Runtime::Step(std::vector<StepResult>* results) {
  std::lock_guard<std::mutex> step_lock(step_mu_);
  const ModelConfig& c = model_->config();
  const int64_t page_size = options_.page_size;
  std::vector<Work> work;
  BatchArrays batch;

  // ---- plan, reserve, verify (under the lock) ----
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Session*> order;
    std::vector<SchedCandidate> candidates;
    for (auto& [id, sp] : sessions_) {
      Session* s = sp.get();
      if (s->destroy_requested_) continue;
      if (s->state_ == SessionState::kCancelled && s->report_cancel_) {
        s->report_cancel_ = false;
        StepResult r;
        r.session = s;
        r.session_id = s->id_;
        r.finish = FinishReason::kCancelled;
        r.status = absl::CancelledError("the session was cancelled");
        results->push_back(std::move(r));
        continue;
      }
      if ((s->state_ == SessionState::kPrefill || s->state_ == SessionState::kDecoding) && !s->pending_.empty()) {
        candidates.push_back({static_cast<int64_t>(order.size()), static_cast<int64_t>(s->pending_.size()),
                              s->state_ == SessionState::kDecoding});
        order.push_back(s);
      }
    }
    const std::vector<SchedItem> plan = PlanStep(candidates, options_.max_tokens_per_step);

    bool prompts_blocked = false;  // kQueue: a waiting prompt holds back later prompts
    std::vector<Session*> waiting;
    for (const SchedItem& item : plan) {
      Session* s = order[item.key];
      if (s->state_ != SessionState::kPrefill && s->state_ != SessionState::kDecoding) continue;  // preempted below
      const bool prefill = s->state_ == SessionState::kPrefill;
      if (prefill && prompts_blocked) continue;
      // A new prompt may start on pages another session already computed.
      if (prefill && s->context_.empty()) {
        std::vector<int32_t> prompt(s->pending_.begin(), s->pending_.end());
        const int64_t shared = kv_->ShareCachedPrefix(s->id_, s->pages_, prompt);
        for (int64_t i = 0; i < shared; ++i) {
          s->context_.push_back(s->pending_.front());
          s->pending_.pop_front();
        }
      }
      const int64_t n = std::min<int64_t>(item.num_tokens, static_cast<int64_t>(s->pending_.size()));
      const int64_t new_len = static_cast<int64_t>(s->context_.size()) + n;
      // Under kQueue a request is admitted only with pages for all of it (prompt plus
      // max_new_tokens), so admitted sessions never stall mid-generation for pages.
      int64_t reserve_len = new_len;
      if (options_.kv_pressure == KvPressurePolicy::kQueue && prefill && s->num_generated_ == 0) {
        reserve_len = std::min<int64_t>(
            static_cast<int64_t>(s->context_.size() + s->pending_.size()) + s->options_.max_new_tokens,
            c.max_position_embeddings);
        reserve_len = std::max(reserve_len, new_len);
      }
      bool ok = kv_->Reserve(s->id_, s->pages_, reserve_len);
      if (!ok && options_.kv_pressure == KvPressurePolicy::kPreempt) {
        // Newest running sessions first, never one older than s (arrival order is kept).
        for (auto it = sessions_.rbegin(); !ok && it != sessions_.rend() && it->first > s->id_; ++it) {
          Session* v = it->second.get();
          if (v->destroy_requested_ || v->pages_.num_pages() == 0 ||
              (v->state_ != SessionState::kPrefill && v->state_ != SessionState::kDecoding)) {
            continue;
          }
          work.erase(std::remove_if(work.begin(), work.end(), [&](const Work& w) { return w.s == v; }), work.end());
          Preempt(v);
          ok = kv_->Reserve(s->id_, s->pages_, new_len);
        }
      }
      if (!ok) {
        if (options_.kv_pressure != KvPressurePolicy::kFail) {
          waiting.push_back(s);
          if (prefill) prompts_blocked = true;
          continue;
        }
        StepResult r;
        r.session = s;
        r.session_id = s->id_;
        r.status = KvExhaustedError(absl::StrCat("session ", s->id_, " needs KV pages for ", new_len,
                                                 " positions; ", kv_->pool().num_free(), " of ",
                                                 kv_->pool().num_pages(), " pages are free"));
        results->push_back(std::move(r));
        continue;
      }
      work.push_back({s, n, static_cast<int64_t>(s->context_.size()),
                      n == static_cast<int64_t>(s->pending_.size()), -1, prefill});
    }
    if (work.empty() && !waiting.empty()) {
      // Nothing can run and nothing running will free pages: waiting would never end.
      Session* s = waiting.front();
      StepResult r;
      r.session = s;
      r.session_id = s->id_;
      r.status = KvExhaustedError(absl::StrCat("session ", s->id_, " is waiting for KV pages that no running ",
                                               "session will free (", kv_->pool().num_free(), " of ",
                                               kv_->pool().num_pages(), " free); destroy idle sessions"));
      results->push_back(std::move(r));
    }

    // Integrity: every page a scheduled session will read must still carry its tag.
    if (kv_->tracker().verifies()) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Work> kept;
      for (Work& wk : work) {
        std::vector<int32_t> failed = kv_->Verify(wk.s->id_, wk.s->pages_);
        if (failed.empty()) {
          kept.push_back(wk);
        } else {
          Abort(wk.s, std::move(failed), results);
        }
      }
      work.swap(kept);
      integrity_check_ns_ += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    }
    if (work.empty()) return absl::OkStatus();

    // The batch as host arrays.
    for (Work& wk : work) {
      wk.s->in_flight_ = true;
      batch.decode_phase = batch.decode_phase && !wk.prefill;
      std::vector<int32_t> toks(wk.s->pending_.begin(), wk.s->pending_.begin() + wk.n);
      wk.logit_row = batch.Add(wk.s->pages_, page_size, wk.base, toks.data(), wk.n, wk.wants_logits, false);
    }
  }

  // ---- forward (without the lock: other threads may create, feed, cancel, destroy) ----
  absl::StatusOr<std::vector<float>> logits = Forward(batch);

  // ---- commit (under the lock) ----
  std::lock_guard<std::mutex> lock(mu_);
  for (const Work& wk : work) {
    Session* s = wk.s;
    s->in_flight_ = false;
    if (s->destroy_requested_) {
      FinishDestroy(s);
      continue;
    }
    if (s->state_ == SessionState::kCancelled) {
      ReleasePages(s);  // deferred by Cancel while the step ran
      continue;
    }
    StepResult r;
    r.session = s;
    r.session_id = s->id_;
    if (!logits.ok()) {
      // Nothing of this step is kept: its pages go back, the context is unchanged.
      kv_->Truncate(s->id_, s->pages_, static_cast<int64_t>(s->context_.size()));
      r.status = logits.status();
      results->push_back(std::move(r));
      continue;
    }
    if (wk.prefill) r.num_prefilled = static_cast<uint32_t>(wk.n);
    for (int64_t i = 0; i < wk.n; ++i) {
      s->context_.push_back(s->pending_.front());
      s->pending_.pop_front();
    }
    if (wk.prefill) kv_->RegisterPrefix(s->id_, s->pages_, s->context_);
    // Tokens appended while the step ran mean this was not the last position after all.
    if (wk.wants_logits && s->pending_.empty()) {
      const float* row = logits->data() + wk.logit_row * c.vocab_size;
      s->logits_.assign(row, row + c.vocab_size);
      const int32_t tok = SampleToken(row, c.vocab_size, s->options_.sampling, s->rng_);
      ++s->num_generated_;
      s->recomputing_ = false;
      r.token = tok;
      const bool full = static_cast<int64_t>(s->context_.size()) + 1 > c.max_position_embeddings;
      if (s->IsStopToken(tok)) {
        r.finish = FinishReason::kStop;
      } else if ((s->options_.max_new_tokens > 0 && s->num_generated_ >= s->options_.max_new_tokens) || full) {
        r.finish = FinishReason::kLength;
      }
      if (r.finish != FinishReason::kNone) {
        s->state_ = SessionState::kFinished;
        if (!full) s->unfed_token_ = tok;
        // Pages reserved ahead (kQueue admission) beyond what the context needs go back.
        kv_->Truncate(s->id_, s->pages_, static_cast<int64_t>(s->context_.size()) + (full ? 0 : 1));
      } else {
        s->pending_.push_back(tok);
        s->state_ = SessionState::kDecoding;
      }
    }
    results->push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace llmrt
