// Hostile tokenizer files and texts through the public header. Each case runs in a forked child
// with a time limit and an address-space cap (hostile_util.h): an out-of-bounds write, a read of
// freed memory, a multi-gigabyte vector or a quadratic loop fails its case instead of the suite.
//   - files: ids that are negative, huge or sparse; missing and wrongly typed JSON fields; deep
//     nesting; FIFOs; over-long special tokens and patterns (clear statuses naming the field);
//   - text: 1 MiB without a space in both families (O(n log n) merging, Kimi's chunking, ids equal
//     to the reference libraries'); a pathological pre-tokenizer regex (an error, never a
//     silently shortened result); the text limits;
//   - ids: the model's padded vocabulary decodes to nothing, other ids are refused.
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/hostile/hostile_util.h"

namespace llmrt::hostile {
namespace {

const std::string kData = LLMRT_TEST_DATA;
const std::string kGlmModel = kData + "/../../models/glm4-moe-kjv-tiny";

// ---- helpers --------------------------------------------------------------------------------

// Creates a tokenizer from dir; "" when the status is `expected` and (if given) the error names
// `mention`, else a message.
std::string ExpectCreate(const std::string& dir, llm_status expected, const std::string& mention = "") {
  llm_tokenizer* tok = nullptr;
  const llm_status st = llm_tokenizer_create(dir.c_str(), &tok);
  const std::string error = llm_last_error();
  llm_tokenizer_destroy(tok);
  std::string r = ExpectStatus(st, expected, "llm_tokenizer_create(" + dir + ")");
  if (r.empty() && st != LLM_OK && error.find(mention) == std::string::npos) {
    r = "the error \"" + error + "\" does not mention \"" + mention + "\"";
  }
  if (r.empty() && st != LLM_OK && tok != nullptr) r = "a failed create returned a tokenizer";
  return r;
}

// A directory holding the committed GLM tokenizer.json with `from` replaced by `to` (once).
std::string GlmWith(const std::string& name, const std::string& from, const std::string& to) {
  const std::string dir = MakeTempDir(name);
  std::string j = ReadFile(kData + "/tokenizers/glm/tokenizer.json");
  const size_t at = j.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "fixture text not found: " << from;
    return dir;
  }
  j.replace(at, from.size(), to);
  WriteFile(dir + "/tokenizer.json", j);
  return dir;
}

// A directory with the committed Kimi tiktoken.model plus `extra_lines`, and a
// tokenizer_config.json when `config` is not empty.
std::string KimiWith(const std::string& name, const std::string& extra_lines, const std::string& config = "") {
  const std::string dir = MakeTempDir(name);
  WriteFile(dir + "/tiktoken.model", ReadFile(kData + "/tokenizers/kimi/tiktoken.model") + extra_lines);
  if (!config.empty()) WriteFile(dir + "/tokenizer_config.json", config);
  return dir;
}

struct Encoded {
  llm_status status = LLM_OK;
  std::string error;
  std::vector<int32_t> ids;
  double seconds = 0;
};

Encoded Encode(llm_tokenizer* tok, const std::string& text, int32_t parse_special = 1) {
  Encoded e;
  std::vector<int32_t> ids(text.size() + 16);
  size_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  e.status = llm_tokenize(tok, text.data(), text.size(), parse_special, ids.data(), ids.size(), &n);
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e.error = llm_last_error();
  if (e.status == LLM_OK) e.ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
  return e;
}

std::string Decode(llm_tokenizer* tok, const std::vector<int32_t>& ids, llm_status* status) {
  std::string text(ids.size() * 64 + 64, '\0');
  size_t len = 0;
  *status = llm_detokenize(tok, ids.data(), ids.size(), 0, text.data(), text.size(), &len);
  text.resize(*status == LLM_OK ? len : 0);
  return text;
}

// FNV-1a over the ids, as tools/ hash reference outputs.
uint64_t Fnv(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 1099511628211ull;
  }
  return h;
}

