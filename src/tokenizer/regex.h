// Pre-tokenizer regexes through Oniguruma (Ruby syntax, UTF-8): the engine Hugging Face
// tokenizers uses, with the character-class intersection (&&) Kimi's pattern needs.
//
// A pattern comes from a tokenizer file, so it may be hostile: a backtracking engine can spend
// exponential time on a pathological pattern, and its backtracking stack grows with the length
// of a match. FindAll therefore runs under a work budget linear in the text (see regex.cc) and a
// stack cap, and reports running out of either as an error instead of dropping text.
#ifndef LLMRT_TOKENIZER_REGEX_H_
#define LLMRT_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmrt {

class Regex {
 public:
  // FormatError (with Oniguruma's message) when the pattern does not compile.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();
  // Calls on_match(begin, end) with the byte offsets of each non-overlapping leftmost match, in
  // order (an empty match is skipped and the search moves on one character). REQUIRES: text is
  // valid UTF-8 shorter than 2^31 bytes. OutOfRange when the budget or the stack cap is
  // exhausted, FormatError for any other Oniguruma failure; on_match may have been called for
  // a prefix of the text by then. Thread-safe.
  absl::Status FindAll(std::string_view text, absl::FunctionRef<void(size_t begin, size_t end)> on_match) const;

 private:
  Regex() = default;
  void* reg_ = nullptr;  // OnigRegex
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_REGEX_H_
