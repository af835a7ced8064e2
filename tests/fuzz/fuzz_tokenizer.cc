// Fuzz targets for the tokenizers: every file parser (tiktoken.model, tokenizer.json,
// tokenizer_config.json with its pat_str and added tokens, config.json's vocab_size), the
// pre-tokenizer regex engine under its budget, text, ids and chat messages. Besides "returns
// normally", each checks what must hold for any input: encoding valid text never fails and
// decodes back to the sanitized text, whole and incremental decoding agree, and a loaded
// hostile tokenizer still encodes and decodes within its limits.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <unistd.h>

#include "src/tokenizer/chat.h"
#include "src/tokenizer/detokenizer.h"
#include "src/tokenizer/regex.h"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_targets.h"

namespace llmrt::fuzz {
namespace {

const std::string kData = LLMRT_TEST_DATA;

std::string Scratch() {
  static const std::string dir = [] {
    std::string d =
        (std::filesystem::temp_directory_path() / ("llmrt_fuzz_tok_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz invariant violated: %s: %s\n", what, detail.c_str());
  std::abort();
}

const Tokenizer* Load(const std::string& dir) {
  auto r = Tokenizer::Load(dir);
  if (!r.ok()) Fail("cannot load a committed tokenizer", std::string(r.status().message()));
  return r->release();
}

const Tokenizer* Kimi() {
  static const Tokenizer* t = Load(kData + "/tokenizers/kimi");
  return t;
}
const Tokenizer* Glm() {
  static const Tokenizer* t = Load(kData + "/tokenizers/glm");
  return t;
}
// The shipped GLM model directory: its config.json pads vocab_size past the tokenizer's ids.
const Tokenizer* GlmPadded() {
  static const Tokenizer* t = Load(kData + "/../../models/glm4-moe-kjv-tiny");
  return t;
}

// Encodes valid text, which must never fail, and checks that it decodes back.
void RoundTrip(const Tokenizer& t, std::string_view text, bool parse_special) {
  auto ids = t.Encode(text, parse_special);
  if (!ids.ok()) Fail("Encode failed on text within the limits", std::string(ids.status().message()));
  auto back = Decode(t, *ids, /*skip_special=*/false);
  if (!back.ok()) Fail("Decode failed on ids from Encode", std::string(back.status().message()));
  if (*back != Utf8Sanitize(text)) Fail("Decode(Encode(text)) != text", std::string(text.substr(0, 64)));
}

// A freshly loaded (possibly hostile) tokenizer must still encode and decode within its limits.
void Exercise(const Tokenizer& t) {
  static const std::string kTexts[] = {
      "In the beginning <|im_end|> [gMASK] 123 'll \xe4\xbd\xa0\xe5\xa5\xbd \xff",
      std::string(300, 'a') + "   \n\n" + std::string(40, '!'),
  };
  for (const auto& text : kTexts) {
    for (bool special : {false, true}) {
      auto ids = t.Encode(text, special);
      if (!ids.ok()) {
        // A hostile pattern may exhaust its budget; that must be the only way to fail.
        if (ids.status().code() != absl::StatusCode::kOutOfRange) {
          Fail("Encode failed other than by a limit", std::string(ids.status().message()));
        }
        continue;
      }
      for (int32_t id : *ids) {
        if (id < 0 || id >= t.vocab_size()) Fail("Encode produced an id outside the vocabulary", std::to_string(id));
      }
      (void)Decode(t, *ids, special);
    }
  }
  std::vector<int32_t> all;
  // Ids around the ends of the tokenizer's and the model's id spaces.
  for (int32_t id = -2; id < 300; ++id) all.push_back(id);
  const int64_t end = std::min<int64_t>(int64_t{t.model_vocab_size()} + 2, int64_t{t.vocab_size()} + 600);
  for (int64_t id = t.vocab_size() - 300; id < end; ++id) all.push_back(static_cast<int32_t>(id));
  (void)Decode(t, all, false);
  IncrementalDetokenizer d(t, true);
  std::string out;
  for (int32_t id : all) (void)d.Push(id, &out);
  d.Flush(&out);
  (void)t.SpecialId("<|im_end|>");
}

// Writes `files` (name, bytes) into the scratch directory, without the other files a tokenizer
// reads, and loads a tokenizer from it.
void LoadFrom(std::initializer_list<std::pair<const char*, std::string_view>> files) {
  static const std::string dir = [] {
    std::string d = Scratch() + "/tok";
    std::filesystem::create_directories(d);
    return d;
  }();
  for (const char* name : {"tiktoken.model", "tokenizer.json", "tokenizer_config.json", "config.json"}) {
    ::unlink((dir + "/" + name).c_str());
  }
  for (const auto& [name, bytes] : files) WriteFile(dir + "/" + name, bytes);
  auto t = Tokenizer::Load(dir);
  if (t.ok()) {
    Exercise(**t);
  } else if (t.status().code() == absl::StatusCode::kInternal || t.status().code() == absl::StatusCode::kUnknown) {
    Fail("Load failed with an unexpected code", std::string(t.status().message()));
  }
}

// A small valid tiktoken.model (265 ranks) for the targets that fuzz the files beside it.
const std::string& SmallTiktokenModel() {
  static const std::string s = ReadFile(kData + "/../fuzz/seeds/tiktoken_model/small.tiktoken");
  return s;
}

}  // namespace

int TokenizerText(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Tokenizer* t : {Kimi(), Glm()}) {
    for (bool special : {false, true}) RoundTrip(*t, text, special);
  }
  return 0;
}

int TokenizerIds(const uint8_t* data, size_t size) {
  // Ids around the vocabulary's edges: below 0, the tokenizer's ids, the model's padding, beyond.
  const Tokenizer* t = size % 2 == 1 ? Kimi() : GlmPadded();
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) - 64);
  const bool skip = size % 4 >= 2;
  auto whole = Decode(*t, ids, skip);
  IncrementalDetokenizer d(*t, skip);
  std::string out;
  bool all_ok = true;
  for (int32_t id : ids) all_ok = d.Push(id, &out).ok() && all_ok;
  d.Flush(&out);
  if (whole.ok() != all_ok) Fail("Decode and the incremental detokenizer disagree on validity", "");
  if (whole.ok() && *whole != out) Fail("Decode and the incremental detokenizer disagree on text", "");
  if (whole.ok() && Utf8Sanitize(*whole) != *whole) Fail("decoded text is not valid UTF-8", "");
  return 0;
}

