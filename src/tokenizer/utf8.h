// UTF-8 helpers for tokenization and detokenization.
#ifndef LLMRT_TOKENIZER_UTF8_H_
#define LLMRT_TOKENIZER_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace llmrt {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if the bytes there are not
// a valid sequence (bad lead byte, bad continuation, overlong, surrogate, > U+10FFFF), or -1 if
// they are a valid but incomplete prefix cut off by the end of s.
int Utf8SequenceLength(std::string_view s, size_t i);

// Replaces every maximal invalid subsequence by U+FFFD, as Python's
// bytes.decode("utf-8", errors="replace") does.
std::string Utf8Sanitize(std::string_view s);

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_UTF8_H_
