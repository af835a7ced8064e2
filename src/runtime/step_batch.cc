#include "src/runtime/step_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<StepBatch> StepBatch::Create(Backend& backend, const Limits& l) {
  StepBatch b;
  b.limits_ = l;
  // Pack's layout at its largest (T = max_tokens, R = max_logit_rows).
  const int64_t words = 7 * l.max_tokens + 3 + (2 + kSamplingWords) * l.max_logit_rows + l.max_page_entries;
  absl::StatusOr<Tensor> t = backend.Allocate(DType::kI32, {words});
  if (!t.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("the step metadata buffer (", words, " words) does not fit: ",
                                                     t.status().message()));
  }
  b.device_ = *t;
  b.staging_.reserve(static_cast<size_t>(words));
  for (auto* v : {&b.ids_, &b.pos_, &b.tseq_, &b.tctx_, &b.slots_}) v->reserve(static_cast<size_t>(l.max_tokens));
  b.pstart_.reserve(static_cast<size_t>(l.max_seqs + 1));
  b.first_.reserve(static_cast<size_t>(l.max_seqs));
  b.lrows_.reserve(static_cast<size_t>(l.max_logit_rows));
  b.samp_.reserve(static_cast<size_t>(kSamplingWords * l.max_logit_rows));
  b.rand_.reserve(static_cast<size_t>(l.max_logit_rows));
  b.pids_.reserve(static_cast<size_t>(l.max_page_entries));
  b.Clear();
  return b;
}

int64_t StepBatch::MaxPagesPerSeq(int64_t max_positions, int64_t page_size, int64_t num_pages) {
  return std::min((max_positions + page_size - 1) / page_size, num_pages);
}

void StepBatch::Clear() {
  for (auto* v : {&ids_, &pos_, &tseq_, &tctx_, &pstart_, &pids_, &slots_, &lrows_, &first_, &samp_, &rand_,
                  &seq_tokens_, &seq_ctx_}) {
    v->clear();
  }
  pstart_.push_back(0);
  decode_phase_ = true;
}

int64_t StepBatch::Add(const PageTable& table, int64_t page_size, int64_t base, const int32_t* tokens, int64_t n,
                       bool want_last, bool all_logits) {
  const int32_t seq = static_cast<int32_t>(pstart_.size() - 1);
  first_.push_back(static_cast<int32_t>(ids_.size()));
  for (const PageRef& ref : table.entries()) pids_.push_back(ref.page);
  pstart_.push_back(static_cast<int32_t>(pids_.size()));
  const int64_t first_row = static_cast<int64_t>(lrows_.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = base + i;
    ids_.push_back(tokens[i]);
    pos_.push_back(static_cast<int32_t>(p));
    tseq_.push_back(seq);
    tctx_.push_back(static_cast<int32_t>(p + 1));
    slots_.push_back(table.entries()[p / page_size].page * static_cast<int32_t>(page_size) +
                     static_cast<int32_t>(p % page_size));
    if (all_logits || (want_last && i == n - 1)) {
      lrows_.push_back(static_cast<int32_t>(ids_.size() - 1));
      samp_.resize(samp_.size() + kSamplingWords, 0);  // greedy until SetSampling
    }
  }
  return static_cast<int64_t>(lrows_.size()) > first_row ? first_row : -1;
}

void StepBatch::SetSampling(int64_t row, const SamplingParams& params, double draw, bool draws) {
  LLMRT_CHECK(row >= 0 && row < num_logit_rows());
  PackSamplingRow(params, draw, samp_.data() + row * kSamplingWords);
  if (draws) {
    LLMRT_CHECK(rand_.empty() || rand_.back() < row);
    rand_.push_back(static_cast<int32_t>(row));
  }
}

void StepBatch::PadTo(int64_t rows, int32_t spare_page, int64_t page_size, bool logits, int64_t max_logit_rows) {
  const int64_t pad = rows - num_tokens();
  if (pad <= 0) return;
  const int32_t seq = static_cast<int32_t>(pstart_.size() - 1);
  first_.push_back(static_cast<int32_t>(ids_.size()));
  pids_.push_back(spare_page);
  pstart_.push_back(static_cast<int32_t>(pids_.size()));
  for (int64_t i = 0; i < pad; ++i) {
    ids_.push_back(0);
    pos_.push_back(0);
    tseq_.push_back(seq);
    tctx_.push_back(1);
    slots_.push_back(spare_page * static_cast<int32_t>(page_size));
    if (logits && num_logit_rows() < max_logit_rows) {
      lrows_.push_back(static_cast<int32_t>(ids_.size() - 1));
      samp_.resize(samp_.size() + kSamplingWords, 0);
    }
  }
}

absl::StatusOr<ForwardBatch> StepBatch::Upload(Backend& backend) {
  Pack();
  return UploadTo(backend, device_);
}

