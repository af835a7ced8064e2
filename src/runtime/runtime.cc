#include "src/runtime/runtime.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/sched/scheduler.h"
#include "src/util/errors.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const std::string& model_dir,
                                                         const RuntimeOptions& options) {
  if (options.kv_dtype != DType::kBF16 && options.kv_dtype != DType::kF32) {
    return absl::InvalidArgumentError("kv_dtype must be BF16 or F32");
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
  LLMRT_ASSIGN_OR_RETURN(rt->model_, LoadModel(*rt->checkpoint_, *rt->backend_));

  const ModelConfig& c = rt->model_->config();
  const int64_t width = rt->model_->kv_width();
  rt->kv_bytes_per_token_ = static_cast<uint64_t>(c.num_layers * width) * DTypeSize(options.kv_dtype);
  const uint64_t page_bytes = rt->kv_bytes_per_token_ * static_cast<uint64_t>(options.page_size);
  const uint64_t pages = options.kv_budget_bytes / page_bytes;
  if (pages == 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_budget_bytes ", options.kv_budget_bytes,
                                                   " holds no page (one page is ", page_bytes, " bytes)"));
  }
  if (pages > (1u << 30)) return absl::InvalidArgumentError("kv_budget_bytes gives too many pages");
  rt->cache_.num_pages = static_cast<int64_t>(pages);
  rt->cache_.num_layers = c.num_layers;
  rt->cache_.page_size = options.page_size;
  rt->cache_.width = width;
  LLMRT_ASSIGN_OR_RETURN(rt->cache_.pages, rt->backend_->Allocate(options.kv_dtype,
                                                                  {static_cast<int64_t>(pages), c.num_layers,
                                                                   options.page_size, width}));
  absl::MutexLock lock(&rt->mu_);
  rt->pool_ = std::make_unique<PagePool>(static_cast<int32_t>(pages));
  return rt;
}

Runtime::~Runtime() {
  absl::MutexLock lock(&mu_);
  sessions_.clear();
}

RuntimeInfo Runtime::Info() const {
  absl::MutexLock lock(&mu_);
  const ModelConfig& c = model_->config();
  RuntimeInfo i;
  i.architecture = c.architecture;
  i.model_type = c.model_type;
  i.backend = BackendKind::kCpu;
  i.kv_dtype = options_.kv_dtype;
  i.vocab_size = c.vocab_size;
  i.num_layers = c.num_layers;
  i.num_parameters = model_->num_parameters();
  i.weight_bytes = model_->weight_bytes();
  i.kv_bytes_per_token = kv_bytes_per_token_;
  i.page_size = options_.page_size;
  i.pages_total = pool_->num_pages();
  i.pages_free = pool_->num_free();
  i.kv_capacity_tokens = static_cast<uint64_t>(i.pages_total * i.page_size);
  i.num_sessions = static_cast<int64_t>(sessions_.size());
  i.max_position_embeddings = c.max_position_embeddings;
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
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::OutOfRangeError(absl::StrCat("max_sessions (", options_.max_sessions, ") sessions are alive"));
  }
  const uint64_t id = next_session_id_++;
  auto s = std::make_unique<Session>(this, id, options);
  Session* raw = s.get();
  sessions_.emplace(id, std::move(s));
  return raw;
}

void Runtime::ReleasePages(Session* s) { s->pages_.ReleaseAll(*pool_); }

void Runtime::DestroySession(Session* session) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session->id());
  if (it == sessions_.end() || it->second.get() != session) return;
  ReleasePages(session);
  sessions_.erase(it);
}