// 1 MiB of lowercase letters without a space: the letters of the held-out text, repeated.
std::string MiBWord() {
  std::string w;
  for (char c : ReadFile(kData + "/kjv_heldout.txt")) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c >= 'a' && c <= 'z') w.push_back(c);
  }
  while (w.size() < (size_t{1} << 20)) w += w;
  w.resize(size_t{1} << 20);
  return w;
}

// ---- class 1: memory safety and clear statuses from tokenizer files ---------------------------

TEST(HostileTokenizer, AddedTokenIdsOutsideTheIdSpaceAreRefused) {
  const std::string anchor = R"({"id": 3840,)";
  struct Case {
    const char* id;
    llm_status want;
  } cases[] = {
      {"-5", LLM_ERR_FORMAT},             // wrote before the vector in a release build
      {"-2147483648", LLM_ERR_FORMAT},
      {"2147483647", LLM_ERR_OUT_OF_RANGE},  // id + 1 overflowed an int32
      {"16777216", LLM_ERR_OUT_OF_RANGE},    // a 16M-entry table
      {"4294967296", LLM_ERR_OUT_OF_RANGE},
      {"18446744073709551615", LLM_ERR_OUT_OF_RANGE},
      {"3.5", LLM_ERR_FORMAT},
      {"\"3840\"", LLM_ERR_FORMAT},
      {"null", LLM_ERR_FORMAT},
  };
  for (const auto& c : cases) {
    const std::string dir = GlmWith("added_id", anchor, std::string(R"({"id": )") + c.id + ",");
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, c.want, "added_tokens[0]"); }), "") << c.id;
  }
}

TEST(HostileTokenizer, VocabularyIdsOutsideTheIdSpaceAreRefused) {
  // The fixture's vocabulary starts {"Ā": 0, ...} (byte 0 in the ByteLevel alphabet).
  for (const auto& [id, want] : std::vector<std::pair<std::string, llm_status>>{
           {"-1", LLM_ERR_FORMAT}, {"2097152", LLM_ERR_OUT_OF_RANGE}, {"9223372036854775807", LLM_ERR_OUT_OF_RANGE},
           {"1", LLM_ERR_FORMAT} /* id 1 twice */, {"true", LLM_ERR_FORMAT}}) {
    const std::string dir = GlmWith("vocab_id", R"("vocab": {"Ā": 0,)", R"("vocab": {"Ā": )" + id + ",");
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, want, "model.vocab"); }), "") << id;
  }
}

TEST(HostileTokenizer, MissingAndWronglyTypedJsonFieldsNameTheField) {
  struct Case {
    const char* from;
    const char* to;
    const char* mention;
  } cases[] = {
      // A Sequence without its list: operator[] on a const json read freed memory.
      {R"("pretokenizers": [)", R"("pretokenizers_": [)", "pre_tokenizer.pretokenizers"},
      {R"("pretokenizers": [)", R"("pretokenizers": 7, "x": [)", "pre_tokenizer.pretokenizers"},
      {R"("Regex": )", R"("Regex": 5, "y": )", "pattern.Regex"},
      {R"("behavior": "Isolated")", R"("behavior": ["Isolated"])", ".behavior"},
      {R"("use_regex": false)", R"("use_regex": "no")", ".use_regex"},
      {R"("vocab": {)", R"("vocab": [], "v": {)", "model.vocab"},
      {R"("merges": [[)", R"("merges": {}, "m": [[)", "model.merges"},
      {R"("merges": [[)", R"("merges": [7, [)", "model.merges[0]"},
      {R"("merges": [[)", R"("merges": [["a"], [)", "model.merges[0]"},
      {R"("added_tokens": [)", R"("added_tokens": {}, "a": [)", "added_tokens"},
      {R"("content": "<|endoftext|>")", R"("content": 12)", "added_tokens[0].content"},
      {R"({"id": 3840,)", R"({"id_": 3840,)", "added_tokens[0]"},
      {R"("ignore_merges": false)", R"("ignore_merges": 0)", "model.ignore_merges"},
      {R"("type": "BPE")", R"("type": ["BPE"])", "model.type"},
  };
  for (const auto& c : cases) {
    const std::string dir = GlmWith("json_type", c.from, c.to);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_FORMAT, c.mention); }), "") << c.to;
  }
  // The top level, and JSON that is not JSON.
  for (const std::string& text : {std::string("[1,2,3]"), std::string("{\"model\": 7}"), std::string("{\"model\": {"),
                                  std::string("\xff\xfe{}"), std::string()}) {
    const std::string dir = MakeTempDir("json_top");
    WriteFile(dir + "/tokenizer.json", text);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_FORMAT, "tokenizer.json"); }), "") << text;
  }
}

