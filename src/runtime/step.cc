// One scheduler iteration (llm_decode_step): plan and admit under the lock, run the forward pass
// without it, commit under it again.
#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/runtime.h"
#include "src/sched/sampler.h"
#include "src/sched/scheduler.h"
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
  // The session's random stream before this step drew for it (restored when the step samples
  // nothing for it after all).
  std::array<uint64_t, 4> rng_before{};
  bool drew = false;
  // The pages the session held before this step admitted it (a reservation made by an earlier
  // step, kQueue's for a whole prompt, outlives this step's failure).
  int64_t pages_before = 0;
  // A new prompt's lookup in the prefix cache this step: the prompt's tokens and those it starts
  // on shared pages (moved from pending to the context; a failed pass moves them back).
  int64_t looked_up = 0, shared = 0;
};

namespace {

// The next power of two at or above n.
int64_t PowerOfTwoAtLeast(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

// Gives a running session's pages back; its processed tokens queue again in front of its
// pending ones, and it recomputes them when pages are free (the tokens it then produces are
// the ones it would have produced: every position's computation is batch-independent).
// The last n context tokens (a prompt's start found on shared pages this step) back to the front
// of the pending tokens.
void Runtime::UnshareStart(Session* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    s->pending_.push_front(s->context_.back());
    s->context_.pop_back();
  }
}

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

std::vector<Runtime::Work> Runtime::Plan(std::vector<StepResult>* results) {
  const ModelConfig& c = model_->config();
  std::vector<Work> work;
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
    const int64_t pages_before = s->pages_.num_pages();
    int64_t looked_up = 0, shared = 0;
    if (prefill && s->context_.empty() && pages_before == 0 && kv_->prefix_sharing()) {
      std::vector<int32_t> prompt(s->pending_.begin(), s->pending_.end());
      looked_up = static_cast<int64_t>(prompt.size());
      shared = kv_->ShareCachedPrefix(s->id_, s->pages_, prompt);
      for (int64_t i = 0; i < shared; ++i) {
        s->context_.push_back(s->pending_.front());
        s->pending_.pop_front();
      }
    }
    // A prompt that does not run this step gives its shared pages back, unchanged.
    const auto unshare = [&] {
      if (shared == 0) return;
      UnshareStart(s, shared);
      kv_->ReleaseAll(s->id_, s->pages_);
    };
    AdmissionRequest req;
    req.session = s->id_;
    req.pages = &s->pages_;
    req.context = static_cast<int64_t>(s->context_.size());
    req.pending = static_cast<int64_t>(s->pending_.size());
    req.tokens = std::min<int64_t>(item.num_tokens, req.pending);
    req.prefill = prefill;
    req.new_generation = s->num_generated_ == 0;
    req.max_new_tokens = s->options_.max_new_tokens;
    req.max_positions = c.max_position_embeddings;
    // Under kPreempt: the newest running session newer than s gives its pages back.
    auto preempt_newer = [&]() -> bool {
      for (auto it = sessions_.rbegin(); it != sessions_.rend() && it->first > s->id_; ++it) {
        Session* v = it->second.get();
        if (v->destroy_requested_ || v->pages_.num_pages() == 0 ||
            (v->state_ != SessionState::kPrefill && v->state_ != SessionState::kDecoding)) {
          continue;
        }
        work.erase(std::remove_if(work.begin(), work.end(), [&](const Work& w) { return w.s == v; }), work.end());
        Preempt(v);
        return true;
      }
      return false;
    };
    switch (Admit(*kv_, options_.kv_pressure, req, preempt_newer)) {
      case Admission::kAdmitted: {
        Work wk{s, req.tokens, req.context, req.tokens == req.pending, -1, prefill};
        wk.pages_before = pages_before;
        wk.looked_up = looked_up;
        wk.shared = shared;
        work.push_back(wk);
        break;
      }
      case Admission::kWait:
        unshare();
        waiting.push_back(s);
        if (prefill) prompts_blocked = true;
        break;
      case Admission::kFail: {
        unshare();
        StepResult r;
        r.session = s;
        r.session_id = s->id_;
        r.status = KvExhaustedError(absl::StrCat("session ", s->id_, " needs KV pages for ", req.context + req.tokens,
                                                 " positions; ", kv_->pool().num_free(), " of ",
                                                 kv_->pool().num_pages(), " pages are free"));
        results->push_back(std::move(r));
        break;
      }
    }
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
  if (work.empty()) return work;

  // The batch's metadata, on the host.
  batch_.Clear();
  bool decode_phase = true;
  std::vector<int32_t> toks;
  step_keeps_logits_ = false;
  for (Work& wk : work) {
    decode_phase = decode_phase && !wk.prefill;
    toks.assign(wk.s->pending_.begin(), wk.s->pending_.begin() + wk.n);
    wk.logit_row = batch_.Add(wk.s->pages_, options_.page_size, wk.base, toks.data(), wk.n, wk.wants_logits, false);
    if (wk.logit_row < 0) continue;
    // The backend samples; the draw comes from the session's stream here, as the host sampler
    // would take it, so that every backend samples the same tokens from the same seeds.
    const SamplingParams& sp = wk.s->options_.sampling;
    wk.drew = SamplingDraws(sp, c.vocab_size);
    wk.rng_before = wk.s->rng_.state();
    batch_.SetSampling(wk.logit_row, sp, wk.drew ? wk.s->rng_.Uniform() : 0.0, wk.drew);
    step_keeps_logits_ = step_keeps_logits_ || wk.s->options_.keep_logits;
  }
  batch_.set_decode_phase(decode_phase);
  if (decode_phase && (options_.pad_decode_to_power_of_two || backend_->captures_passes())) {
    // A capturing backend replays one recording per bucket: padding rows are (greedy) logit rows
    // too, so that a bucket's passes have one shape.
    const int64_t real = batch_.num_tokens();
    batch_.PadTo(std::min<int64_t>(PowerOfTwoAtLeast(real), options_.max_tokens_per_step), store_->spare_page(),
                 options_.page_size, /*logits=*/true, ranks_[0].logits.dim(0));
    padded_tokens_ += static_cast<uint64_t>(batch_.num_tokens() - real);
  }
  for (Work& wk : work) wk.s->in_flight_ = true;
  return work;
}

Runtime::ScaleFlagsGuard::ScaleFlagsGuard(std::vector<Replica>& ranks) : ranks_(ranks) {
  for (const Replica& k : ranks_) {
    if (k.store->all_scales_set()) continue;
    for (const Replica& q : ranks_) before_.push_back(q.store->scale_flags());
    break;
  }
}

Runtime::ScaleFlagsGuard::~ScaleFlagsGuard() {
  if (keep_) return;
  for (size_t r = 0; r < before_.size(); ++r) ranks_[r].store->RestoreScaleFlags(before_[r]);
}

absl::Status Runtime::Forward(StepBatch& batch, bool score, bool score_buffer) {
  const int64_t vocab = model_->config().vocab_size;
  const int64_t rows = batch.num_logit_rows();
  int fail_rank = -1;
  {
    std::lock_guard<std::mutex> lock(fault_mu_);
    std::swap(fail_rank, fail_rank_);
  }
  batch.Pack();
  // A failed pass's calibrations are not kept, on every way out of here but success.
  ScaleFlagsGuard flags(ranks_);
  // Every rank runs the same pass over its replica; the collectives inside keep them in step.
  const std::vector<absl::Status> status = rank_threads_->Run([&](int r) -> absl::Status {
    Replica& k = ranks_[r];
    absl::Status forward;
    try {
      absl::StatusOr<ForwardBatch> fb = batch.UploadTo(*k.backend, r == 0 ? batch.device() : k.batch);
      if (fb.ok()) {
        if (r == fail_rank) k.backend->RecordFailure(absl::InternalError(absl::StrCat("fault injected on rank ", r)));
        const KvCacheView view = k.store->view();
        const uint64_t key = PassKey(*k.backend, view, score, &*fb);
        forward = k.backend->RunPass(key, [&]() -> absl::Status {
          return k.model->Forward(*fb, view, *k.workspace, score_buffer ? k.score_logits : k.logits);
        });
        // Rank 0 samples every logit row where the logits are (the device, on CUDA).
        if (forward.ok() && r == 0 && !score && rows > 0) {
          k.backend->SampleTokens(k.logits.Rows(0, rows), fb->sampling, fb->random_rows, sampled_ids_.Rows(0, rows));
        }
      } else {
        forward = fb.status();
      }
    } catch (const std::bad_alloc&) {
      forward = absl::ResourceExhaustedError("forward pass: out of host memory");
    } catch (const std::exception& e) {
      forward = absl::InternalError(absl::StrCat("forward pass: ", e.what()));
    }
    // Every op's failure surfaces here (the backend records it and skips later ops).
    const absl::Status sync = k.backend->Synchronize();
    return forward.ok() ? sync : forward;
  });
  // The pass failed where it failed first: a rank whose status is not a peer's failure.
  absl::Status failed;
  for (size_t r = 0; r < status.size() && failed.ok(); ++r) {
    if (!status[r].ok() && !IsPeerFailure(status[r])) failed = status[r];
  }
  for (size_t r = 0; r < status.size() && failed.ok(); ++r) failed = status[r];
  if (!failed.ok() && status.size() > 1) {
    for (size_t r = 0; r < status.size(); ++r) {
      if (status[r].ok() || IsPeerFailure(status[r]) != IsPeerFailure(failed) || status[r] != failed) continue;
      failed = absl::Status(failed.code(), absl::StrCat("rank ", r, " of ", status.size(), ": ", failed.message()));
      break;
    }
  }
  if (process_comm_) {
    // Multi-process: every process must commit or drop this pass alike.
    // The flag is summed where the communicator reads: host memory for MPI, device memory (on
    // the backend's stream, which Download waits for) for NCCL.
    float flag = failed.ok() ? 0.0f : 1.0f;
    LLMRT_RETURN_IF_ERROR(backend_->Upload(&flag, sizeof(flag), pass_flag_));
    LLMRT_RETURN_IF_ERROR(process_comm_->AllReduceSum(pass_flag_.data(), 1, DType::kF32));
    LLMRT_RETURN_IF_ERROR(backend_->Download(pass_flag_, &flag, sizeof(flag)));
    if (failed.ok() && flag > 0.0f) {
      failed = absl::InternalError(absl::StrCat("the pass failed on ", static_cast<int>(flag), " other rank(s)"));
    }
  }
  LLMRT_RETURN_IF_ERROR(failed);
  flags.Keep();
  // Only the sampled ids come back, and the logits when some session keeps them (or to score).
  host_ids_.resize(static_cast<size_t>(rows));
  if (rows > 0 && !score) {
    LLMRT_RETURN_IF_ERROR(backend_->Download(sampled_ids_.Rows(0, rows), host_ids_.data(), host_ids_.size() * sizeof(int32_t)));
  }
  const bool logits_back = score || step_keeps_logits_;
  host_logits_.resize(static_cast<size_t>(logits_back ? rows * vocab : 0));
  if (rows > 0 && logits_back) {
    const Tensor& logits = score_buffer ? ranks_[0].score_logits : ranks_[0].logits;
    LLMRT_RETURN_IF_ERROR(backend_->Download(logits.Rows(0, rows), host_logits_.data(), host_logits_.size() * sizeof(float)));
  }
  return absl::OkStatus();
}

uint64_t Runtime::PassKey(const Backend& backend, const KvCacheView& view, bool score, ForwardBatch* fb) const {
  if (!backend.captures_passes() || score || !fb->decode_phase) return 0;
  // The attention bound as a bucket: a recording's launches are sized by it, and every pass of a
  // bucket enqueues the same ones (the kernels read each token's own context length). The
  // direct passes use the same bound, so a replay computes what the direct pass would.
  const int64_t bound = std::max<int64_t>(PowerOfTwoAtLeast(fb->attn.max_ctx), kMinCaptureContext);
  fb->attn.max_ctx = std::min<int64_t>(bound, model_->config().max_position_embeddings);
  if (!options_.capture_decode || ranks_.size() > 1 || process_comm_ || fb->num_tokens >= (1 << 20) ||
      fb->num_logit_rows >= (1 << 20)) {
    return 0;
  }
  // A pass that would set a KV layer's scale (a per-layer FP8 cache without one yet) changes host
  // state as it is enqueued: it runs directly.
  if (view.codec->scale_kind() == KvScaleKind::kPerLayer) {
    for (int64_t l = 0; l < view.num_layers; ++l) {
      if (view.scale_set == nullptr || view.scale_set[l] == 0) return 0;
    }
  }
  int log2 = 0;
  while ((int64_t{1} << log2) < fb->attn.max_ctx) ++log2;
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(log2) << 40) | (static_cast<uint64_t>(fb->num_logit_rows) << 20) |
         static_cast<uint64_t>(fb->num_tokens);
}