absl::StatusOr<Tensor> StepBatch::AllocateFor(Backend& backend) const {
  absl::StatusOr<Tensor> t = backend.Allocate(DType::kI32, {device_.numel()});
  if (!t.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("the step metadata buffer (", device_.numel(),
                                                     " words) does not fit: ", t.status().message()));
  }
  return t;
}

void StepBatch::Pack() {
  const int64_t T = num_tokens(), S = static_cast<int64_t>(first_.size()), R = num_logit_rows();
  const int64_t P = static_cast<int64_t>(pids_.size());
  LLMRT_CHECK(T >= 1 && T <= limits_.max_tokens && S <= limits_.max_seqs && S <= T && R <= limits_.max_logit_rows &&
              P <= limits_.max_page_entries);
  // Every array starts at an offset that depends only on T and R (a sequence has at least one
  // token, so S <= T), so passes of one shape see their arrays at the same device addresses: what
  // a replayed recording of a pass needs. The page ids, whose number varies, come last.
  o_ids_ = 0;
  o_pos_ = T;
  o_tseq_ = 2 * T;
  o_tctx_ = 3 * T;
  o_slots_ = 4 * T;
  o_pstart_ = 5 * T;     // S + 1 <= T + 1 words, T + 2 reserved
  o_first_ = 6 * T + 2;  // S <= T words, T + 1 reserved
  o_lrows_ = 7 * T + 3;
  o_samp_ = o_lrows_ + R;
  o_rand_ = o_samp_ + kSamplingWords * R;
  o_pids_ = o_rand_ + R;
  staging_.assign(static_cast<size_t>(o_pids_ + P), 0);
  auto put = [&](const std::vector<int32_t>& v, int64_t at) { std::copy(v.begin(), v.end(), staging_.begin() + at); };
  put(ids_, o_ids_);
  put(pos_, o_pos_);
  put(tseq_, o_tseq_);
  put(tctx_, o_tctx_);
  put(slots_, o_slots_);
  put(pstart_, o_pstart_);
  put(first_, o_first_);
  put(lrows_, o_lrows_);
  put(samp_, o_samp_);
  put(rand_, o_rand_);
  put(pids_, o_pids_);
  seq_tokens_.assign(static_cast<size_t>(S), 0);
  seq_ctx_.assign(static_cast<size_t>(S), 0);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t end = s + 1 < S ? first_[s + 1] : T;
    seq_tokens_[s] = static_cast<int32_t>(end - first_[s]);
    seq_ctx_[s] = end > first_[s] ? tctx_[end - 1] : 0;
  }
}

absl::StatusOr<ForwardBatch> StepBatch::UploadTo(Backend& backend, const Tensor& device) const {
  const int64_t T = num_tokens(), S = static_cast<int64_t>(first_.size()), R = num_logit_rows();
  const int64_t P = static_cast<int64_t>(pids_.size());
  LLMRT_RETURN_IF_ERROR(backend.Upload(staging_.data(), staging_.size() * sizeof(int32_t), device));
  auto view = [&](int64_t offset, int64_t n) { return device.Rows(offset, offset + n); };
  ForwardBatch fb;
  fb.num_tokens = T;
  fb.num_logit_rows = R;
  fb.decode_phase = decode_phase_;
  fb.token_ids = view(o_ids_, T);
  fb.positions = view(o_pos_, T);
  fb.attn.token_seq = view(o_tseq_, T);
  fb.attn.token_ctx = view(o_tctx_, T);
  fb.attn.slot_mapping = view(o_slots_, T);
  fb.attn.seq_page_start = view(o_pstart_, S + 1);
  fb.attn.seq_first_token = view(o_first_, S);
  fb.logit_rows = view(o_lrows_, R);
  fb.sampling = view(o_samp_, R * kSamplingWords);
  fb.random_rows = view(o_rand_, static_cast<int64_t>(rand_.size()));
  fb.attn.page_ids = view(o_pids_, P);
  fb.attn.num_tokens = T;
  fb.attn.num_seqs = S;
  fb.attn.max_ctx = *std::max_element(tctx_.begin(), tctx_.end());
  for (const int32_t c : tctx_) fb.attn.total_ctx += c;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = (s + 1 < S ? first_[s + 1] : T) - first_[s];
    fb.attn.min_seq_tokens = s == 0 ? n : std::min(fb.attn.min_seq_tokens, n);
  }
  fb.attn.decode = decode_phase_;
  if (static_cast<int64_t>(seq_tokens_.size()) == S) {  // (Pack made them for this batch: Clear empties them)
    fb.attn.host_seq_tokens = seq_tokens_.data();
    fb.attn.host_seq_ctx = seq_ctx_.data();
  }
  return fb;
}

}  // namespace llmrt
