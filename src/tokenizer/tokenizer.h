// Tokenizer: text <-> token ids in the formats the two families ship.
//  - Kimi: tiktoken.model (+ tokenizer_config.json for the special tokens), Kimi's regex, and
//    the chunking of Kimi's tokenization_kimi.py (see Encode).
//  - GLM: tokenizer.json (byte-level BPE with merges, Split regex pre-tokenizer, added tokens).
// Encoding matches tiktoken / Hugging Face tokenizers exactly; invalid UTF-8 input is first
// sanitized as Python's errors="replace" would.
//
// The files come from a model directory and are treated as hostile: every field is checked for
// presence, type and range (a wrong one is a FormatError naming the file and field), and the
// limits below bound what loading and encoding may allocate or spend.
#ifndef LLMRT_TOKENIZER_TOKENIZER_H_
#define LLMRT_TOKENIZER_TOKENIZER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/regex.h"
#include "src/tokenizer/special_matcher.h"

namespace llmrt {

enum class TokenizerFamily { kKimi, kGlm };

// Kimi K2's pre-tokenizer (docs/models.md section 5; tokenization_kimi.py).
extern const char kKimiPattern[];

// ---- limits (include/llmrt/llmrt.h states them for hosts) ----------------------------------
// The longest text Encode accepts and the longest text Decode or a chat template produces:
// 16 MiB, sixteen times the text of the longest context of these models (Kimi K2: 256K tokens,
// about 1 MiB). It also keeps every offset Oniguruma sees (an int) far from overflow.
inline constexpr size_t kMaxTextBytes = size_t{16} << 20;
// Token ids are below 2^21 (2,097,152): eight times the largest released vocabulary (262,144).
// Tables by id then cost at most tens of MiB however sparsely a file numbers its tokens.
inline constexpr int32_t kMaxTokenizerIds = 1 << 21;
// A special (added) token's text: at most 256 bytes (released ones are under 32), 1 MiB for all
// of them. The first bounds the matching work per text byte, the second the matcher's size.
inline constexpr size_t kMaxSpecialTokenBytes = 256;
inline constexpr size_t kMaxSpecialTextBytes = size_t{1} << 20;
// A pre-tokenizer pattern (tokenizer_config.json pat_str, tokenizer.json Split regex): at most
// 64 KiB (the released ones are about 400 bytes).
inline constexpr size_t kMaxPatternBytes = size_t{64} << 10;
// tokenization_kimi.py's chunking: the text is cut every 400,000 characters, then wherever a run
// of whitespace or of non-whitespace characters (Python's str.isspace) passes 25,000.
inline constexpr size_t kKimiMaxEncodeChars = 400'000;
inline constexpr size_t kKimiMaxRunChars = 25'000;

class Tokenizer {
 public:
  // Loads from a checkpoint directory (tiktoken.model or tokenizer.json, plus config.json's
  // vocab_size when present). NotFound when neither tokenizer file exists; IoError when one
  // exists but is not a readable regular file; FormatError for corrupt or inconsistent data;
  // UnsupportedError for valid but unhandled features; OutOfRange for the limits above.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);

  TokenizerFamily family() const { return family_; }
  // Number of ids: ranks/vocabulary plus special tokens (the largest id + 1).
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  // The model's id space: config.json's vocab_size when it is larger than vocab_size()
  // (released checkpoints pad the embedding, and a sampler can pick a padding id), else
  // vocab_size().
  int32_t model_vocab_size() const { return std::max(vocab_size(), model_vocab_size_); }
  // With parse_special, special tokens written in the text become their ids; otherwise their
  // text is encoded as ordinary text. OutOfRange for a text longer than kMaxTextBytes or when
  // the pre-tokenizer regex exhausts its budget (regex.h); never a partial result.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special) const;
  // The bytes of one id (a special token's text for specials). An id below model_vocab_size()
  // that has no text (a hole in the file's numbering, or the model's padding) is "": Hugging
  // Face tokenizers' decode skips such ids. nullopt for a negative id or one at or beyond
  // model_vocab_size().
  std::optional<std::string_view> Piece(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The id of a special token by its text, or -1.
  int32_t SpecialId(std::string_view text) const;
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }

 private:
  Tokenizer() = default;
  // The loaders (tokenizer_load.cc).
  absl::Status LoadTiktoken(const std::string& dir);
  absl::Status LoadKimiSpecials(const std::string& dir);
  absl::Status LoadTokenizerJson(const std::string& path);
  absl::Status LoadModelVocabSize(const std::string& dir);
  absl::Status AddSpecial(int32_t id, std::string text, const std::string& where);

  absl::Status EncodeWithSpecials(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;
  absl::Status EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const;
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;

  TokenizerFamily family_ = TokenizerFamily::kKimi;
  std::unique_ptr<Regex> regex_;
  std::string regex_source_;  // where the pattern came from, for error messages
  std::unique_ptr<TiktokenBpe> tiktoken_;
  std::unique_ptr<MergesBpe> merges_;
  std::vector<std::string> pieces_;  // by id; empty string for holes
  std::vector<bool> special_;
  absl::flat_hash_map<std::string, int32_t> special_ids_;  // text -> id (the first one listed)
  SpecialMatcher matcher_;
  size_t special_text_bytes_ = 0;
  int32_t model_vocab_size_ = 0;
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_TOKENIZER_H_