TEST(HostileTokenizer, DeeplyNestedJsonIsRefusedBeforeItIsBuilt) {
  // Nesting: 4 MiB of '[' would take hundreds of MiB as a DOM (a 128 MiB file, gigabytes).
  const std::string dir = MakeTempDir("json_deep");
  WriteFile(dir + "/tokenizer.json", std::string(size_t{4} << 20, '['));
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_OUT_OF_RANGE, "nested deeper"); }, 60), "");
  const std::string dir2 = MakeTempDir("json_many");
  std::string many = "{\"x\": [";
  for (int i = 0; i < (1 << 23) + 10; ++i) many += "0,";
  many += "0]}";
  WriteFile(dir2 + "/tokenizer.json", many);
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir2, LLM_ERR_OUT_OF_RANGE, "JSON values"); }, 60), "");
}

TEST(HostileTokenizer, TiktokenRanksMustBeDenseAndBounded) {
  struct Case {
    const char* line;
    llm_status want;
    const char* mention;
  } cases[] = {
      {"AQIDBAU= 16777216\n", LLM_ERR_OUT_OF_RANGE, "rank on line 3841"},  // 2^24: no 16M-entry table
      {"AQIDBAU= 2097151\n", LLM_ERR_FORMAT, "ranks must be 0.."},
      {"AQIDBAU= 99999999999\n", LLM_ERR_OUT_OF_RANGE, "rank on line 3841"},
      {"AQIDBAU= -1\n", LLM_ERR_FORMAT, "rank on line 3841"},
      {"AQIDBAU= 5\n", LLM_ERR_FORMAT, "rank 5 is given to two tokens"},
      {"IQ== 3840\n", LLM_ERR_FORMAT, "line 3841 repeats"},  // "!" has a rank already
      {" 3840\n", LLM_ERR_FORMAT, "line 3841"},
      {"AQIDBAU=\n", LLM_ERR_FORMAT, "line 3841"},
      {"!!!! 3840\n", LLM_ERR_FORMAT, "line 3841"},
  };
  for (const auto& c : cases) {
    const std::string dir = KimiWith("rank", c.line);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, c.want, c.mention); }), "") << c.line;
  }
  // A file without every single byte.
  const std::string dir = MakeTempDir("rank_bytes");
  WriteFile(dir + "/tiktoken.model", "YQ== 0\n");
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_FORMAT, "has no rank"); }), "");
}

TEST(HostileTokenizer, TokenizerConfigAddedTokensAndPatternAreChecked) {
  struct Case {
    std::string config;
    llm_status want;
    const char* mention;
  } cases[] = {
      {R"({"added_tokens_decoder": {"-1": {"content": "x"}}})", LLM_ERR_FORMAT, "is negative"},
      {R"({"added_tokens_decoder": {"3000000000": {"content": "x"}}})", LLM_ERR_OUT_OF_RANGE, "limit of 2097152"},
      {R"({"added_tokens_decoder": {"99999999999999999999999": {"content": "x"}}})", LLM_ERR_FORMAT, "not a token id"},
      {R"({"added_tokens_decoder": {"abc": {"content": "x"}}})", LLM_ERR_FORMAT, "not a token id"},
      {R"({"added_tokens_decoder": {"3840": {"content": 5}}})", LLM_ERR_FORMAT, "content must be a string"},
      {R"({"added_tokens_decoder": {"3840": {"special": true}}})", LLM_ERR_FORMAT, "has no content"},
      {R"({"added_tokens_decoder": {"3840": "x"}})", LLM_ERR_FORMAT, "has no content"},
      {R"({"added_tokens_decoder": [1, 2]})", LLM_ERR_FORMAT, "added_tokens_decoder must be an object"},
      {R"({"pat_str": 7})", LLM_ERR_FORMAT, "pat_str must be a string"},
      {R"({"pat_str": "(unclosed"})", LLM_ERR_FORMAT, "pat_str"},
      {"{\"pat_str\": \"" + std::string(70000, 'a') + "\"}", LLM_ERR_OUT_OF_RANGE, "pat_str"},
      {"{\"added_tokens_decoder\": {\"3840\": {\"content\": \"" + std::string(300, 'x') + "\"}}}", LLM_ERR_OUT_OF_RANGE,
       "special token"},
      {"[]", LLM_ERR_FORMAT, "tokenizer_config.json"},
  };
  for (const auto& c : cases) {
    const std::string dir = KimiWith("config", "", c.config);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, c.want, c.mention); }), "") << c.config.substr(0, 80);
  }
  // Many special tokens: 1 MiB of special-token text in all.
  std::string big = "{\"added_tokens_decoder\": {";
  for (int i = 0; i < 5000; ++i) {
    big += (i ? "," : "") + std::string("\"") + std::to_string(3840 + i) + "\": {\"content\": \"<|" + std::string(240, 'a') +
           std::to_string(i) + "|>\"}";
  }
  big += "}}";
  const std::string dir = KimiWith("config_many", "", big);
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_OUT_OF_RANGE, "in all"); }), "");
}

