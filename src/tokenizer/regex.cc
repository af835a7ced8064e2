#include "src/tokenizer/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "src/tokenizer/utf8.h"
#include "src/util/errors.h"

namespace llmrt {
namespace {

void InitOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
  });
}

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
    return absl::InvalidArgumentError(absl::StrCat("bad pre-tokenizer regex: ", reinterpret_cast<char*>(buf)));
  }
  r->reg_ = reg;
  return r;
}

Regex::~Regex() {
  if (reg_) onig_free(static_cast<OnigRegex>(reg_));
}

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  OnigRegion* region = onig_region_new();
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  size_t pos = 0;
  while (pos < text.size()) {
    int r = onig_search(static_cast<OnigRegex>(reg_), str, end, str + pos, end, region, ONIG_OPTION_NONE);
    if (r < 0) break;  // ONIG_MISMATCH (or an error: stop)
    const size_t b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
    if (e == b) {
      // An empty match: step over one character.
      const int n = Utf8SequenceLength(text, b);
      pos = b + (n > 0 ? n : 1);
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  onig_region_free(region, 1);
  return out;
}

}  // namespace llmrt
