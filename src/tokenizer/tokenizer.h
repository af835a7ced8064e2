// Tokenizer: text <-> token ids in the formats the two families ship.
//  - Kimi: tiktoken.model (+ tokenizer_config.json for the special tokens), Kimi's regex.
//  - GLM: tokenizer.json (byte-level BPE with merges, Split regex pre-tokenizer, added tokens).
// Encoding matches tiktoken / Hugging Face tokenizers exactly; invalid UTF-8 input is first
// sanitized as Python's errors="replace" would.
#ifndef LLMRT_TOKENIZER_TOKENIZER_H_
#define LLMRT_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/regex.h"

namespace llmrt {

enum class TokenizerFamily { kKimi, kGlm };

// Kimi K2's pre-tokenizer (MODELS.md section 5; tokenization_kimi.py).
extern const char kKimiPattern[];

class Tokenizer {
 public:
  // Loads from a checkpoint directory (tiktoken.model or tokenizer.json).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);

  TokenizerFamily family() const { return family_; }
  // Number of ids: ranks/vocabulary plus special tokens.
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  // With parse_special, special tokens written in the text become their ids; otherwise their
  // text is encoded as ordinary text.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special) const;
  // The bytes of one id (a special token's text for specials); nullopt for an unknown id.
  std::optional<std::string_view> Piece(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The id of a special token by its text, or -1.
  int32_t SpecialId(std::string_view text) const;
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }

 private:
  Tokenizer() = default;
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const;
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;

  TokenizerFamily family_ = TokenizerFamily::kKimi;
  std::unique_ptr<Regex> regex_;
  std::unique_ptr<TiktokenBpe> tiktoken_;
  std::unique_ptr<MergesBpe> merges_;
  std::vector<std::string> pieces_;  // by id; empty string for holes
  std::vector<bool> special_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  bool special_first_[256] = {};  // bytes that start some special token
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_TOKENIZER_H_