TEST(HostileTokenizer, FilesThatAreNotRegularFilesAreIoErrorsNotHangs) {
  for (const char* name : {"tiktoken.model", "tokenizer_config.json", "config.json"}) {
    const std::string dir = MakeTempDir("fifo_tok");
    CopyDir(kData + "/tokenizers/kimi", dir);
    ::unlink((dir + "/" + name).c_str());
    ASSERT_EQ(::mkfifo((dir + "/" + name).c_str(), 0600), 0);
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_IO, name); }, 20), "") << name;
  }
  const std::string dir = MakeTempDir("dir_tok");
  ASSERT_EQ(::mkdir((dir + "/tokenizer.json").c_str(), 0700), 0);
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_IO, "not a regular file"); }), "");
}

// ---- class 6: no quadratic tokenization -------------------------------------------------------

// A 1 MiB word without spaces, both families, well inside the time limit even under sanitizers
// (the quadratic merge took minutes), with the ids of the reference libraries: for Kimi,
// tokenization_kimi.py's encode (tiktoken over 25,000-character chunks); for GLM, Hugging Face
// tokenizers. Reference hashes from tools/tokenizer_long_text.py.
TEST(HostileTokenizer, OneMebibyteWordTokenizesFastAndExactly) {
  const std::string word = MiBWord();
  struct Case {
    std::string dir;
    size_t ids;
    uint64_t fnv;
  } cases[] = {
      {kData + "/tokenizers/kimi", 469442, 0x8fd0f6282c59569dull},
      {kData + "/tokenizers/glm", 469421, 0xf901cd6cd2a3b07cull},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(RunIsolated([&]() -> std::string {
                llm_tokenizer* tok = nullptr;
                if (llm_tokenizer_create(c.dir.c_str(), &tok) != LLM_OK) return llm_last_error();
                const Encoded e = Encode(tok, word);
                llm_tokenizer_destroy(tok);
                if (e.status != LLM_OK) return "llm_tokenize: " + e.error;
                if (e.seconds > 20) return "took " + std::to_string(e.seconds) + " s";
                if (e.ids.size() != c.ids || Fnv(e.ids) != c.fnv) {
                  return "ids differ from the reference: " + std::to_string(e.ids.size()) + " ids";
                }
                return "";
              }, /*timeout_s=*/60),
              "")
        << c.dir;
  }
}