absl::Status Runtime::Append(Session* s, absl::Span<const int32_t> tokens) {
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  absl::MutexLock lock(&mu_);
  switch (s->state_) {
    case SessionState::kDecoding:
      return absl::FailedPreconditionError("the session is generating; wait for it to finish or cancel it");
    case SessionState::kCancelled:
      return absl::FailedPreconditionError("the session was cancelled");
    case SessionState::kFailed:
      return absl::FailedPreconditionError("the session failed");
    default:
      break;
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
  absl::MutexLock lock(&mu_);
  if (s->state_ == SessionState::kCancelled) return absl::OkStatus();
  s->state_ = SessionState::kCancelled;
  s->pending_.clear();
  s->report_cancel_ = true;
  ReleasePages(s);
  return absl::OkStatus();
}

absl::Status Runtime::CopyLogits(const Session* s, float* out, size_t capacity, size_t* count) const {
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

Runtime::SessionSnapshot Runtime::Snapshot(const Session* s) const {
  absl::MutexLock lock(&mu_);
  return {s->state_, s->id_, static_cast<uint32_t>(s->context_.size()),
          static_cast<uint32_t>(s->pending_.size()), s->num_generated_,
          static_cast<uint32_t>(s->pages_.num_pages())};
}

absl::Status Runtime::Step(std::vector<StepResult>* results) {
  absl::MutexLock lock(&mu_);
  const ModelConfig& c = model_->config();
  const int64_t page_size = options_.page_size;

  // 1. Report cancellations; collect candidates in arrival order.
  std::vector<Session*> order;
  std::vector<SchedCandidate> candidates;
  for (auto& [id, sp] : sessions_) {
    Session* s = sp.get();
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

  // 2. Reserve KV pages; a session that cannot get them waits, untouched.
  struct Work {
    Session* s;
    int64_t n;
    bool wants_logits;
    int64_t logit_row;
  };
  std::vector<Work> work;
  for (const SchedItem& item : plan) {
    Session* s = order[item.key];
    const int64_t new_len = static_cast<int64_t>(s->context_.size()) + item.num_tokens;
    if (!s->pages_.Reserve(*pool_, new_len, page_size)) {
      StepResult r;
      r.session = s;
      r.session_id = s->id_;
      r.status = KvExhaustedError(absl::StrCat("session ", s->id_, " needs KV pages for ", new_len,
                                               " positions; ", pool_->num_free(), " of ", pool_->num_pages(),
                                               " pages are free"));
      results->push_back(std::move(r));
      continue;
    }
    const bool wants_logits = item.num_tokens == static_cast<int64_t>(s->pending_.size());
    work.push_back({s, item.num_tokens, wants_logits, -1});
  }
  if (work.empty()) return absl::OkStatus();

  // 3. The batch as host arrays, then uploaded.
  std::vector<int32_t> ids, pos, tseq, tctx, pstart{0}, pids, slots, lrows;
  for (size_t w = 0; w < work.size(); ++w) {
    Work& wk = work[w];
    Session* s = wk.s;
    const int64_t base = static_cast<int64_t>(s->context_.size());
    for (const PageRef& ref : s->pages_.pages()) pids.push_back(ref.page);
    pstart.push_back(static_cast<int32_t>(pids.size()));
    for (int64_t i = 0; i < wk.n; ++i) {
      const int64_t p = base + i;
      ids.push_back(s->pending_[i]);
      pos.push_back(static_cast<int32_t>(p));
      tseq.push_back(static_cast<int32_t>(w));
      tctx.push_back(static_cast<int32_t>(p + 1));
      slots.push_back(s->pages_.pages()[p / page_size].page * static_cast<int32_t>(page_size) +
                      static_cast<int32_t>(p % page_size));
    }
    if (wk.wants_logits) {
      wk.logit_row = static_cast<int64_t>(lrows.size());
      lrows.push_back(static_cast<int32_t>(ids.size() - 1));
    }
  }
  const int64_t T = static_cast<int64_t>(ids.size()), S = static_cast<int64_t>(lrows.size());
  auto upload = [&](const std::vector<int32_t>& v) -> absl::StatusOr<Tensor> {
    LLMRT_ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(DType::kI32, {static_cast<int64_t>(std::max<size_t>(v.size(), 1))}));
    if (!v.empty()) backend_->Upload(v.data(), v.size() * sizeof(int32_t), t);
    return t;
  };
  auto run = [&]() -> absl::StatusOr<std::vector<float>> {
    ForwardBatch fb;
    fb.num_tokens = T;
    fb.num_logit_rows = S;
    LLMRT_ASSIGN_OR_RETURN(fb.token_ids, upload(ids));
    LLMRT_ASSIGN_OR_RETURN(fb.positions, upload(pos));
    LLMRT_ASSIGN_OR_RETURN(fb.attn.token_seq, upload(tseq));
    LLMRT_ASSIGN_OR_RETURN(fb.attn.token_ctx, upload(tctx));
    LLMRT_ASSIGN_OR_RETURN(fb.attn.seq_page_start, upload(pstart));
    LLMRT_ASSIGN_OR_RETURN(fb.attn.page_ids, upload(pids));
    LLMRT_ASSIGN_OR_RETURN(fb.attn.slot_mapping, upload(slots));
    LLMRT_ASSIGN_OR_RETURN(fb.logit_rows, upload(lrows));
    fb.attn.num_tokens = T;
    fb.attn.num_seqs = static_cast<int64_t>(work.size());
    fb.attn.max_ctx = *std::max_element(tctx.begin(), tctx.end());
    LLMRT_ASSIGN_OR_RETURN(Tensor logits, backend_->Allocate(DType::kF32, {std::max<int64_t>(S, 1), c.vocab_size}));
    LLMRT_RETURN_IF_ERROR(model_->Forward(fb, cache_, logits));
    std::vector<float> host(static_cast<size_t>(S * c.vocab_size));
    if (S > 0) backend_->Download(logits, host.data(), host.size() * sizeof(float));
    return host;
  };
  absl::StatusOr<std::vector<float>> logits = run();
  if (!logits.ok()) {
    // Nothing of this step is kept: pages reserved for it go back, contexts are unchanged.
    for (const Work& wk : work) {
      wk.s->pages_.Truncate(*pool_, static_cast<int64_t>(wk.s->context_.size()), page_size);
      StepResult r;
      r.session = wk.s;
      r.session_id = wk.s->id_;
      r.status = logits.status();
      results->push_back(std::move(r));
    }
    return absl::OkStatus();
  }

  // 4. Commit the processed tokens, sample, check stops.
  for (const Work& wk : work) {
    Session* s = wk.s;
    StepResult r;
    r.session = s;
    r.session_id = s->id_;
    if (s->state_ == SessionState::kPrefill) r.num_prefilled = static_cast<uint32_t>(wk.n);
    for (int64_t i = 0; i < wk.n; ++i) {
      s->context_.push_back(s->pending_.front());
      s->pending_.pop_front();
    }
    if (wk.wants_logits) {
      const float* row = logits->data() + wk.logit_row * c.vocab_size;
      s->logits_.assign(row, row + c.vocab_size);
      const int32_t tok = SampleToken(row, c.vocab_size, s->options_.sampling, s->rng_);
      ++s->num_generated_;
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
