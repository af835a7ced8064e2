// Encoding: specials, Kimi's chunking, the pre-tokenizer regex and BPE. Loading is in
// tokenizer_load.cc.
#include "src/tokenizer/tokenizer.h"

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "src/tokenizer/utf8.h"
#include "src/util/status.h"

namespace llmrt {

const char kKimiPattern[] =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// Python's str.isspace(): the code points whose bidirectional class is WS, B or S, or whose
// category is Zs (what tokenization_kimi.py's splitter tests).
bool IsPythonSpace(uint32_t cp) {
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
  if (cp < 0x85) return false;
  if (cp <= 0xa0) return cp == 0x85 || cp == 0xa0;
  if (cp < 0x1680) return false;
  return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

// The code point of the valid n-byte UTF-8 sequence at s[i].
uint32_t CodePointAt(std::string_view s, size_t i, int n) {
  uint32_t cp = static_cast<unsigned char>(s[i]);
  if (n == 1) return cp;
  cp &= 0xffu >> (n + 1);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return cp;
}

// The pieces tokenization_kimi.py's encode() hands to tiktoken one by one: the text is cut every
// kKimiMaxEncodeChars characters, then each cut wherever a run of whitespace or of
// non-whitespace characters passes kKimiMaxRunChars (its _split_whitespaces_or_nonwhitespaces,
// written for tiktoken's stack overflow on very long words, openai/tiktoken#195). Special tokens
// and regex splits are found inside each piece, so matching this keeps ids equal to Kimi's
// tokenizer and bounds every pre-token at 25,000 characters. REQUIRES: text is valid UTF-8.
absl::Status ForEachKimiChunk(std::string_view text, absl::FunctionRef<absl::Status(std::string_view)> fn) {
  size_t i = 0;
  while (i < text.size()) {
    size_t chars = 0, run = 0, slice = i;
    bool run_is_space = false;
    while (i < text.size() && chars < kKimiMaxEncodeChars) {
      int n = Utf8SequenceLength(text, i);
      if (n <= 0) n = 1;  // not reached for sanitized text
      const bool space = IsPythonSpace(CodePointAt(text, i, n));
      if (chars == 0 || space != run_is_space) {
        run = 1;
        run_is_space = space;
      } else if (++run > kKimiMaxRunChars) {
        LLMRT_RETURN_IF_ERROR(fn(text.substr(slice, i - slice)));
        slice = i;
        run = 1;
      }
      i += static_cast<size_t>(n);
      ++chars;
    }
    LLMRT_RETURN_IF_ERROR(fn(text.substr(slice, i - slice)));
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<std::string_view> Tokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= model_vocab_size()) return std::nullopt;
  if (id >= vocab_size()) return std::string_view();  // the model's padding: no text
  return std::string_view(pieces_[id]);
}

bool Tokenizer::IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

int32_t Tokenizer::SpecialId(std::string_view text) const {
  auto it = special_ids_.find(absl::string_view(text.data(), text.size()));
  return it == special_ids_.end() ? -1 : it->second;
}

void Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (tiktoken_) {
    tiktoken_->Encode(piece, out);
  } else {
    merges_->Encode(piece, out);
  }
}

absl::Status Tokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const {
  size_t last = 0;
  absl::Status st = regex_->FindAll(text, [&](size_t b, size_t e) {
    // Hugging Face's Split(Isolated) keeps unmatched gaps as pieces; tiktoken drops them
    // (its patterns leave none).
    if (b > last && merges_) EncodePiece(text.substr(last, b - last), out);
    EncodePiece(text.substr(b, e - b), out);
    last = e;
  });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(regex_source_, ": ", st.message()));
  if (last < text.size() && merges_) EncodePiece(text.substr(last), out);
  return absl::OkStatus();
}

absl::Status Tokenizer::EncodeWithSpecials(std::string_view text, bool parse_special, std::vector<int32_t>* out) const {
  size_t pos = 0;
  while (pos < text.size()) {
    const std::optional<SpecialMatcher::Match> m =
        parse_special ? matcher_.Find(text, pos) : std::optional<SpecialMatcher::Match>();
    if (!m) return EncodeOrdinary(text.substr(pos), out);
    LLMRT_RETURN_IF_ERROR(EncodeOrdinary(text.substr(pos, m->pos - pos), out));
    out->push_back(m->id);
    pos = m->pos + m->len;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view raw, bool parse_special) const {
  if (raw.size() > kMaxTextBytes) {
    return absl::OutOfRangeError(
        absl::StrCat("a text of ", raw.size(), " bytes is longer than the ", kMaxTextBytes, "-byte limit"));
  }
  const std::string text = Utf8Sanitize(raw);
  std::vector<int32_t> out;
  if (family_ == TokenizerFamily::kKimi) {
    LLMRT_RETURN_IF_ERROR(
        ForEachKimiChunk(text, [&](std::string_view chunk) { return EncodeWithSpecials(chunk, parse_special, &out); }));
  } else {
    LLMRT_RETURN_IF_ERROR(EncodeWithSpecials(text, parse_special, &out));
  }
  return out;
}

}  // namespace llmrt