TEST(HostileTokenizer, LongRunsOfOneKindTokenizeAndRoundTrip) {
  // Runs the regex backtracks over (whitespace before a letter), one Kimi chunk boundary
  // inside a run of spaces, and a long newline-separated run.
  const std::string texts[] = {std::string(1 << 18, ' ') + "x", std::string(1 << 18, 'A'),
                               std::string(100000, '\n') + std::string(100000, ' ') + "y",
                               std::string(1 << 17, '!') + "<|im_end|>" + std::string(1 << 17, '7')};
  for (const char* fam : {"kimi", "glm"}) {
    for (const auto& text : texts) {
      EXPECT_EQ(RunIsolated([&]() -> std::string {
                  llm_tokenizer* tok = nullptr;
                  if (llm_tokenizer_create((kData + "/tokenizers/" + fam).c_str(), &tok) != LLM_OK) return llm_last_error();
                  const Encoded e = Encode(tok, text, 0);
                  llm_status st = LLM_OK;
                  const std::string back = e.status == LLM_OK ? Decode(tok, e.ids, &st) : "";
                  llm_tokenizer_destroy(tok);
                  if (e.status != LLM_OK) return "llm_tokenize: " + e.error;
                  if (e.seconds > 20) return "took " + std::to_string(e.seconds) + " s";
                  if (st != LLM_OK || back != text) return std::string("does not round-trip");
                  return "";
                }, /*timeout_s=*/60),
                "")
          << fam << " " << text.substr(0, 8);
    }
  }
}

// ---- class 7: a regex failure is an error, never a shortened result ---------------------------

TEST(HostileTokenizer, PathologicalPreTokenizerRegexIsAnErrorNotLostText) {
  // (a|a)*b backtracks exponentially on a run of a's: Oniguruma's retry limit used to end the
  // search quietly, and llm_tokenize returned LLM_OK with a few bytes of 4000 tokenized.
  const std::string kimi_dir = KimiWith("regex_kimi", "", R"({"pat_str": "(a|a)*b|."})");
  const std::string glm_dir =
      GlmWith("regex_glm", R"("Regex": )", R"("Regex": "(a|a)*b|.", "was": )");
  for (const std::string& dir : {kimi_dir, glm_dir}) {
    EXPECT_EQ(RunIsolated([&]() -> std::string {
                llm_tokenizer* tok = nullptr;
                if (llm_tokenizer_create(dir.c_str(), &tok) != LLM_OK) return llm_last_error();
                const Encoded bad = Encode(tok, "xy" + std::string(4000, 'a'));
                const Encoded good = Encode(tok, "ab ab");  // the same pattern on harmless text
                llm_tokenizer_destroy(tok);
                if (bad.status != LLM_ERR_OUT_OF_RANGE) {
                  return "got " + std::string(llm_status_string(bad.status)) + " with " +
                         std::to_string(bad.ids.size()) + " ids";
                }
                if (bad.error.find("regex") == std::string::npos) return "the error does not name the regex: " + bad.error;
                if (good.status != LLM_OK || good.ids.empty()) return "harmless text failed: " + good.error;
                return "";
              }, /*timeout_s=*/60),
              "")
        << dir;
  }
}

// ---- class 9: ids in the model's padded vocabulary --------------------------------------------

