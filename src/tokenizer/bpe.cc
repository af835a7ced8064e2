#include "src/tokenizer/bpe.h"

#include <limits>

namespace llmrt {

int32_t TiktokenBpe::Rank(std::string_view bytes) const {
  auto it = ranks_.find(absl::string_view(bytes.data(), bytes.size()));
  return it == ranks_.end() ? std::numeric_limits<int32_t>::max() : it->second;
}

void TiktokenBpe::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (auto it = ranks_.find(absl::string_view(piece.data(), piece.size())); it != ranks_.end()) {
    out->push_back(it->second);
    return;
  }
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(Rank(piece));  // every byte has a rank in a valid tiktoken file
    return;
  }
  // parts[i] = (start, rank of merging part i with part i+1), as tiktoken's _byte_pair_merge.
  std::vector<std::pair<size_t, int32_t>> parts;
  parts.reserve(n + 1);
  for (size_t i = 0; i + 1 < n; ++i) parts.push_back({i, Rank(piece.substr(i, 2))});
  parts.push_back({n - 1, kMax});
  parts.push_back({n, kMax});
  auto rank_at = [&](size_t i) {
    if (i + 3 < parts.size()) return Rank(piece.substr(parts[i].first, parts[i + 3].first - parts[i].first));
    return kMax;
  };
  for (;;) {
    int32_t best = kMax;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].second < best) {
        best = parts[i].second;
        bi = i;
      }
    }
    if (best == kMax) break;
    if (bi > 0) parts[bi - 1].second = rank_at(bi - 1);
    parts[bi].second = rank_at(bi);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(bi) + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    out->push_back(Rank(piece.substr(parts[i].first, parts[i + 1].first - parts[i].first)));
  }
}

MergesBpe MergesBpe::Build(const absl::flat_hash_map<std::string, int32_t>& vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, std::string* error) {
  MergesBpe b;
  for (int c = 0; c < 256; ++c) {
    auto it = vocab.find(std::string(1, static_cast<char>(c)));
    if (it == vocab.end()) {
      *error = "the vocabulary lacks byte " + std::to_string(c);
      return b;
    }
    b.byte_id_[c] = it->second;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    auto l = vocab.find(merges[r].first), rr = vocab.find(merges[r].second);
    auto m = vocab.find(merges[r].first + merges[r].second);
    if (l == vocab.end() || rr == vocab.end() || m == vocab.end()) {
      *error = "merge " + std::to_string(r) + " names a token missing from the vocabulary";
      return b;
    }
    b.rules_.try_emplace(Key(l->second, rr->second), Rule{static_cast<int32_t>(r), m->second});
  }
  return b;
}

void MergesBpe::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  std::vector<int32_t> sym(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  // Repeatedly apply the lowest-ranked rule among adjacent pairs, leftmost first (the order of
  // tokenizers' Word::merge_all priority queue).
  for (;;) {
    int32_t best = std::numeric_limits<int32_t>::max(), id = -1;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rules_.find(Key(sym[i], sym[i + 1]));
      if (it != rules_.end() && it->second.rank < best) {
        best = it->second.rank;
        id = it->second.id;
        bi = i;
      }
    }
    if (id < 0) break;
    sym[bi] = id;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(bi) + 1);
  }
  out->insert(out->end(), sym.begin(), sym.end());
}

}  // namespace llmrt