int TiktokenModel(const uint8_t* data, size_t size) {
  LoadFrom({{"tiktoken.model", std::string_view(reinterpret_cast<const char*>(data), size)}});
  return 0;
}

int TokenizerJson(const uint8_t* data, size_t size) {
  LoadFrom({{"tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size)}});
  return 0;
}

int TokenizerConfig(const uint8_t* data, size_t size) {
  // The first byte picks the file: tokenizer_config.json (specials, pat_str) or the model's
  // config.json (vocab_size), next to a small valid tiktoken.model.
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  LoadFrom({{"tiktoken.model", SmallTiktokenModel()}, {data[0] & 1 ? "config.json" : "tokenizer_config.json", rest}});
  return 0;
}

int TokenizerRegex(const uint8_t* data, size_t size) {
  // The first line is a pattern, the rest the text (sanitized, as Encode does).
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  if (nl == std::string_view::npos) return 0;
  auto re = Regex::Compile(std::string(in.substr(0, nl)));
  if (!re.ok()) return 0;
  const std::string text = Utf8Sanitize(in.substr(nl + 1));
  size_t last = 0;
  absl::Status st = (*re)->FindAll(text, [&](size_t b, size_t e) {
    if (b < last || e <= b || e > text.size()) Fail("FindAll reported a bad match", std::to_string(b));
    last = e;
  });
  if (!st.ok() && st.code() != absl::StatusCode::kOutOfRange) Fail("FindAll failed", std::string(st.message()));
  return 0;
}

int ChatTemplate(const uint8_t* data, size_t size) {
  // Messages as NUL-separated role, content, role, content...; the first byte picks the family
  // and the generation options.
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= in.size(); ++i) {
    if (i == in.size() || in[i] == '\0') {
      parts.emplace_back(in.substr(start, i - start));
      start = i + 1;
    }
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i + 1 < parts.size(); i += 2) messages.push_back({parts[i], parts[i + 1]});
  const Tokenizer* t = data[0] & 1 ? Kimi() : Glm();
  auto text = ApplyChatTemplate(t->family(), messages, data[0] & 2, data[0] & 4);
  if (!text.ok()) {
    if (text.status().code() != absl::StatusCode::kInvalidArgument) Fail("chat failed", std::string(text.status().message()));
    return 0;
  }
  RoundTrip(*t, *text, /*parse_special=*/true);
  return 0;
}

}  // namespace llmrt::fuzz
