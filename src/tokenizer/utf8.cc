#include "src/tokenizer/utf8.h"

namespace llmrt {

int Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlongs
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -1;
    const unsigned char d = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
    if (d < l || d > h) return 0;
  }
  return n;
}

std::string Utf8Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int n = Utf8SequenceLength(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    // Python's "replace" emits one U+FFFD per maximal invalid prefix: a valid lead byte and
    // the continuation bytes that fit it count as one unit.
    size_t j = i + 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xc2 && c <= 0xf4) {
      for (size_t k = i + 1; k < s.size() && k < i + 4; ++k) {
        std::string_view prefix = s.substr(i, k - i + 1);
        const int m = Utf8SequenceLength(prefix, 0);
        if (m == -1) {
          j = k + 1;  // still a valid prefix
        } else {
          break;
        }
      }
    }
    out.append("\xef\xbf\xbd");
    i = j;
  }
  return out;
}

}  // namespace llmrt
