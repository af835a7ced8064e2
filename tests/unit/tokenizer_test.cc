// The C++ tokenizers against tiktoken and Hugging Face tokenizers (tests/data/tokenizers/
// golden.json from tools/make_tokenizer_golden.py): exact ids for every string, round trips,
// and the incremental detokenizer.
#include "src/tokenizer/tokenizer.h"

#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/tokenizer/chat.h"
#include "src/tokenizer/detokenizer.h"
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
    EXPECT_EQ(t->Encode(c.input, /*parse_special=*/true), c.kimi) << "case " << n << ": " << c.input.substr(0, 60);
    EXPECT_EQ(t->Encode(c.input, /*parse_special=*/false), c.kimi_ordinary) << "case " << n;
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
    EXPECT_EQ(t->Encode(c.input, /*parse_special=*/true), c.glm) << "case " << n << ": " << c.input.substr(0, 60);
    ++n;
  }
}

TEST(Tokenizer, DecodeRoundTripsEveryString) {
  for (const char* fam : {"kimi", "glm"}) {
    auto t = Load(fam);
    ASSERT_NE(t, nullptr);
    for (const auto& c : Cases()) {
      const std::string want = Utf8Sanitize(c.input);
      auto whole = Decode(*t, t->Encode(c.input, true), /*skip_special=*/false);
      ASSERT_TRUE(whole.ok());
      EXPECT_EQ(*whole, want) << fam;
    }
  }
}

TEST(Tokenizer, IncrementalDetokenizerNeverSplitsACharacter) {
  auto t = Load("kimi");
  ASSERT_NE(t, nullptr);
  for (const auto& c : Cases()) {
    const std::vector<int32_t> ids = t->Encode(c.input, true);
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
  auto ids = t->Encode(*ApplyChatTemplate(TokenizerFamily::kKimi, m, true, false), true);
  EXPECT_EQ(ids.front(), t->SpecialId("<|im_system|>"));
  EXPECT_EQ(ids.back(), t->SpecialId("<|im_middle|>"));
}

TEST(Tokenizer, MissingAndCorruptFilesAreClearErrors) {
  EXPECT_EQ(Tokenizer::Load(Data("no_such_dir")).status().code(), absl::StatusCode::kNotFound);
  // A checkpoint directory without tokenizer files.
  EXPECT_EQ(Tokenizer::Load(Data("tiny_kimi_k2_qlora_yarn")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace llmrt
