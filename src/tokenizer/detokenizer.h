// Detokenization: ids -> UTF-8 text, whole or incrementally. The incremental form never emits
// part of a UTF-8 sequence: bytes of a character split across tokens are held until complete;
// bytes that can never form a valid character become U+FFFD (as errors="replace").
//
// Ids: a negative id, or one at or beyond Tokenizer::model_vocab_size(), is InvalidArgument. An
// id below it without text (the model's padded vocabulary past the tokenizer's, or a hole in the
// file's numbering) decodes to nothing, as Hugging Face tokenizers' decode skips ids it has no
// token for; a sampler may pick such an id and the rest of the text must still come out.
#ifndef LLMRT_TOKENIZER_DETOKENIZER_H_
#define LLMRT_TOKENIZER_DETOKENIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/tokenizer/tokenizer.h"

namespace llmrt {

// Whole-sequence decode. skip_special drops special tokens instead of writing their text.
// OutOfRange when the text would be longer than kMaxTextBytes.
absl::StatusOr<std::string> Decode(const Tokenizer& t, absl::Span<const int32_t> ids, bool skip_special);

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& t, bool skip_special) : t_(t), skip_special_(skip_special) {}
  // Appends the text that became complete with this token to *out. On error nothing changes.
  absl::Status Push(int32_t id, std::string* out);
  // Emits what is held back (as U+FFFD for an incomplete sequence) and resets.
  void Flush(std::string* out);

 private:
  const Tokenizer& t_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence (at most 3)
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_DETOKENIZER_H_
