// Loading tokenizers from a model directory. Every file here may be hostile: JSON is parsed
// only after a bounded pass (depth, number of values), every field is checked for presence and
// type before use (a const nlohmann::json's operator[] on a missing key is undefined behaviour,
// get<T>() on the wrong type throws), and every id is checked against kMaxTokenizerIds before
// anything is sized by it.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/escaping.h"
#include "nlohmann/json.hpp"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/utf8.h"
#include "src/util/errors.h"
#include "src/util/file.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

using json = nlohmann::json;

// nlohmann's DOM costs tens of bytes per value and more per nesting level, so a 128 MiB file of
// `[[[[...` or of tiny values would cost gigabytes before a field is read. A first pass without
// a DOM refuses such files: at most 64 levels (tokenizer files use 5) and 2^23 values (GLM-4.5's
// tokenizer.json has about 1.1 million: 151K vocabulary entries, 318K merges as pairs).
constexpr int kMaxJsonDepth = 64;
constexpr uint64_t kMaxJsonValues = uint64_t{1} << 23;

class BoundedSax : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    error = absl::StrCat("not valid JSON at byte ", position, " (", e.what(), ")");
    return false;
  }

  std::string error;  // why the pass stopped ("" when it did not)
  bool limit = false;  // stopped at a limit rather than at a syntax error

 private:
  bool Value() {
    if (++values_ <= kMaxJsonValues) return true;
    error = absl::StrCat("more than ", kMaxJsonValues, " JSON values");
    limit = true;
    return false;
  }
  bool Open() {
    if (!Value()) return false;
    if (++depth_ <= kMaxJsonDepth) return true;
    error = absl::StrCat("JSON nested deeper than ", kMaxJsonDepth, " levels");
    limit = true;
    return false;
  }
  bool Close() {
    --depth_;
    return true;
  }
  uint64_t values_ = 0;
  int depth_ = 0;
};