TEST(HostileTokenizer, PaddedVocabularyIdsDecodeToNothing) {
  // The shipped GLM model: config.json's vocab_size is 3904, the tokenizer has 3876 ids.
  EXPECT_EQ(RunIsolated([&]() -> std::string {
              llm_tokenizer* tok = nullptr;
              if (llm_tokenizer_create(kGlmModel.c_str(), &tok) != LLM_OK) return llm_last_error();
              llm_tokenizer_info info;
              info.struct_size = sizeof info;
              llm_tokenizer_get_info(tok, &info);
              const Encoded e = Encode(tok, "In the beginning God");
              std::vector<int32_t> ids = e.ids;
              ids.insert(ids.begin() + 1, 3890);
              ids.push_back(3903);
              llm_status st = LLM_OK;
              const std::string text = Decode(tok, ids, &st);
              llm_status st_beyond = LLM_OK, st_negative = LLM_OK;
              Decode(tok, {e.ids[0], 3904}, &st_beyond);
              Decode(tok, {e.ids[0], -1}, &st_negative);
              // The incremental detokenizer takes them too.
              llm_detokenizer* d = nullptr;
              llm_detokenizer_create(tok, 0, &d);
              char buf[64];
              size_t len = 99;
              const llm_status push_pad = llm_detokenizer_push(d, 3895, buf, sizeof buf, &len);
              const size_t pad_len = len;
              const llm_status push_beyond = llm_detokenizer_push(d, 3904, buf, sizeof buf, &len);
              const llm_status push_negative = llm_detokenizer_push(d, -7, buf, sizeof buf, &len);
              llm_detokenizer_destroy(d);
              llm_tokenizer_destroy(tok);
              if (info.vocab_size != 3876) return "vocab_size " + std::to_string(info.vocab_size);
              if (st != LLM_OK || text != "In the beginning God") return "decode: " + std::string(llm_status_string(st)) + " " + text;
              if (st_beyond != LLM_ERR_INVALID_ARGUMENT || st_negative != LLM_ERR_INVALID_ARGUMENT) return "bad ids accepted";
              if (push_pad != LLM_OK || pad_len != 0) return "padding id in the detokenizer";
              if (push_beyond != LLM_ERR_INVALID_ARGUMENT || push_negative != LLM_ERR_INVALID_ARGUMENT) {
                return "bad ids accepted by the detokenizer";
              }
              return "";
            }),
            "");
  // Kimi K2.5 nests vocab_size in text_config; a wrongly typed one is a clear error.
  const std::string dir = MakeTempDir("padded_k25");
  CopyDir(kData + "/tokenizers/kimi", dir);
  WriteFile(dir + "/config.json", R"({"text_config": {"vocab_size": 4200}})");
  EXPECT_EQ(RunIsolated([&]() -> std::string {
              llm_tokenizer* tok = nullptr;
              if (llm_tokenizer_create(dir.c_str(), &tok) != LLM_OK) return llm_last_error();
              llm_status a = LLM_OK, b = LLM_OK;
              const std::string t = Decode(tok, {4199, 4096}, &a);
              Decode(tok, {4200}, &b);
              llm_tokenizer_destroy(tok);
              if (a != LLM_OK || !t.empty() || b != LLM_ERR_INVALID_ARGUMENT) return std::string("text_config.vocab_size");
              return "";
            }),
            "");
  WriteFile(dir + "/config.json", R"({"vocab_size": "163840"})");
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_FORMAT, "vocab_size"); }), "");
}

// ---- limits -----------------------------------------------------------------------------------

TEST(HostileTokenizer, TextLimitsAreOutOfRange) {
  EXPECT_EQ(RunIsolated([&]() -> std::string {
              llm_tokenizer* tok = nullptr;
              if (llm_tokenizer_create((kData + "/tokenizers/glm").c_str(), &tok) != LLM_OK) return llm_last_error();
              const std::string huge((size_t{16} << 20) + 1, 'a');
              size_t n = 0;
              const llm_status enc = llm_tokenize(tok, huge.data(), huge.size(), 0, nullptr, 0, &n);
              // A decoded text over the limit: copies of the longest token.
              int32_t longest = 0;
              size_t longest_len = 0;
              for (int32_t id = 0; id < 3840; ++id) {
                char piece[64];
                size_t len = 0;
                if (llm_detokenize(tok, &id, 1, 0, piece, sizeof piece, &len) == LLM_OK && len > longest_len) {
                  longest = id;
                  longest_len = len;
                }
              }
              std::vector<int32_t> ids((size_t{16} << 20) / longest_len + 1, longest);
              size_t len = 0;
              char c;
              const llm_status dec = llm_detokenize(tok, ids.data(), ids.size(), 0, &c, 1, &len);
              // A chat over the limit.
              llm_chat_message m = {"user", huge.c_str()};
              const llm_status chat = llm_chat_apply_template(tok, &m, 1, 1, 0, &c, 1, &len);
              llm_tokenizer_destroy(tok);
              std::string r = ExpectStatus(enc, LLM_ERR_OUT_OF_RANGE, "a 16 MiB + 1 text");
              if (r.empty()) r = ExpectStatus(dec, LLM_ERR_OUT_OF_RANGE, "a decoded text over 16 MiB");
              if (r.empty()) r = ExpectStatus(chat, LLM_ERR_OUT_OF_RANGE, "a chat over 16 MiB");
              return r;
            }, 60),
            "");
}

}  // namespace
}  // namespace llmrt::hostile
