// The two byte-level BPE algorithms of the families' reference libraries. They differ: tiktoken
// merges the adjacent pair whose concatenated bytes have the lowest rank; Hugging Face
// tokenizers applies merge rules (pairs of token ids) by rule rank. Each is reproduced exactly,
// in O(n log n) for a piece of n bytes: a min-heap of candidate merges over a linked list of
// parts, stale heap entries skipped when popped (the structure of tokenizers' Word::merge_all;
// tiktoken's own loop rescans all parts after every merge, which is quadratic).
#ifndef LLMRT_TOKENIZER_BPE_H_
#define LLMRT_TOKENIZER_BPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace llmrt {

// tiktoken: `ranks` maps token bytes to rank (= token id). REQUIRES: every single byte has a
// rank and no two byte strings share one (the loader checks both; tiktoken asserts the second).
class TiktokenBpe {
 public:
  explicit TiktokenBpe(absl::flat_hash_map<std::string, int32_t> ranks);
  // Appends the ids of one pre-tokenized piece (tiktoken's byte_pair_encode).
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;
  size_t size() const { return ranks_.size(); }

 private:
  int32_t Rank(std::string_view bytes) const;
  absl::flat_hash_map<std::string, int32_t> ranks_;
  size_t max_token_bytes_ = 0;  // no longer byte string can have a rank: skip its lookup
};

// Hugging Face BPE with merge rules, over raw bytes (the ByteLevel alphabet mapped back).
class MergesBpe {
 public:
  // vocab: token bytes -> id; merges: (left bytes, right bytes) in rank order. A pair listed
  // twice keeps its last rank, as tokenizers' map built from the list does.
  static MergesBpe Build(const absl::flat_hash_map<std::string, int32_t>& vocab,
                         const std::vector<std::pair<std::string, std::string>>& merges, std::string* error);
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

 private:
  struct Rule {
    int32_t rank;
    int32_t id;
  };
  static uint64_t Key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  const Rule* Find(int32_t a, int32_t b) const;
  int32_t byte_id_[256];
  absl::flat_hash_map<uint64_t, Rule> rules_;
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_BPE_H_
