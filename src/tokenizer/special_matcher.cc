#include "src/tokenizer/special_matcher.h"

#include <algorithm>

namespace llmrt {

SpecialMatcher::SpecialMatcher() : id_(1, -1) {}

int32_t SpecialMatcher::Child(int32_t node, unsigned char byte) const {
  auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

void SpecialMatcher::Add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char c : text) {
    int32_t child = Child(node, c);
    if (child < 0) {
      child = static_cast<int32_t>(id_.size());
      id_.push_back(-1);
      edges_.emplace((static_cast<uint64_t>(node) << 8) | c, child);
    }
    node = child;
  }
  if (id_[node] < 0) id_[node] = id;
  first_[static_cast<unsigned char>(text[0])] = true;
  max_len_ = std::max(max_len_, text.size());
}

std::optional<SpecialMatcher::Match> SpecialMatcher::Find(std::string_view text, size_t from) const {
  for (size_t p = from; p < text.size(); ++p) {
    if (!first_[static_cast<unsigned char>(text[p])]) continue;
    std::optional<Match> best;
    int32_t node = 0;
    for (size_t k = p; k < text.size() && k - p < max_len_; ++k) {
      node = Child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (id_[node] >= 0) best = Match{p, k + 1 - p, id_[node]};
    }
    if (best) return best;
  }
  return std::nullopt;
}

}  // namespace llmrt
