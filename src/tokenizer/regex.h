// Pre-tokenizer regexes through Oniguruma (Ruby syntax, UTF-8): the engine Hugging Face
// tokenizers uses, with the character-class intersection (&&) Kimi's pattern needs.
#ifndef LLMRT_TOKENIZER_REGEX_H_
#define LLMRT_TOKENIZER_REGEX_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt {

class Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();
  // Non-overlapping leftmost matches, as [begin, end) byte offsets. Thread-safe.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

 private:
  Regex() = default;
  void* reg_ = nullptr;  // OnigRegex
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_REGEX_H_