void Runtime::Commit(const std::vector<Work>& work, const absl::Status& forward, std::vector<StepResult>* results) {
  const ModelConfig& c = model_->config();
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
    // A draw taken for a token this step does not sample goes back to the stream.
    const bool samples = forward.ok() && wk.wants_logits && wk.n == static_cast<int64_t>(s->pending_.size());
    if (wk.drew && !samples) s->rng_.set_state(wk.rng_before);
    if (!forward.ok()) {
      // Nothing of this step is kept: the pages it admitted the session to go back (those held
      // before it stay), the context is as before it (a prompt's shared start goes back too).
      UnshareStart(s, wk.shared);
      kv_->Truncate(s->id_, s->pages_,
                    std::max<int64_t>(static_cast<int64_t>(s->context_.size()), wk.pages_before * options_.page_size));
      r.status = forward;
      results->push_back(std::move(r));
      continue;
    }
    kv_->CountPrefixLookup(wk.looked_up, wk.shared);
    if (wk.prefill) r.num_prefilled = static_cast<uint32_t>(wk.n);
    for (int64_t i = 0; i < wk.n; ++i) {
      s->context_.push_back(s->pending_.front());
      s->pending_.pop_front();
    }
    if (wk.prefill && s->share_prefix_) kv_->RegisterPrefix(s->id_, s->pages_, s->context_);
    // Tokens appended while the step ran mean this was not the last position after all.
    if (samples) {
      if (s->options_.keep_logits) {
        const float* row = host_logits_.data() + wk.logit_row * c.vocab_size;
        s->logits_.assign(row, row + c.vocab_size);
      }
      const int32_t tok = host_ids_[static_cast<size_t>(wk.logit_row)];
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
}

absl::Status Runtime::Step(std::vector<StepResult>* results, size_t max_results, size_t* needed) {
  std::lock_guard<std::mutex> step_lock(step_mu_);
  std::vector<Work> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Every result belongs to a session alive now: checking here, under the lock, bounds them.
    const size_t live = static_cast<size_t>(LiveSessions());
    *needed = live;
    if (live > max_results) {
      return absl::OutOfRangeError(absl::StrCat("results must hold one entry per live session (", live, ")"));
    }
    work = Plan(results);
    if (work.empty()) return absl::OkStatus();
  }
  // Forward without the lock: other threads may create, feed, cancel and destroy sessions. Its
  // sessions are in flight until Commit, so whatever ends the pass, Commit runs.
  absl::Status forward;
  try {
    forward = Forward(batch_);
  } catch (const std::bad_alloc&) {
    forward = absl::ResourceExhaustedError("forward pass: out of host memory");
  } catch (const std::exception& e) {
    forward = absl::InternalError(absl::StrCat("forward pass: ", e.what()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Commit(work, forward, results);
  return absl::OkStatus();
}

}  // namespace llmrt
