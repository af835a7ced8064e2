// Finds special (added) tokens written in text: the leftmost occurrence, and the longest token
// at that position. That is the rule of tokenizers' added-token matcher (Aho-Corasick,
// LeftmostLongest); tiktoken's alternation of the escaped specials agrees whenever no special is
// a prefix of another, as in the released files.
//
// A byte trie walked from each position that can start a token: the work per text byte is at
// most the longest token's length, which the loader bounds (kMaxSpecialTokenBytes), so a
// tokenizer file cannot make matching superlinear in the text.
#ifndef LLMRT_TOKENIZER_SPECIAL_MATCHER_H_
#define LLMRT_TOKENIZER_SPECIAL_MATCHER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace llmrt {

class SpecialMatcher {
 public:
  SpecialMatcher();
  // Adds a token's text; an empty text never matches. When a text is added twice the first id
  // stays.
  void Add(std::string_view text, int32_t id);

  struct Match {
    size_t pos;  // byte offset in the text
    size_t len;
    int32_t id;
  };
  // The leftmost-longest token in text[from..), or nullopt.
  std::optional<Match> Find(std::string_view text, size_t from) const;

 private:
  int32_t Child(int32_t node, unsigned char byte) const;
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> id_;                       // per node (0 is the root): token id or -1
  bool first_[256] = {};                          // bytes that start some token
  size_t max_len_ = 0;
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_SPECIAL_MATCHER_H_
