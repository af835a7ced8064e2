#include "src/tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/container/inlined_vector.h"

namespace llmrt {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

// Most pieces are a few bytes: their list and heap live on the stack.
constexpr size_t kInline = 48;

// A node of the linked list of parts (tiktoken) or symbols (tokenizers) of one piece, at the
// byte offset where it starts.
struct Part {
  uint32_t next, prev;  // neighbours' offsets: kNone at the ends
  int32_t rank;         // rank of merging this part with the next one, or kNoRank
  int32_t id;           // MergesBpe: the symbol's token id
  bool gone;            // merged into its left neighbour
};

// A candidate merge in a min-heap ordered by rank, then by offset (leftmost first): the order of
// both references (tiktoken takes the first lowest rank in a left-to-right scan; tokenizers'
// Merge orders its heap by (rank, pos)). Offsets are below 2^32: texts are limited far below.
// A popped candidate is current iff its part is not gone and still has that rank: a rank names
// one tiktoken byte string or one merge rule, so with the part's start fixed it names one pair
// (tokenizers compares the rule's new id instead, which the same argument makes equivalent).
struct Candidate {
  uint64_t key;    // rank << 32 | offset
  int32_t new_id;  // MergesBpe: the id the rule produces
  bool operator>(const Candidate& o) const { return key > o.key; }
};

class CandidateHeap {
 public:
  void Push(int32_t rank, uint32_t pos, int32_t new_id = 0) {
    heap_.push_back({(static_cast<uint64_t>(rank) << 32) | pos, new_id});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  bool empty() const { return heap_.empty(); }
  Candidate Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const Candidate c = heap_.back();
    heap_.pop_back();
    return c;
  }
  static int32_t Rank(const Candidate& c) { return static_cast<int32_t>(c.key >> 32); }
  static uint32_t Pos(const Candidate& c) { return static_cast<uint32_t>(c.key); }

 private:
  absl::InlinedVector<Candidate, kInline> heap_;
};

}  // namespace

TiktokenBpe::TiktokenBpe(absl::flat_hash_map<std::string, int32_t> ranks) : ranks_(std::move(ranks)) {
  for (const auto& [bytes, rank] : ranks_) max_token_bytes_ = std::max(max_token_bytes_, bytes.size());
}

int32_t TiktokenBpe::Rank(std::string_view bytes) const {
  if (bytes.size() > max_token_bytes_) return kNoRank;
  auto it = ranks_.find(absl::string_view(bytes.data(), bytes.size()));
  return it == ranks_.end() ? kNoRank : it->second;
}

void TiktokenBpe::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  if (const int32_t whole = Rank(piece); whole != kNoRank) {
    out->push_back(whole);
    return;
  }
  // Part i covers [i, next) with next == n for the last part; rank is tiktoken's parts[i].1,
  // the rank of the part's bytes concatenated with its successor's.
  absl::InlinedVector<Part, kInline> parts(n);
  for (size_t i = 0; i < n; ++i) {
    parts[i] = Part{static_cast<uint32_t>(i + 1), i == 0 ? kNone : static_cast<uint32_t>(i - 1), kNoRank, 0, false};
  }
  auto pair_rank = [&](uint32_t i) {
    const uint32_t j = parts[i].next;
    return j >= n ? kNoRank : Rank(piece.substr(i, parts[j].next - i));
  };
  CandidateHeap heap;
  for (uint32_t i = 0; i + 1 < n; ++i) {
    parts[i].rank = pair_rank(i);
    if (parts[i].rank != kNoRank) heap.Push(parts[i].rank, i);
  }
  while (!heap.empty()) {
    const Candidate c = heap.Pop();
    const uint32_t i = CandidateHeap::Pos(c);
    if (parts[i].gone || parts[i].rank != CandidateHeap::Rank(c)) continue;  // superseded
    const uint32_t j = parts[i].next;
    parts[j].gone = true;
    parts[i].next = parts[j].next;
    if (parts[i].next < n) parts[parts[i].next].prev = i;
    if (const uint32_t p = parts[i].prev; p != kNone) {
      parts[p].rank = pair_rank(p);
      if (parts[p].rank != kNoRank) heap.Push(parts[p].rank, p);
    }
    parts[i].rank = pair_rank(i);
    if (parts[i].rank != kNoRank) heap.Push(parts[i].rank, i);
  }
  for (uint32_t i = 0; i < n; i = parts[i].next) out->push_back(Rank(piece.substr(i, parts[i].next - i)));
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
  b.rules_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    auto l = vocab.find(merges[r].first), rr = vocab.find(merges[r].second);
    auto m = vocab.find(merges[r].first + merges[r].second);
    if (l == vocab.end() || rr == vocab.end() || m == vocab.end()) {
      *error = "merge " + std::to_string(r) + " names a token missing from the vocabulary";
      return b;
    }
    b.rules_.insert_or_assign(Key(l->second, rr->second), Rule{static_cast<int32_t>(r), m->second});
  }
  return b;
}

const MergesBpe::Rule* MergesBpe::Find(int32_t a, int32_t b) const {
  auto it = rules_.find(Key(a, b));
  return it == rules_.end() ? nullptr : &it->second;
}

void MergesBpe::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  // tokenizers' Word::merge_all: symbols in a linked list (a merged symbol keeps the left one's
  // slot), a heap of (rank, pos, new_id) candidates.
  absl::InlinedVector<Part, kInline> sym(n);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = Part{i + 1 < n ? static_cast<uint32_t>(i + 1) : kNone, i == 0 ? kNone : static_cast<uint32_t>(i - 1),
                  kNoRank, byte_id_[static_cast<unsigned char>(piece[i])], false};
  }
  CandidateHeap heap;
  // Sets sym[i].rank from the rule for (sym[i], its successor), queueing it when there is one.
  auto update = [&](uint32_t i) {
    const Rule* r = sym[i].next == kNone ? nullptr : Find(sym[i].id, sym[sym[i].next].id);
    sym[i].rank = r == nullptr ? kNoRank : r->rank;
    if (r != nullptr) heap.Push(r->rank, i, r->id);
  };
  for (uint32_t i = 0; i + 1 < n; ++i) update(i);
  while (!heap.empty()) {
    const Candidate c = heap.Pop();
    const uint32_t i = CandidateHeap::Pos(c);
    if (sym[i].gone || sym[i].rank != CandidateHeap::Rank(c)) continue;  // superseded
    const uint32_t j = sym[i].next;
    sym[i].id = c.new_id;
    sym[j].gone = true;
    sym[i].next = sym[j].next;
    if (sym[i].next != kNone) sym[sym[i].next].prev = i;
    if (sym[i].prev != kNone) update(sym[i].prev);
    update(i);
  }
  for (uint32_t i = 0; i != kNone; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace llmrt
