// Detokenization: ids -> UTF-8 text, whole or incrementally. The incremental form never emits
// part of a UTF-8 sequence: bytes of a character split across tokens are held until complete;
// bytes that can never form a valid character become U+FFFD (as errors="replace").
#ifndef LLMRT_TOKENIZER_DETOKENIZER_H_
#define LLMRT_TOKENIZER_DETOKENIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/tokenizer/tokenizer.h"

namespace llmrt {

// Whole-sequence decode. skip_special drops special tokens instead of writing their text.
absl::StatusOr<std::string> Decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special);

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& t, bool skip_special) : t_(t), skip_special_(skip_special) {}
  // Appends the text that became complete with this token to *out.
  absl::Status Push(int32_t id, std::string* out);
  // Emits what is held back (as U+FFFD for an incomplete sequence) and resets.
  void Flush(std::string* out);

 private:
  const Tokenizer& t_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_DETOKENIZER_H_
