#include "src/tokenizer/detokenizer.h"

#include "absl/strings/str_cat.h"
#include "src/tokenizer/utf8.h"

namespace llmrt {

absl::StatusOr<std::string> Decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  std::string bytes;
  for (int32_t id : ids) {
    auto p = t.Piece(id);
    if (!p) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary"));
    if (skip_special && t.IsSpecial(id)) continue;
    bytes.append(*p);
  }
  return Utf8Sanitize(bytes);
}

absl::Status IncrementalDetokenizer::Push(int32_t id, std::string* out) {
  auto p = t_.Piece(id);
  if (!p) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary"));
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
