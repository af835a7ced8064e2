// The metadata of one forward pass: token ids, positions and the paged-attention arrays, built
// on the host into one staging buffer and uploaded with one copy into a fixed backend buffer
// allocated when the runtime is created (the step contract: README, "Architecture"). The host arrays keep their
// capacity between steps, so a warm step allocates nothing.
//
// Decode batches may be padded to a bucket size (what a device backend replays a captured graph
// for): padding rows belong to a sequence of their own on the store's spare page and attend to
// one position, so real rows are untouched; they may be greedy logit rows, whose ids nobody
// reads, so that every pass of a bucket has as many logit rows as tokens. The packed arrays sit
// at offsets that depend only on the pass's token and logit-row counts (Pack), so passes of one
// shape read their metadata at the same device addresses.
#ifndef LLMRT_RUNTIME_STEP_BATCH_H_
#define LLMRT_RUNTIME_STEP_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/backend/sampling.h"
#include "src/kv/page_table.h"
#include "src/model/model.h"

namespace llmrt {

class StepBatch {
 public:
  struct Limits {
    int64_t max_tokens = 0;        // rows of one pass (padding included)
    int64_t max_seqs = 0;          // sequences of one pass (the padding sequence included)
    int64_t max_page_entries = 0;  // page-table entries over the pass's sequences
    int64_t max_logit_rows = 0;
  };
  // Allocates the backend buffer for passes within `limits`.
  static absl::StatusOr<StepBatch> Create(Backend& backend, const Limits& limits);
  // The page-table entries one sequence can have: bounded by its positions and the pool.
  static int64_t MaxPagesPerSeq(int64_t max_positions, int64_t page_size, int64_t num_pages);

  void Clear();
  // Adds one sequence: `tokens` at positions base.., over the pages of `table`. With all_logits
  // every row's logits are wanted, else (want_last) only the last row's. Returns the logit row
  // of the sequence's first wanted row, or -1.
  int64_t Add(const PageTable& table, int64_t page_size, int64_t base, const int32_t* tokens, int64_t n,
              bool want_last, bool all_logits);
  // Sets how logit row `row` (from Add) samples: its parameters and the draw taken for it from
  // the session's stream (`draws`: SamplingDraws; rows without a call are greedy).
  void SetSampling(int64_t row, const SamplingParams& params, double draw, bool draws);
  // Pads the batch to `rows` rows with rows of a padding sequence on `spare_page`; with
  // `logits`, each padding row is also a (greedy) logit row, as long as the rows fit
  // `max_logit_rows` (so that a bucket's passes have as many logit rows as tokens).
  void PadTo(int64_t rows, int32_t spare_page, int64_t page_size, bool logits = false, int64_t max_logit_rows = 0);
  void set_decode_phase(bool d) { decode_phase_ = d; }
  bool decode_phase() const { return decode_phase_; }
  int64_t num_tokens() const { return static_cast<int64_t>(ids_.size()); }
  int64_t num_logit_rows() const { return static_cast<int64_t>(lrows_.size()); }
  // Packs the arrays, uploads them with one copy and returns the pass's views of them.
  absl::StatusOr<ForwardBatch> Upload(Backend& backend);
  // The same in two halves, for several ranks: Pack once on the host, then UploadTo each rank's
  // backend into its buffer (made by AllocateFor). UploadTo only reads the batch, so ranks may
  // call it concurrently.
  void Pack();
  absl::StatusOr<Tensor> AllocateFor(Backend& backend) const;
  absl::StatusOr<ForwardBatch> UploadTo(Backend& backend, const Tensor& device) const;
  // The buffer Create allocated (in the backend it was given).
  const Tensor& device() const { return device_; }

 private:
  Limits limits_;
  Tensor device_;               // I32: the packed arrays
  std::vector<int32_t> staging_;
  std::vector<int32_t> ids_, pos_, tseq_, tctx_, pstart_, pids_, slots_, lrows_, first_;
  std::vector<int32_t> seq_tokens_, seq_ctx_;  // per sequence, for AttentionBatch's host facts (Pack)
  std::vector<int32_t> samp_;  // kSamplingWords per logit row
  std::vector<int32_t> rand_;  // the logit rows that draw, ascending
  // Offsets of the arrays in the packed buffer (Pack).
  int64_t o_ids_ = 0, o_pos_ = 0, o_tseq_ = 0, o_tctx_ = 0, o_slots_ = 0, o_pstart_ = 0, o_first_ = 0, o_lrows_ = 0,
          o_pids_ = 0, o_samp_ = 0, o_rand_ = 0;
  bool decode_phase_ = true;
};

}  // namespace llmrt

#endif  // LLMRT_RUNTIME_STEP_BATCH_H_
