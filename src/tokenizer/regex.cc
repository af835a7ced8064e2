#include "src/tokenizer/regex.h"

#include <oniguruma.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <new>

#include "absl/strings/str_cat.h"
#include "src/tokenizer/utf8.h"
#include "src/util/errors.h"

namespace llmrt {
namespace {

// Oniguruma counts "retries" (backtracks) per search call and fails a call with
// ONIGERR_RETRY_LIMIT_IN_*_OVER at a given limit; it cannot report how many a successful call
// used. The budget is kept by charging only the calls that fail at their limit:
//  - each search starts with a limit of kFirstRetryLimit; a call that hits it is charged that
//    limit and retried from the same position with twice the limit (so a successful call did
//    at most twice the work of the failed attempts before it, or kFirstRetryLimit);
//  - the charges of one FindAll may not exceed kRetryBudgetBase + kRetryBudgetPerByte * bytes.
// Backtracking is then at most about kFirstRetryLimit per match plus three times the budget:
// linear in the text whatever the pattern (a catastrophic pattern over 1 MiB fails after about
// 2 s). The released patterns need far less: at most 26 retries for any match of the King James
// held-out text, and about 2 per byte charged for a long whitespace run (`\s*[\r\n]+` backtracks
// over it before `\s+(?!\S)` matches), the worst of the runs of letters, capitals, digits,
// punctuation, marks, CJK and whitespace tried. What the budget cannot see is work Oniguruma
// does without backtracking (a lookahead or a greedy run that fails and is retried from the next
// position): a hostile pattern can still cost time superlinear in one Kimi chunk or GLM text.
constexpr unsigned long kFirstRetryLimit = 128;
constexpr uint64_t kRetryBudgetBase = uint64_t{1} << 16;
constexpr uint64_t kRetryBudgetPerByte = 16;
// The backtracking stack holds about one 32-byte entry per byte of the match in progress (a
// greedy repeat pushes one per iteration). 2^23 entries (256 MiB) allows one pre-token of about
// 8 MiB, more than a Kimi chunk (25,000 characters, see tokenizer.cc) or any real word.
constexpr unsigned int kMaxStackEntries = 1u << 23;

void InitOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
  });
}

std::string OnigMessage(int code) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  onig_error_code_to_str(buf, code);
  return reinterpret_cast<char*>(buf);
}

struct MatchParamDeleter {
  void operator()(OnigMatchParam* p) const { onig_free_match_param(p); }
};
struct RegionDeleter {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  InitOnce();
  std::unique_ptr<Regex> r(new Regex());
  OnigRegex reg = nullptr;
  OnigErrorInfo einfo;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &einfo);
  if (rc != ONIG_NORMAL) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(buf, rc, &einfo);
    return FormatError(absl::StrCat("bad pre-tokenizer regex: ", reinterpret_cast<char*>(buf)));
  }
  r->reg_ = reg;
  return r;
}

Regex::~Regex() {
  if (reg_) onig_free(static_cast<OnigRegex>(reg_));
}

absl::Status Regex::FindAll(std::string_view text, absl::FunctionRef<void(size_t, size_t)> on_match) const {
  std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  std::unique_ptr<OnigMatchParam, MatchParamDeleter> param(onig_new_match_param());
  if (region == nullptr || param == nullptr) throw std::bad_alloc();
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  uint64_t budget = kRetryBudgetBase + kRetryBudgetPerByte * text.size();
  onig_initialize_match_param(param.get());
  onig_set_match_stack_limit_size_of_match_param(param.get(), kMaxStackEntries);
  unsigned long limit = kFirstRetryLimit, param_limit = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (limit != param_limit) {
      onig_set_retry_limit_in_match_of_match_param(param.get(), limit);
      onig_set_retry_limit_in_search_of_match_param(param.get(), limit);
      param_limit = limit;
    }
    const int r = onig_search_with_param(static_cast<OnigRegex>(reg_), str, end, str + pos, end, region.get(),
                                         ONIG_OPTION_NONE, param.get());
    if (r == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER || r == ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER) {
      if (limit >= budget) {
        return absl::OutOfRangeError(absl::StrCat(
            "the pre-tokenizer regex needs more than its backtracking budget of ",
            kRetryBudgetBase + kRetryBudgetPerByte * text.size(), " steps for ", text.size(),
            " bytes of text (stopped at byte ", pos, "); the pattern is pathological"));
      }
      budget -= limit;
      limit = static_cast<unsigned long>(std::min<uint64_t>(uint64_t{limit} * 2, budget));
      continue;
    }
    if (r == ONIG_MISMATCH) break;
    if (r == ONIGERR_MATCH_STACK_LIMIT_OVER) {
      return absl::OutOfRangeError(absl::StrCat("the pre-tokenizer regex needs more than ", kMaxStackEntries,
                                                " backtracking stack entries at byte ", pos,
                                                " (one pre-token of several MiB)"));
    }
    if (r < 0) return FormatError(absl::StrCat("the pre-tokenizer regex failed at byte ", pos, ": ", OnigMessage(r)));
    limit = kFirstRetryLimit;
    const size_t b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
    if (e == b) {
      if (b >= text.size()) break;
      // An empty match: step over one character.
      const int n = Utf8SequenceLength(text, b);
      pos = b + (n > 0 ? n : 1);
      continue;
    }
    on_match(b, e);
    pos = e;
  }
  return absl::OkStatus();
}

}  // namespace llmrt
