#include "src/tokenizer/detokenizer.h"

#include "absl/strings/str_cat.h"
#include "src/tokenizer/utf8.h"

namespace llmrt {
namespace {

absl::Status BadId(const Tokenizer& t, int32_t id) {
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is negative"));
  return absl::InvalidArgumentError(
      absl::StrCat("token id ", id, " is outside the vocabulary (", t.model_vocab_size(), " ids)"));
}

}  // namespace

absl::StatusOr<std::string> Decode(const Tokenizer& t, absl::Span<const int32_t> ids, bool skip_special) {
  // Sized first, so that no id sequence makes this allocate more than the limit.
  size_t total = 0;
  for (int32_t id : ids) {
    auto p = t.Piece(id);
    if (!p) return BadId(t, id);
    if (skip_special && t.IsSpecial(id)) continue;
    total += p->size();
    if (total > kMaxTextBytes) {
      return absl::OutOfRangeError(
          absl::StrCat("the decoded text is longer than the ", kMaxTextBytes, "-byte limit (", ids.size(), " ids)"));
    }
  }
  std::string bytes;
  bytes.reserve(total);
  for (int32_t id : ids) {
    if (skip_special && t.IsSpecial(id)) continue;
    bytes.append(*t.Piece(id));
  }
  std::string text = Utf8Sanitize(bytes);
  if (text.size() > kMaxTextBytes) {
    return absl::OutOfRangeError(absl::StrCat("the decoded text is longer than the ", kMaxTextBytes, "-byte limit"));
  }
  return text;
}

absl::Status IncrementalDetokenizer::Push(int32_t id, std::string* out) {
  auto p = t_.Piece(id);
  if (!p) return BadId(t_, id);
  if (skip_special_ && t_.IsSpecial(id)) return absl::OkStatus();
  pending_.append(*p);
  // Emit everything up to a trailing valid-but-incomplete sequence.
  size_t i = 0, keep_from = pending_.size();
  while (i < pending_.size()) {
    const int n = Utf8SequenceLength(pending_, i);
    if (n == -1) {
      keep_from = i;
      break;
    }
    i += n > 0 ? n : 1;
  }
  out->append(Utf8Sanitize(std::string_view(pending_).substr(0, keep_from)));
  pending_.erase(0, keep_from);
  return absl::OkStatus();
}

void IncrementalDetokenizer::Flush(std::string* out) {
  out->append(Utf8Sanitize(pending_));
  pending_.clear();
}

}  // namespace llmrt
