// The C++ tokenizers against tiktoken and Hugging Face tokenizers (tests/data/tokenizers/
// golden.json from tools/make_tokenizer_golden.py): exact ids for every string, round trips,
// and the incremental detokenizer.
#include "src/tokenizer/tokenizer.h"

#include <fstream>
#include <random>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/chat.h"
#include "src/tokenizer/detokenizer.h"
#include "src/tokenizer/special_matcher.h"
#include "src/tokenizer/utf8.h"

namespace llmrt {
namespace {

std::string Data(const std::string& n) { return std::string(LLMRT_TEST_DATA) + "/" + n; }

struct Case {
  std::string input;
  std::vector<int32_t> kimi, kimi_ordinary, glm;
};

std::vector<Case> Cases() {
  std::ifstream in(Data("tokenizers/golden.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Case> out;
  for (const auto& c : j["cases"]) {
    Case k;
    if (c.contains("file")) {
      std::ifstream f(Data(c["file"].get<std::string>()), std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      k.input = ss.str();
    } else {
      k.input = absl::HexStringToBytes(c["hex"].get<std::string>());
    }
    k.kimi = c["kimi"].get<std::vector<int32_t>>();
    k.kimi_ordinary = c["kimi_ordinary"].get<std::vector<int32_t>>();
    k.glm = c["glm"].get<std::vector<int32_t>>();
    out.push_back(std::move(k));
  }
  return out;
}

// Encode, which must succeed for every test string.
std::vector<int32_t> Enc(const Tokenizer& t, std::string_view text, bool parse_special) {
  auto ids = t.Encode(text, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *std::move(ids) : std::vector<int32_t>();
}

std::unique_ptr<Tokenizer> Load(const char* fam) {
  auto t = Tokenizer::Load(Data(std::string("tokenizers/") + fam));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(Tokenizer, KimiMatchesTiktokenExactly) {
  auto t = Load("kimi");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->family(), TokenizerFamily::kKimi);
  EXPECT_EQ(t->vocab_size(), 4096);
  EXPECT_EQ(t->SpecialId("<|im_end|>"), 3840 + 2);
  EXPECT_EQ(t->bos_id(), 3840);
  int n = 0;
  for (const auto& c : Cases()) {
    EXPECT_EQ(Enc(*t, c.input, /*parse_special=*/true), c.kimi) << "case " << n << ": " << c.input.substr(0, 60);
    EXPECT_EQ(Enc(*t, c.input, /*parse_special=*/false), c.kimi_ordinary) << "case " << n;
    ++n;
  }
  EXPECT_GT(n, 80);
}

TEST(Tokenizer, GlmMatchesHuggingFaceTokenizersExactly) {
  auto t = Load("glm");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->family(), TokenizerFamily::kGlm);
  EXPECT_EQ(t->SpecialId("[gMASK]"), 3840 + 2);
  EXPECT_EQ(t->eos_id(), 3840);
  int n = 0;
  for (const auto& c : Cases()) {
    EXPECT_EQ(Enc(*t, c.input, /*parse_special=*/true), c.glm) << "case " << n << ": " << c.input.substr(0, 60);
    ++n;
  }
}

TEST(Tokenizer, DecodeRoundTripsEveryString) {
  for (const char* fam : {"kimi", "glm"}) {
    auto t = Load(fam);
    ASSERT_NE(t, nullptr);
    for (const auto& c : Cases()) {
      const std::string want = Utf8Sanitize(c.input);
      auto whole = Decode(*t, Enc(*t, c.input, true), /*skip_special=*/false);
      ASSERT_TRUE(whole.ok());
      EXPECT_EQ(*whole, want) << fam;
    }
  }
}

TEST(Tokenizer, IncrementalDetokenizerNeverSplitsACharacter) {
  auto t = Load("kimi");
  ASSERT_NE(t, nullptr);
  for (const auto& c : Cases()) {
    const std::vector<int32_t> ids = Enc(*t, c.input, true);
    IncrementalDetokenizer d(*t, false);
    std::string out, chunk;
    for (int32_t id : ids) {
      chunk.clear();
      ASSERT_TRUE(d.Push(id, &chunk).ok());
      // Every emitted chunk is valid UTF-8 on its own.
      EXPECT_EQ(Utf8Sanitize(chunk), chunk);
      out += chunk;
    }
    d.Flush(&out);
    EXPECT_EQ(out, Utf8Sanitize(c.input));
  }
  // Byte tokens of one 4-byte character, pushed one at a time, come out as one piece.
  IncrementalDetokenizer d(*t, false);
  std::string out;
  const std::string smile = "\xf0\x9f\x99\x82";
  for (unsigned char b : smile) {
    // In a tiktoken file the single bytes have ranks 0..255 in byte order.
    ASSERT_EQ(*t->Piece(b), std::string(1, static_cast<char>(b)));
    std::string chunk;
    ASSERT_TRUE(d.Push(b, &chunk).ok());
    if (b != 0x82) {
      EXPECT_TRUE(chunk.empty());
    }
    out += chunk;
  }
  EXPECT_EQ(out, smile);
  std::string tail;
  EXPECT_FALSE(d.Push(99999, &tail).ok());
}

TEST(Tokenizer, SanitizeFollowsPythonReplace) {
  EXPECT_EQ(Utf8Sanitize("abc\xff\xfe" "def"), "abc\xef\xbf\xbd\xef\xbf\xbd" "def");
  EXPECT_EQ(Utf8Sanitize("\xe2\x82"), "\xef\xbf\xbd");
  EXPECT_EQ(Utf8Sanitize("\xe2\x82" "A"), "\xef\xbf\xbd" "A");
  EXPECT_EQ(Utf8Sanitize("\xf0\x80\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // overlong: byte by byte
  EXPECT_EQ(Utf8Sanitize("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
}

TEST(Tokenizer, ChatTemplates) {
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Who made the heaven?"}};
  EXPECT_EQ(*ApplyChatTemplate(TokenizerFamily::kKimi, m, true, false),
            "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Who made the "
            "heaven?<|im_end|><|im_assistant|>assistant<|im_middle|>");
  EXPECT_EQ(*ApplyChatTemplate(TokenizerFamily::kGlm, m, true, false),
            "[gMASK]<sop><|system|>\nBe brief.<|user|>\nWho made the heaven?<|assistant|>\n</think>");
  EXPECT_EQ(*ApplyChatTemplate(TokenizerFamily::kGlm, m, true, true),
            "[gMASK]<sop><|system|>\nBe brief.<|user|>\nWho made the heaven?<|assistant|><think>");
  EXPECT_FALSE(ApplyChatTemplate(TokenizerFamily::kKimi, {{"wizard", "x"}}, true, false).ok());
  // The rendered Kimi prompt tokenizes its markers as single special ids.
  auto t = Load("kimi");
  ASSERT_NE(t, nullptr);
  auto ids = Enc(*t, *ApplyChatTemplate(TokenizerFamily::kKimi, m, true, false), true);
  EXPECT_EQ(ids.front(), t->SpecialId("<|im_system|>"));
  EXPECT_EQ(ids.back(), t->SpecialId("<|im_middle|>"));
}

TEST(Tokenizer, MissingAndCorruptFilesAreClearErrors) {
  EXPECT_EQ(Tokenizer::Load(Data("no_such_dir")).status().code(), absl::StatusCode::kNotFound);
  // A checkpoint directory without tokenizer files.
  EXPECT_EQ(Tokenizer::Load(Data("tiny_kimi_k2_qlora_yarn")).status().code(), absl::StatusCode::kNotFound);
}

// The heap merges against the references' own loops on strings full of ties: tiktoken rescans
// for the first lowest rank after every merge; tokenizers' order is the lowest (rank, position)
// among the current pairs.
std::vector<int32_t> NaiveTiktoken(const absl::flat_hash_map<std::string, int32_t>& ranks, const std::string& piece) {
  auto rank = [&](size_t a, size_t b) {
    auto it = ranks.find(piece.substr(a, b - a));
    return it == ranks.end() ? INT32_MAX : it->second;
  };
  if (auto it = ranks.find(piece); it != ranks.end()) return {it->second};
  std::vector<size_t> starts;
  for (size_t i = 0; i <= piece.size(); ++i) starts.push_back(i);
  for (;;) {
    int32_t best = INT32_MAX;
    size_t bi = 0;
    for (size_t i = 0; i + 2 < starts.size(); ++i) {
      const int32_t r = rank(starts[i], starts[i + 2]);
      if (r < best) {
        best = r;
        bi = i;
      }
    }
    if (best == INT32_MAX) break;
    starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(bi) + 1);
  }
  std::vector<int32_t> out;
  for (size_t i = 0; i + 1 < starts.size(); ++i) out.push_back(rank(starts[i], starts[i + 1]));
  return out;
}

TEST(Tokenizer, HeapMergingEqualsTheReferenceLoops) {
  // All bytes, then tokens over {a, b} whose pairs tie and overlap.
  absl::flat_hash_map<std::string, int32_t> ranks;
  for (int b = 0; b < 256; ++b) ranks[std::string(1, static_cast<char>(b))] = b;
  const std::vector<std::string> extra = {"aa", "ab", "ba", "bb", "aaa", "aab", "abb", "baa", "aaaa", "abab",
                                          "bbb", "aabb", "abba", "baab", "aaaaa", "bab", "aba"};
  for (const auto& t : extra) ranks[t] = static_cast<int32_t>(ranks.size());
  TiktokenBpe tiktoken(ranks);
  // The same tokens as merge rules, in rank order, for the tokenizers algorithm: each token of
  // length > 1 is made by every split whose halves are tokens (several rules per token).
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& t : extra) {
    for (size_t k = 1; k < t.size(); ++k) {
      if (ranks.contains(t.substr(0, k)) && ranks.contains(t.substr(k))) merges.emplace_back(t.substr(0, k), t.substr(k));
    }
  }
  std::string error;
  const MergesBpe hf = MergesBpe::Build(ranks, merges, &error);
  ASSERT_EQ(error, "");
  absl::flat_hash_map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> rules;  // pair -> (rank, id)
  for (size_t r = 0; r < merges.size(); ++r) {
    rules[{ranks[merges[r].first], ranks[merges[r].second]}] = {static_cast<int32_t>(r), ranks[merges[r].first + merges[r].second]};
  }
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string piece(1 + rng() % 40, 'a');
    for (char& c : piece) c = "aab"[rng() % 3];
    std::vector<int32_t> got;
    tiktoken.Encode(piece, &got);
    EXPECT_EQ(got, NaiveTiktoken(ranks, piece)) << piece;
    // tokenizers, naively: apply the lowest (rank, position) rule until none applies.
    std::vector<int32_t> sym;
    for (char c : piece) sym.push_back(ranks[std::string(1, c)]);
    for (;;) {
      int32_t best = INT32_MAX, id = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = rules.find({sym[i], sym[i + 1]});
        if (it != rules.end() && it->second.first < best) {
          best = it->second.first;
          id = it->second.second;
          at = i;
        }
      }
      if (id < 0) break;
      sym[at] = id;
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    got.clear();
    hf.Encode(piece, &got);
    EXPECT_EQ(got, sym) << piece;
  }
}

// tokenization_kimi.py cuts a text every 400,000 characters and wherever a run of whitespace or
// of other characters (Python's str.isspace, which unlike the regex's \s also counts
// U+001C..U+001F) passes 25,000. Reference ids from tools/tokenizer_long_text.py --files.
TEST(Tokenizer, KimiCutsLongTextsAsTokenizationKimiDoes) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::string text = repeat("\xe3\x80\x80", 30000) + repeat("\xc3\xa9", 30000) + repeat("\x1c\xc2\x85", 20000) +
                           "end" + repeat("ab ", 150000) + repeat("\xe2\x80\xa8", 26000) + "z";
  auto fnv = [](const std::vector<int32_t>& ids) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t id : ids) h = (h ^ static_cast<uint32_t>(id)) * 1099511628211ull;
    return h;
  };
  auto kimi = Load("kimi");
  auto glm = Load("glm");
  ASSERT_NE(kimi, nullptr);
  ASSERT_NE(glm, nullptr);
  const std::vector<int32_t> k = Enc(*kimi, text, true), g = Enc(*glm, text, true);
  EXPECT_EQ(k.size(), 438004u);
  EXPECT_EQ(fnv(k), 0x267af3edf87129feull);
  // Hugging Face tokenizers does not cut.
  EXPECT_EQ(g.size(), 438003u);
  EXPECT_EQ(fnv(g), 0x5390852117409337ull);
}

TEST(Tokenizer, SpecialTokensMatchLeftmostThenLongest) {
  SpecialMatcher m;
  m.Add("<a>", 1);
  m.Add("<a><b>", 2);
  m.Add("b>", 3);
  m.Add("<a>", 9);  // a repeated text keeps its first id
  m.Add("", 4);     // never matches
  auto found = m.Find("x<a><b>y", 0);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->pos, 1u);
  EXPECT_EQ(found->len, 6u);
  EXPECT_EQ(found->id, 2);
  found = m.Find("x<a><c>b>", 0);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, 1);
  found = m.Find("x<a><c>b>", 2);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->pos, 7u);
  EXPECT_EQ(found->id, 3);
  EXPECT_FALSE(m.Find("<<a", 0).has_value());
}

}  // namespace
}  // namespace llmrt
