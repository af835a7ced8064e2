#include "src/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "src/tokenizer/utf8.h"
#include "src/util/errors.h"
#include "src/util/file.h"
#include "src/util/status.h"

namespace llmrt {

const char kKimiPattern[] =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using json = nlohmann::json;

// Kimi K2's named special tokens, by offset from the first special id.
constexpr std::pair<int, const char*> kKimiSpecials[] = {
    {0, "[BOS]"}, {1, "[EOS]"}, {2, "<|im_end|>"}, {3, "<|im_user|>"}, {4, "<|im_assistant|>"},
    {10, "<|im_system|>"}, {17, "<|im_middle|>"}, {22, "<think>"}, {23, "</think>"}};

// GPT-2's ByteLevel alphabet, inverted: printable code point -> byte.
absl::flat_hash_map<uint32_t, uint8_t> ByteLevelDecoder() {
  absl::flat_hash_map<uint32_t, uint8_t> m;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    m[printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++)] = static_cast<uint8_t>(b);
  }
  return m;
}

// Maps a ByteLevel string (UTF-8 of alphabet code points) back to raw bytes.
bool FromByteLevel(const absl::flat_hash_map<uint32_t, uint8_t>& dec, std::string_view s, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    const int n = Utf8SequenceLength(s, i);
    if (n <= 0) return false;
    uint32_t cp = static_cast<unsigned char>(s[i]);
    if (n > 1) {
      cp &= (0xff >> (n + 1));
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    }
    auto it = dec.find(cp);
    if (it == dec.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += n;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const std::string tk = dir + "/tiktoken.model", tj = dir + "/tokenizer.json";
  auto add_special = [&](int32_t id, const std::string& text) {
    if (id >= static_cast<int32_t>(t->pieces_.size())) {
      t->pieces_.resize(id + 1);
      t->special_.resize(id + 1, false);
    }
    t->pieces_[id] = text;
    t->special_[id] = true;
    t->specials_.push_back({text, id});
  };
  if (IsRegularFile(tk)) {
    t->family_ = TokenizerFamily::kKimi;
    LLMRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(tk));
    absl::flat_hash_map<std::string, int32_t> ranks;
    int line_no = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      ++line_no;
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      std::string bytes;
      int32_t rank = 0;
      if (f.size() != 2 || !absl::Base64Unescape(f[0], &bytes) || !absl::SimpleAtoi(f[1], &rank) || rank < 0 ||
          rank > (1 << 24)) {
        return FormatError(absl::StrCat(tk, ": line ", line_no, " is not \"base64 rank\""));
      }
      if (rank >= static_cast<int32_t>(t->pieces_.size())) t->pieces_.resize(rank + 1);
      t->pieces_[rank] = bytes;
      ranks[bytes] = rank;
    }
    for (int b = 0; b < 256; ++b) {
      if (!ranks.count(std::string(1, static_cast<char>(b)))) {
        return FormatError(absl::StrCat(tk, ": byte ", b, " has no rank"));
      }
    }
    const int32_t n = static_cast<int32_t>(t->pieces_.size());
    t->special_.assign(n, false);
    std::string pattern = kKimiPattern;
    // Specials: tokenizer_config.json's added_tokens_decoder when present, else Kimi's layout.
    const std::string cfg_path = dir + "/tokenizer_config.json";
    bool have_added = false;
    if (IsRegularFile(cfg_path)) {
      LLMRT_ASSIGN_OR_RETURN(std::string cfg_text, ReadTextFile(cfg_path));
      json cfg = json::parse(cfg_text, nullptr, false);
      if (cfg.is_discarded() || !cfg.is_object()) return FormatError(absl::StrCat(cfg_path, ": not valid JSON"));
      if (cfg.contains("pat_str") && cfg["pat_str"].is_string()) pattern = cfg["pat_str"].get<std::string>();
      if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
        for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it) {
          int32_t id = 0;
          if (!absl::SimpleAtoi(it.key(), &id) || id < 0 || id > (1 << 24) || !it.value().contains("content")) {
            return FormatError(absl::StrCat(cfg_path, ": bad added_tokens_decoder entry ", it.key()));
          }
          add_special(id, it.value()["content"].get<std::string>());
          have_added = true;
        }
      }
    }
    if (!have_added) {
      for (int i = 0; i < 256; ++i) add_special(n + i, absl::StrCat("<|reserved_token_", i, "|>"));
      for (const auto& [off, name] : kKimiSpecials) {
        t->pieces_[n + off] = name;
      }
      t->specials_.clear();
      for (int i = 0; i < 256; ++i) t->specials_.push_back({t->pieces_[n + i], n + i});
    }
    t->bos_ = t->SpecialId("[BOS]");
    t->eos_ = t->SpecialId("[EOS]");
    LLMRT_ASSIGN_OR_RETURN(t->regex_, Regex::Compile(pattern));
    t->tiktoken_ = std::make_unique<TiktokenBpe>(std::move(ranks));
  } else if (IsRegularFile(tj)) {
    t->family_ = TokenizerFamily::kGlm;
    LLMRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(tj));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object()) {
      return FormatError(absl::StrCat(tj, ": not a tokenizer.json"));
    }
    const json& m = j["model"];
    if (m.value("type", "") != "BPE" || !m.contains("vocab") || !m.contains("merges")) {
      return UnsupportedError(absl::StrCat(tj, ": only byte-level BPE models are supported"));
    }
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      return UnsupportedError(absl::StrCat(tj, ": normalizers are not supported"));
    }
    if (m.value("ignore_merges", false)) {
      return UnsupportedError(absl::StrCat(tj, ": ignore_merges=true is not supported"));
    }
    // Pre-tokenizer: Split(regex, Isolated) then ByteLevel(use_regex=false).
    std::string pattern;
    const json& pt = j["pre_tokenizer"];
    const json* list = nullptr;
    if (pt.is_object() && pt.value("type", "") == "Sequence") list = &pt["pretokenizers"];
    bool byte_level = false;
    if (list != nullptr && list->is_array()) {
      for (const auto& p : *list) {
        const std::string type = p.value("type", "");
        if (type == "Split" && p.contains("pattern") && p["pattern"].contains("Regex") &&
            p.value("behavior", "") == "Isolated" && !p.value("invert", false)) {
          pattern = p["pattern"]["Regex"].get<std::string>();
        } else if (type == "ByteLevel" && !p.value("use_regex", true) && !p.value("add_prefix_space", false)) {
          byte_level = true;
        } else {
          return UnsupportedError(absl::StrCat(tj, ": pre-tokenizer step ", type, " is not supported"));
        }
      }
    }
    if (pattern.empty() || !byte_level) {
      return UnsupportedError(absl::StrCat(tj, ": expected a Split regex + ByteLevel pre-tokenizer"));
    }
    LLMRT_ASSIGN_OR_RETURN(t->regex_, Regex::Compile(pattern));
    const auto dec = ByteLevelDecoder();
    absl::flat_hash_map<std::string, int32_t> vocab;
    std::string bytes;
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      if (!it.value().is_number_integer() || !FromByteLevel(dec, it.key(), &bytes)) {
        return FormatError(absl::StrCat(tj, ": bad vocab entry"));
      }
      const int32_t id = it.value().get<int32_t>();
      if (id < 0 || id > (1 << 24)) return FormatError(absl::StrCat(tj, ": bad vocab id"));
      if (id >= static_cast<int32_t>(t->pieces_.size())) t->pieces_.resize(id + 1);
      t->pieces_[id] = bytes;
      vocab[bytes] = id;
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& mg : m["merges"]) {
      std::string a, b;
      std::string l, r;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) return FormatError(absl::StrCat(tj, ": bad merge"));
        l = s.substr(0, sp);
        r = s.substr(sp + 1);
      } else if (mg.is_array() && mg.size() == 2) {
        l = mg[0].get<std::string>();
        r = mg[1].get<std::string>();
      } else {
        return FormatError(absl::StrCat(tj, ": bad merge"));
      }
      if (!FromByteLevel(dec, l, &a) || !FromByteLevel(dec, r, &b)) return FormatError(absl::StrCat(tj, ": bad merge"));
      merges.push_back({a, b});
    }
    std::string error;
    t->merges_ = std::make_unique<MergesBpe>(MergesBpe::Build(vocab, merges, &error));
    if (!error.empty()) return FormatError(absl::StrCat(tj, ": ", error));
    t->special_.assign(t->pieces_.size(), false);
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        if (!a.contains("id") || !a.contains("content")) return FormatError(absl::StrCat(tj, ": bad added token"));
        add_special(a["id"].get<int32_t>(), a["content"].get<std::string>());
      }
    }
    t->eos_ = t->SpecialId("<|endoftext|>");
  } else {
    return absl::NotFoundError(absl::StrCat(dir, ": no tiktoken.model or tokenizer.json"));
  }
  t->special_.resize(t->pieces_.size(), false);
  std::sort(t->specials_.begin(), t->specials_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [s, id] : t->specials_) {
    if (!s.empty()) t->special_first_[static_cast<unsigned char>(s[0])] = true;
  }
  return t;
}

