// KV export and import between runtimes of the same model (llm_session_export_kv /
// llm_session_import_kv): a prefill-role runtime hands a session to a decode-role one.
//
// What an import may affect: an unauthenticated blob (anyone can reseal its checksum) creates one
// session and affects only that session: its tokens, states, scales and every row value are
// validated, rows are converted into this runtime's codec at the layer scales the runtime
// already has (never setting one), and its pages never enter the prefix cache. An authenticated
// blob (HMAC-SHA256 under the host's key) is trusted like state this runtime computed: it may
// set a layer scale that is not set yet, and its pages may be shared as prefix pages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/runtime/kv_blob.h"
#include "src/runtime/runtime.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// What must agree for KV rows to mean the same thing in two runtimes.
uint64_t ModelFingerprint(const ModelConfig& c, int64_t width) {
  return Fnv1a(absl::StrCat(c.architecture, "|", c.num_layers, "|", width, "|", c.hidden_size, "|", c.vocab_size, "|",
                            c.kv_lora_rank, "|", c.qk_rope_head_dim, "|", c.index_head_dim, "|", c.num_kv_heads, "|",
                            c.head_dim));
}

// Slots of the first `n` positions of a page table.
std::vector<int32_t> Slots(const PageTable& t, int64_t n, int64_t page_size) {
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    slots[p] = t.entries()[p / page_size].page * static_cast<int32_t>(page_size) + static_cast<int32_t>(p % page_size);
  }
  return slots;
}

// a * b * c as size_t, or false when it does not fit.
bool Product(uint64_t a, uint64_t b, uint64_t c, size_t* out) {
  const uint64_t kMax = std::numeric_limits<size_t>::max();
  if (a != 0 && b > kMax / a) return false;
  const uint64_t ab = a * b;
  if (ab != 0 && c > kMax / ab) return false;
  *out = static_cast<size_t>(ab * c);
  return true;
}

}  // namespace

absl::Status Runtime::CheckKvTransferable() const {
  const int tp = options_.world_size > 1 ? options_.world_size : options_.tensor_parallel;
  if (tp > 1 && (model_->config().family == ArchFamily::kGlm4Moe || options_.world_size > 1)) {
    return UnsupportedError(absl::StrCat(
        "KV export and import are not implemented for ", options_.world_size > 1 ? "multi-process ranks" :
        "a GQA model whose KV heads are split over tensor_parallel ", tp, options_.world_size > 1 ? "" : " ranks"));
  }
  return absl::OkStatus();
}

absl::Status Runtime::ExportKv(const Session* s, absl::Span<const uint8_t> key, std::vector<uint8_t>* out) const {
  if (!key.empty() && (key.size() < kMinKvKeyBytes || key.size() > kMaxKvKeyBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the KV export key has ", key.size(), " bytes; it needs ",
                                                   kMinKvKeyBytes, " to ", kMaxKvKeyBytes));
  }
  std::lock_guard<std::mutex> step_lock(step_mu_);  // the backend serves one pass or transfer at a time
  std::lock_guard<std::mutex> lock(mu_);
  if (s->in_flight_ || s->destroy_requested_) {
    return absl::FailedPreconditionError("the session is in a step or being destroyed");
  }
  if (s->state_ == SessionState::kFailed || s->state_ == SessionState::kCancelled || s->recomputing_) {
    return absl::FailedPreconditionError("a failed, cancelled or preempted session has no KV to export");
  }
  LLMRT_RETURN_IF_ERROR(CheckKvTransferable());
  const ModelConfig& c = model_->config();
  const KvCacheView& view = store_->view();
  const int64_t P = static_cast<int64_t>(s->context_.size()), L = c.num_layers;
  const size_t row = static_cast<size_t>(view.row_bytes);
  KvBlob b;
  b.fingerprint = ModelFingerprint(c, view.width);
  b.codec = store_->codec().id();
  b.layers = static_cast<uint32_t>(L);
  b.width = static_cast<uint32_t>(view.width);
  b.has_unfed = s->unfed_token_.has_value() ? 1 : 0;
  b.unfed = s->unfed_token_.value_or(-1);
  b.generated = s->num_generated_;
  b.state = static_cast<uint32_t>(s->state_);
  b.rng = s->rng_.state();
  LLMRT_ASSIGN_OR_RETURN(b.scales, store_->Scales());
  b.context = s->context_;
  b.pending.assign(s->pending_.begin(), s->pending_.end());
  std::vector<uint8_t> rows(row * static_cast<size_t>(P * L));
  if (P > 0) {
    LLMRT_ASSIGN_OR_RETURN(Tensor slots, backend_->Allocate(DType::kI32, {P}));
    LLMRT_ASSIGN_OR_RETURN(Tensor dst, backend_->Allocate(DType::kU8, {P, view.row_bytes}));
    const std::vector<int32_t> host_slots = Slots(s->pages_, P, options_.page_size);
    LLMRT_RETURN_IF_ERROR(backend_->Upload(host_slots.data(), host_slots.size() * sizeof(int32_t), slots));
    for (int64_t l = 0; l < L; ++l) {
      backend_->KvExportRows(view, l, slots, dst);
      LLMRT_RETURN_IF_ERROR(backend_->Synchronize());
      LLMRT_RETURN_IF_ERROR(backend_->Download(dst, rows.data() + static_cast<size_t>(l * P) * row, row * P));
    }
  }
  b.rows = rows;
  *out = SerializeKvBlob(b, key);
  return absl::OkStatus();
}