// Reads and parses a JSON file whose top level must be an object.
absl::StatusOr<json> ReadJsonObject(const std::string& path) {
  LLMRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  BoundedSax sax;
  if (!json::sax_parse(text, &sax) || !sax.error.empty()) {
    const std::string msg = absl::StrCat(path, ": ", sax.error.empty() ? "not valid JSON" : sax.error);
    return sax.limit ? absl::OutOfRangeError(msg) : FormatError(msg);
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return FormatError(absl::StrCat(path, ": not valid JSON"));
  if (!j.is_object()) return FormatError(absl::StrCat(path, ": the top level is not a JSON object"));
  return j;
}

// obj[key] when obj is an object holding key with a non-null value, else nullptr. JSON files
// write "not set" as either a missing key or null.
const json* Field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status WrongType(const std::string& file, const std::string& field, const char* want) {
  return FormatError(absl::StrCat(file, ": ", field, " must be ", want));
}

absl::StatusOr<std::string> GetString(const json& v, const std::string& file, const std::string& field) {
  if (!v.is_string()) return WrongType(file, field, "a string");
  return v.get<std::string>();
}

absl::StatusOr<std::string> OptionalString(const json& obj, const char* key, const std::string& file,
                                           const std::string& field) {
  const json* v = Field(obj, key);
  if (v == nullptr) return std::string();
  return GetString(*v, file, field);
}

absl::StatusOr<bool> OptionalBool(const json& obj, const char* key, bool dflt, const std::string& file,
                                  const std::string& field) {
  const json* v = Field(obj, key);
  if (v == nullptr) return dflt;
  if (!v->is_boolean()) return WrongType(file, field, "true or false");
  return v->get<bool>();
}

// A token id: an integer in [0, kMaxTokenizerIds).
absl::StatusOr<int32_t> CheckId(int64_t id, bool too_large, const std::string& file, const std::string& field) {
  if (id < 0) return FormatError(absl::StrCat(file, ": ", field, " is negative (", id, ")"));
  if (too_large || id >= kMaxTokenizerIds) {
    return absl::OutOfRangeError(absl::StrCat(file, ": ", field, " is ", too_large ? "huge" : std::to_string(id),
                                              ", beyond the limit of ", kMaxTokenizerIds, " token ids"));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<int32_t> GetId(const json& v, const std::string& file, const std::string& field) {
  if (!v.is_number_integer()) return WrongType(file, field, "an integer token id");
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return CheckId(u > uint64_t{INT64_MAX} ? 0 : static_cast<int64_t>(u), u > uint64_t{INT64_MAX}, file, field);
  }
  return CheckId(v.get<int64_t>(), false, file, field);
}

// Probes `path`: false when it does not exist, true when it is a regular file, IoError when it
// exists but is not one (a FIFO would block a reader; a directory cannot be read).
absl::StatusOr<bool> RegularFileExists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return IoError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return IoError(absl::StrCat(path, ": not a regular file"));
  return true;
}

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

absl::Status CheckPattern(const std::string& pattern, const std::string& where) {
  if (pattern.size() > kMaxPatternBytes) {
    return absl::OutOfRangeError(absl::StrCat(where, " is ", pattern.size(), " bytes, longer than the ",
                                              kMaxPatternBytes, "-byte limit for a pre-tokenizer pattern"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const std::string tk = dir + "/tiktoken.model", tj = dir + "/tokenizer.json";
  LLMRT_ASSIGN_OR_RETURN(const bool have_tk, RegularFileExists(tk));
  if (have_tk) {
    t->family_ = TokenizerFamily::kKimi;
    LLMRT_RETURN_IF_ERROR(t->LoadTiktoken(dir));
    LLMRT_RETURN_IF_ERROR(t->LoadKimiSpecials(dir));
  } else {
    LLMRT_ASSIGN_OR_RETURN(const bool have_tj, RegularFileExists(tj));
    if (!have_tj) return absl::NotFoundError(absl::StrCat(dir, ": no tiktoken.model or tokenizer.json"));
    t->family_ = TokenizerFamily::kGlm;
    LLMRT_RETURN_IF_ERROR(t->LoadTokenizerJson(tj));
  }
  t->special_.resize(t->pieces_.size(), false);
  LLMRT_RETURN_IF_ERROR(t->LoadModelVocabSize(dir));
  return t;
}

absl::Status Tokenizer::AddSpecial(int32_t id, std::string text, const std::string& where) {
  // REQUIRES: 0 <= id < kMaxTokenizerIds (checked by the caller, which knows the field).
  if (text.size() > kMaxSpecialTokenBytes) {
    return absl::OutOfRangeError(absl::StrCat(where, " is ", text.size(), " bytes, longer than the ",
                                              kMaxSpecialTokenBytes, "-byte limit for a special token"));
  }
  special_text_bytes_ += text.size();
  if (special_text_bytes_ > kMaxSpecialTextBytes) {
    return absl::OutOfRangeError(absl::StrCat(where, ": the special tokens hold more than ", kMaxSpecialTextBytes,
                                              " bytes of text in all"));
  }
  if (static_cast<size_t>(id) >= pieces_.size()) pieces_.resize(static_cast<size_t>(id) + 1);
  if (static_cast<size_t>(id) >= special_.size()) special_.resize(static_cast<size_t>(id) + 1, false);
  special_[id] = true;
  matcher_.Add(text, id);
  special_ids_.try_emplace(text, id);
  pieces_[id] = std::move(text);
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadTiktoken(const std::string& dir) {
  const std::string tk = dir + "/tiktoken.model";
  LLMRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(tk));
  // tiktoken's load_tiktoken_bpe: lines of "base64 rank" (LF or CRLF, fields split on any
  // whitespace, blank lines skipped).
  absl::flat_hash_map<std::string, int32_t> ranks;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::ByAnyChar(" \t\v\f\r"), absl::SkipEmpty());
    if (f.empty()) continue;
    std::string bytes;
    int64_t rank = 0;
    if (f.size() != 2 || !absl::Base64Unescape(f[0], &bytes) || !absl::SimpleAtoi(f[1], &rank)) {
      return FormatError(absl::StrCat(tk, ": line ", line_no, " is not \"base64 rank\""));
    }
    LLMRT_ASSIGN_OR_RETURN(const int32_t id, CheckId(rank, false, tk, absl::StrCat("the rank on line ", line_no)));
    if (bytes.empty()) return FormatError(absl::StrCat(tk, ": line ", line_no, " has an empty token"));
    if (ranks.size() >= static_cast<size_t>(kMaxTokenizerIds)) {
      return absl::OutOfRangeError(absl::StrCat(tk, ": more than ", kMaxTokenizerIds, " tokens (line ", line_no, ")"));
    }
    if (!ranks.try_emplace(std::move(bytes), id).second) {
      return FormatError(absl::StrCat(tk, ": line ", line_no, " repeats the token of an earlier line"));
    }
  }
  // Ranks are ids and Kimi's tokenizer numbers the special tokens from the number of ranks, so
  // the ranks must be exactly 0..n-1, each once (tiktoken itself asserts they are unique).
  const size_t n = ranks.size();
  pieces_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (const auto& [bytes, rank] : ranks) {
    if (static_cast<size_t>(rank) >= n) {
      return FormatError(absl::StrCat(tk, ": rank ", rank, " is not below the number of tokens (", n,
                                      "): ranks must be 0..", n, "-1"));
    }
    if (seen[rank]) return FormatError(absl::StrCat(tk, ": rank ", rank, " is given to two tokens"));
    seen[rank] = true;
    pieces_[rank] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    if (!ranks.contains(std::string(1, static_cast<char>(b)))) {
      return FormatError(absl::StrCat(tk, ": byte ", b, " has no rank"));
    }
  }
  tiktoken_ = std::make_unique<TiktokenBpe>(std::move(ranks));
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadKimiSpecials(const std::string& dir) {
  const int32_t n = static_cast<int32_t>(pieces_.size());
  special_.assign(pieces_.size(), false);
  std::string pattern = kKimiPattern;
  regex_source_ = "Kimi's pre-tokenizer regex";
  // Specials: tokenizer_config.json's added_tokens_decoder when present, else Kimi's layout.
  const std::string cfg_path = dir + "/tokenizer_config.json";
  bool have_added = false;
  LLMRT_ASSIGN_OR_RETURN(const bool have_cfg, RegularFileExists(cfg_path));
  if (have_cfg) {
    LLMRT_ASSIGN_OR_RETURN(json cfg, ReadJsonObject(cfg_path));
    if (const json* p = Field(cfg, "pat_str")) {
      LLMRT_ASSIGN_OR_RETURN(pattern, GetString(*p, cfg_path, "pat_str"));
      regex_source_ = cfg_path + " pat_str";
      LLMRT_RETURN_IF_ERROR(CheckPattern(pattern, regex_source_));
    }
    if (const json* added = Field(cfg, "added_tokens_decoder")) {
      if (!added->is_object()) return WrongType(cfg_path, "added_tokens_decoder", "an object");
      for (auto it = added->begin(); it != added->end(); ++it) {
        const std::string field = absl::StrCat("added_tokens_decoder[\"", it.key().substr(0, 32), "\"]");
        int64_t id = 0;
        if (!absl::SimpleAtoi(it.key(), &id)) return FormatError(absl::StrCat(cfg_path, ": ", field, ": the key is not a token id"));
        LLMRT_ASSIGN_OR_RETURN(const int32_t checked, CheckId(id, false, cfg_path, field));
        const json* content = Field(*it, "content");
        if (content == nullptr) return FormatError(absl::StrCat(cfg_path, ": ", field, " has no content"));
        LLMRT_ASSIGN_OR_RETURN(std::string text, GetString(*content, cfg_path, field + ".content"));
        LLMRT_RETURN_IF_ERROR(AddSpecial(checked, std::move(text), absl::StrCat(cfg_path, ": ", field)));
        have_added = true;
      }
    }
  }
  if (!have_added) {
    if (n > kMaxTokenizerIds - 256) {
      return absl::OutOfRangeError(absl::StrCat(dir, "/tiktoken.model: ", n, " ranks leave no room below the limit of ",
                                                kMaxTokenizerIds, " ids for Kimi's 256 special tokens"));
    }
    for (int i = 0; i < 256; ++i) {
      std::string name = absl::StrCat("<|reserved_token_", i, "|>");
      for (const auto& [off, named] : kKimiSpecials) {
        if (off == i) name = named;
      }
      LLMRT_RETURN_IF_ERROR(AddSpecial(n + i, std::move(name), "Kimi's special tokens"));
    }
  }
  bos_ = SpecialId("[BOS]");
  eos_ = SpecialId("[EOS]");
  auto regex = Regex::Compile(pattern);
  if (!regex.ok()) return absl::Status(regex.status().code(), absl::StrCat(regex_source_, ": ", regex.status().message()));
  regex_ = std::move(regex).value();
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadTokenizerJson(const std::string& tj) {
  LLMRT_ASSIGN_OR_RETURN(json j, ReadJsonObject(tj));
  const json* m = Field(j, "model");
  if (m == nullptr || !m->is_object()) return FormatError(absl::StrCat(tj, ": not a tokenizer.json (no model object)"));
  LLMRT_ASSIGN_OR_RETURN(const std::string type, OptionalString(*m, "type", tj, "model.type"));
  if (type != "BPE") return UnsupportedError(absl::StrCat(tj, ": model type \"", type.substr(0, 32), "\": only BPE is supported"));
  if (Field(j, "normalizer") != nullptr) return UnsupportedError(absl::StrCat(tj, ": normalizers are not supported"));
  LLMRT_ASSIGN_OR_RETURN(const bool ignore_merges, OptionalBool(*m, "ignore_merges", false, tj, "model.ignore_merges"));
  if (ignore_merges) return UnsupportedError(absl::StrCat(tj, ": ignore_merges=true is not supported"));
  // Options that change which merges apply (dropout is random; the affixes change the pieces).
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = Field(*m, key);
    if (v != nullptr && !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      return UnsupportedError(absl::StrCat(tj, ": model.", key, " is not supported"));
    }
  }

  // Pre-tokenizer: Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)].
  std::string pattern;
  bool byte_level = false;
  const json* pt = Field(j, "pre_tokenizer");
  if (pt == nullptr || !pt->is_object()) {
    return UnsupportedError(absl::StrCat(tj, ": expected a Split regex + ByteLevel pre-tokenizer"));
  }
  LLMRT_ASSIGN_OR_RETURN(const std::string pt_type, OptionalString(*pt, "type", tj, "pre_tokenizer.type"));
  if (pt_type != "Sequence") {
    return UnsupportedError(absl::StrCat(tj, ": pre-tokenizer \"", pt_type.substr(0, 32), "\": expected a Sequence"));
  }
  const json* list = Field(*pt, "pretokenizers");
  if (list == nullptr || !list->is_array()) return WrongType(tj, "pre_tokenizer.pretokenizers", "an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& p = (*list)[i];
    const std::string field = absl::StrCat("pre_tokenizer.pretokenizers[", i, "]");
    if (!p.is_object()) return WrongType(tj, field, "an object");
    LLMRT_ASSIGN_OR_RETURN(const std::string step, OptionalString(p, "type", tj, field + ".type"));
    LLMRT_ASSIGN_OR_RETURN(const std::string behavior, OptionalString(p, "behavior", tj, field + ".behavior"));
    LLMRT_ASSIGN_OR_RETURN(const bool invert, OptionalBool(p, "invert", false, tj, field + ".invert"));
    LLMRT_ASSIGN_OR_RETURN(const bool use_regex, OptionalBool(p, "use_regex", true, tj, field + ".use_regex"));
    LLMRT_ASSIGN_OR_RETURN(const bool prefix, OptionalBool(p, "add_prefix_space", false, tj, field + ".add_prefix_space"));
    const json* pat = Field(p, "pattern");
    const json* regex = pat != nullptr ? Field(*pat, "Regex") : nullptr;
    // The regex must split the raw text: after ByteLevel it would see the remapped alphabet.
    if (step == "Split" && regex != nullptr && behavior == "Isolated" && !invert && pattern.empty() && !byte_level) {
      LLMRT_ASSIGN_OR_RETURN(pattern, GetString(*regex, tj, field + ".pattern.Regex"));
      regex_source_ = absl::StrCat(tj, " ", field, ".pattern.Regex");
      LLMRT_RETURN_IF_ERROR(CheckPattern(pattern, regex_source_));
    } else if (step == "ByteLevel" && !use_regex && !prefix && !byte_level) {
      byte_level = true;
    } else {
      return UnsupportedError(absl::StrCat(tj, ": ", field, " (", step.substr(0, 32), ") is not supported here"));
    }
  }
  if (pattern.empty() || !byte_level) {
    return UnsupportedError(absl::StrCat(tj, ": expected a Split regex + ByteLevel pre-tokenizer"));
  }
  auto compiled = Regex::Compile(pattern);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(), absl::StrCat(regex_source_, ": ", compiled.status().message()));
  }
  regex_ = std::move(compiled).value();

  // Vocabulary: ByteLevel strings -> ids, each id once.
  const json* vocab_json = Field(*m, "vocab");
  if (vocab_json == nullptr || !vocab_json->is_object()) return WrongType(tj, "model.vocab", "an object");
  if (vocab_json->size() > static_cast<size_t>(kMaxTokenizerIds)) {
    return absl::OutOfRangeError(absl::StrCat(tj, ": model.vocab has more than ", kMaxTokenizerIds, " tokens"));
  }
  const auto dec = ByteLevelDecoder();
  absl::flat_hash_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_json->size());
  int32_t max_id = -1;
  std::string bytes;
  for (auto it = vocab_json->begin(); it != vocab_json->end(); ++it) {
    const std::string field = absl::StrCat("model.vocab[\"", it.key().substr(0, 32), "\"]");
    LLMRT_ASSIGN_OR_RETURN(const int32_t id, GetId(it.value(), tj, field));
    if (!FromByteLevel(dec, it.key(), &bytes)) {
      return FormatError(absl::StrCat(tj, ": ", field, ": not a ByteLevel token"));
    }
    vocab.emplace(bytes, id);  // distinct keys map to distinct bytes (ByteLevel is one-to-one)
    max_id = std::max(max_id, id);
  }
  pieces_.assign(static_cast<size_t>(max_id + 1), std::string());
  std::vector<bool> seen(pieces_.size(), false);
  for (const auto& [b, id] : vocab) {
    if (seen[id]) return FormatError(absl::StrCat(tj, ": model.vocab gives id ", id, " to two tokens"));
    seen[id] = true;
    pieces_[id] = b;
  }

  // Merges: "left right" strings (one space) or [left, right] pairs, in rank order.
  const json* merges_json = Field(*m, "merges");
  if (merges_json == nullptr || !merges_json->is_array()) return WrongType(tj, "model.merges", "an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json->size());
  for (size_t r = 0; r < merges_json->size(); ++r) {
    const json& mg = (*merges_json)[r];
    const std::string field = absl::StrCat("model.merges[", r, "]");
    std::string l, rt;
    if (mg.is_string()) {
      std::vector<std::string> parts = absl::StrSplit(mg.get_ref<const std::string&>(), ' ');
      if (parts.size() != 2) return FormatError(absl::StrCat(tj, ": ", field, " is not \"left right\""));
      l = std::move(parts[0]);
      rt = std::move(parts[1]);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      l = mg[0].get<std::string>();
      rt = mg[1].get<std::string>();
    } else {
      return WrongType(tj, field, "a \"left right\" string or a pair of strings");
    }
    std::string a, b;
    if (!FromByteLevel(dec, l, &a) || !FromByteLevel(dec, rt, &b)) {
      return FormatError(absl::StrCat(tj, ": ", field, ": not ByteLevel tokens"));
    }
    merges.emplace_back(std::move(a), std::move(b));
  }
  std::string error;
  merges_ = std::make_unique<MergesBpe>(MergesBpe::Build(vocab, merges, &error));
  if (!error.empty()) return FormatError(absl::StrCat(tj, ": ", error));

  special_.assign(pieces_.size(), false);
  if (const json* added = Field(j, "added_tokens")) {
    if (!added->is_array()) return WrongType(tj, "added_tokens", "an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const json& a = (*added)[i];
      const std::string field = absl::StrCat("added_tokens[", i, "]");
      if (!a.is_object()) return WrongType(tj, field, "an object");
      const json* id = Field(a, "id");
      const json* content = Field(a, "content");
      if (id == nullptr || content == nullptr) return FormatError(absl::StrCat(tj, ": ", field, " lacks id or content"));
      LLMRT_ASSIGN_OR_RETURN(const int32_t checked, GetId(*id, tj, field + ".id"));
      LLMRT_ASSIGN_OR_RETURN(std::string text, GetString(*content, tj, field + ".content"));
      LLMRT_RETURN_IF_ERROR(AddSpecial(checked, std::move(text), absl::StrCat(tj, ": ", field)));
    }
  }
  eos_ = SpecialId("<|endoftext|>");
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadModelVocabSize(const std::string& dir) {
  // config.json is the model's, not the tokenizer's: it is read only for vocab_size (top level,
  // or text_config for Kimi K2.5), the id space a sampler draws from.
  const std::string path = dir + "/config.json";
  LLMRT_ASSIGN_OR_RETURN(const bool have, RegularFileExists(path));
  if (!have) return absl::OkStatus();
  LLMRT_ASSIGN_OR_RETURN(json cfg, ReadJsonObject(path));
  const json* v = Field(cfg, "vocab_size");
  std::string field = "vocab_size";
  if (v == nullptr) {
    if (const json* text_config = Field(cfg, "text_config")) {
      v = Field(*text_config, "vocab_size");
      field = "text_config.vocab_size";
    }
  }
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 1) ||
      (v->is_number_unsigned() && (v->get<uint64_t>() < 1 || v->get<uint64_t>() > uint64_t{INT32_MAX}))) {
    return FormatError(absl::StrCat(path, ": ", field, " must be an integer in [1, 2^31)"));
  }
  model_vocab_size_ = static_cast<int32_t>(v->get<int64_t>());
  return absl::OkStatus();
}

}  // namespace llmrt