std::optional<std::string_view> Tokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return std::string_view(pieces_[id]);
}

bool Tokenizer::IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

int32_t Tokenizer::SpecialId(std::string_view text) const {
  for (const auto& [s, id] : specials_) {
    if (s == text) return id;
  }
  return -1;
}

void Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (tiktoken_) {
    tiktoken_->Encode(piece, out);
  } else {
    merges_->Encode(piece, out);
  }
}

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const {
  size_t last = 0;
  for (const auto& [b, e] : regex_->FindAll(text)) {
    // Hugging Face's Split(Isolated) keeps unmatched gaps as pieces; tiktoken drops them
    // (its patterns leave none).
    if (b > last && merges_) EncodePiece(text.substr(last, b - last), out);
    EncodePiece(text.substr(b, e - b), out);
    last = e;
  }
  if (last < text.size() && merges_) EncodePiece(text.substr(last), out);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view raw, bool parse_special) const {
  const std::string text = Utf8Sanitize(raw);
  std::vector<int32_t> out;
  std::string_view rest = text;
  while (!rest.empty()) {
    // The leftmost special token, the longest at that position (specials_ is longest first).
    size_t at = std::string_view::npos;
    int32_t id = -1;
    size_t len = 0;
    if (parse_special) {
      for (size_t p = 0; p < rest.size() && id < 0; ++p) {
        if (!special_first_[static_cast<unsigned char>(rest[p])]) continue;
        for (const auto& [s, sid] : specials_) {
          if (rest.compare(p, s.size(), s) == 0) {
            at = p;
            id = sid;
            len = s.size();
            break;
          }
        }
      }
    }
    if (id < 0) {
      EncodeOrdinary(rest, &out);
      break;
    }
    EncodeOrdinary(rest.substr(0, at), &out);
    out.push_back(id);
    rest.remove_prefix(at + len);
  }
  return out;
}

}  // namespace llmrt
