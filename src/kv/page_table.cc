#include "src/kv/page_table.h"

namespace llmrt {

bool PageTable::Reserve(PagePool& pool, int64_t num_positions, int64_t page_size) {
  const int64_t needed = (num_positions + page_size - 1) / page_size;
  const size_t before = pages_.size();
  while (static_cast<int64_t>(pages_.size()) < needed) {
    auto ref = pool.Allocate();
    if (!ref) {
      while (pages_.size() > before) {
        pool.Free(pages_.back().page);
        pages_.pop_back();
      }
      return false;
    }
    pages_.push_back(*ref);
  }
  return true;
}

void PageTable::Truncate(PagePool& pool, int64_t num_positions, int64_t page_size) {
  const int64_t keep = (num_positions + page_size - 1) / page_size;
  while (static_cast<int64_t>(pages_.size()) > keep) {
    pool.Free(pages_.back().page);
    pages_.pop_back();
  }
}

}  // namespace llmrt