absl::StatusOr<Session*> Runtime::ImportKv(absl::Span<const uint8_t> blob, absl::Span<const uint8_t> key,
                                           const SessionOptions& options) {
  // Parse and check everything before touching the runtime.
  LLMRT_RETURN_IF_ERROR(CheckKvTransferable());
  LLMRT_ASSIGN_OR_RETURN(const KvBlob b, ParseKvBlob(blob, key));
  const ModelConfig& c = model_->config();
  const KvCacheView& view = store_->view();
  const int64_t L = c.num_layers, P = static_cast<int64_t>(b.context.size());
  if (b.fingerprint != ModelFingerprint(c, view.width) || b.layers != L || b.width != view.width) {
    return absl::InvalidArgumentError("the KV export comes from a different model");
  }
  const KvCodec* src = FindKvCodec(b.codec);
  if (src == nullptr) return FormatError(absl::StrCat("KV export codec ", b.codec, " is unknown"));
  // The states a session can be exported in, with the queues each implies: a prompt waiting
  // (prefill), the token just sampled (decoding), or a finished turn holding its last token.
  const auto state = static_cast<SessionState>(b.state);
  const bool consistent = (state == SessionState::kIdle && b.pending.empty() && !b.has_unfed) ||
                          (state == SessionState::kPrefill && !b.pending.empty() && !b.has_unfed) ||
                          (state == SessionState::kDecoding && !b.pending.empty() && !b.has_unfed) ||
                          (state == SessionState::kFinished && b.pending.empty() && b.has_unfed <= 1);
  if (b.state > static_cast<uint32_t>(SessionState::kFinished) || !consistent) {
    return FormatError(absl::StrCat("KV export holds an inconsistent session state (state ", b.state, ", ",
                                    b.pending.size(), " pending tokens, held token flag ", b.has_unfed, ")"));
  }
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < c.vocab_size; };
  if (!std::all_of(b.context.begin(), b.context.end(), in_vocab) ||
      !std::all_of(b.pending.begin(), b.pending.end(), in_vocab) || (b.has_unfed && !in_vocab(b.unfed))) {
    return FormatError("KV export holds a token outside the vocabulary");
  }
  if (static_cast<uint64_t>(P) + b.pending.size() + b.has_unfed > static_cast<uint64_t>(c.max_position_embeddings) ||
      b.generated > static_cast<uint64_t>(c.max_position_embeddings)) {
    return absl::OutOfRangeError("KV export is longer than max_position_embeddings");
  }
  const KvRowLayout src_layout = src->Layout(model_->kv_shape());
  const size_t row = static_cast<size_t>(src_layout.row_bytes);
  size_t rows_bytes = 0;
  if (!Product(static_cast<uint64_t>(L), static_cast<uint64_t>(P), row, &rows_bytes) || b.rows.size() != rows_bytes) {
    return FormatError("KV export body does not match its header");
  }
  const bool src_per_layer = src->scale_kind() == KvScaleKind::kPerLayer;
  for (int64_t l = 0; src_per_layer && l < L; ++l) {
    const float sc = b.scales[l];
    if (P > 0 && (!std::isfinite(sc) || sc < kMinKvScale || sc > kMaxKvScale)) {
      return FormatError(absl::StrCat("KV export scale ", sc, " of layer ", l, " is outside [", kMinKvScale, ", ",
                                      kMaxKvScale, "]"));
    }
  }
  // Every value must be finite; the largest magnitude per layer calibrates a trusted import.
  std::vector<float> amax(static_cast<size_t>(L), 0.0f), values(static_cast<size_t>(view.width));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t p = 0; p < P; ++p) {
      src->DecodeRow(src_layout, b.rows.data() + static_cast<size_t>(l * P + p) * row, src_per_layer ? b.scales[l] : 1.0f,
                     values.data());
      for (float v : values) {
        if (!std::isfinite(v)) {
          return FormatError(absl::StrCat("KV export holds a value that is not finite (layer ", l, ", position ", p, ")"));
        }
        amax[l] = std::max(amax[l], std::fabs(v));
      }
    }
  }
  // Shared state: the layer scales of a per-layer codec. Only a trusted import may set one.
  const bool trusted = b.authenticated;
  std::vector<float> new_scales(static_cast<size_t>(L), 0.0f);
  if (store_->codec().scale_kind() == KvScaleKind::kPerLayer && P > 0) {
    for (int64_t l = 0; l < L; ++l) {
      if (store_->has_scale(l)) continue;
      if (!trusted) {
        return absl::FailedPreconditionError(
            absl::StrCat("the FP8 KV cache has no scale for layer ", l, " yet, and an unauthenticated import may not ",
                         "set one: import with a key (llm_session_import_kv_authenticated), use a checkpoint with ",
                         "k_scale, or run a prompt first"));
      }
      new_scales[l] = src_per_layer && src->id() == store_->codec().id() ? b.scales[l]
                                                                          : store_->codec().CalibratedScale(amax[l]);
    }
  }

  std::lock_guard<std::mutex> step_lock(step_mu_);  // the backend serves one pass or transfer at a time
  LLMRT_ASSIGN_OR_RETURN(Session * s, CreateSession(options));
  std::lock_guard<std::mutex> lock(mu_);
  if (!kv_->Reserve(s->id_, s->pages_, P)) {
    const uint32_t free_pages = static_cast<uint32_t>(kv_->pool().num_free());
    FinishDestroy(s);
    return KvExhaustedError(absl::StrCat("importing ", P, " positions needs KV pages; ", free_pages, " are free"));
  }
  // A failed import keeps nothing: not its session, not the layer scales it set.
  ScaleFlagsGuard flags(ranks_);
  auto fail = [&](absl::Status st) -> absl::Status {
    FinishDestroy(s);
    return st;
  };
  // Every rank caches the same rows (CheckKvTransferable): each gets the import.
  for (Replica& k : ranks_) {
    Backend& be = *k.backend;
    for (int64_t l = 0; l < L; ++l) {
      if (new_scales[l] > 0.0f) {
        if (absl::Status st = k.store->SetScale(l, new_scales[l]); !st.ok()) return fail(st);
      }
    }
    if (P == 0) continue;
    absl::StatusOr<Tensor> slots = be.Allocate(DType::kI32, {P});
    absl::StatusOr<Tensor> rows = be.Allocate(DType::kU8, {P, static_cast<int64_t>(row)});
    if (!slots.ok()) return fail(slots.status());
    if (!rows.ok()) return fail(rows.status());
    const std::vector<int32_t> host_slots = Slots(s->pages_, P, options_.page_size);
    if (absl::Status st = be.Upload(host_slots.data(), host_slots.size() * sizeof(int32_t), *slots); !st.ok()) {
      return fail(st);
    }
    for (int64_t l = 0; l < L; ++l) {
      absl::Status st = be.Upload(b.rows.data() + static_cast<size_t>(l * P) * row, row * P, *rows);
      if (st.ok()) {
        be.KvImportRows(k.store->view(), l, *slots, *rows, *src, src_layout, src_per_layer ? b.scales[l] : 1.0f);
        st = be.Synchronize();
      }
      if (!st.ok()) return fail(st);
    }
  }
  s->context_ = b.context;
  s->pending_.assign(b.pending.begin(), b.pending.end());
  if (b.has_unfed) s->unfed_token_ = b.unfed;
  s->num_generated_ = b.generated;
  s->state_ = state;
  s->rng_.set_state(b.rng);
  s->share_prefix_ = trusted;
  if (trusted) kv_->RegisterPrefix(s->id_, s->pages_, s->context_);
  flags.Keep();
  return s;
}

}  // namespace llmrt
