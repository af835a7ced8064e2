// The llm-server sample's pure parts: stop-string hold-back, request parsing and validation,
// Prometheus rendering, command-line options. The HTTP behaviour is tested end to end by the pytest suite here.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "metrics.h"
#include "openai_api.h"
#include "options.h"
#include "text_stream.h"

namespace llm_server {
namespace {

// Feeds pieces one by one; returns the concatenated output and whether a stop string ended it.
std::pair<std::string, bool> Feed(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const std::string& p : pieces) {
    if (m.Push(p, &out)) return {out, true};
  }
  m.Flush(&out);
  return {out, false};
}

TEST(StopMatcher, PassesTextThroughWithoutStops) {
  EXPECT_EQ(Feed({}, {"a", "b", "c"}), std::make_pair(std::string("abc"), false));
}

TEST(StopMatcher, StopInsideOnePiece) {
  EXPECT_EQ(Feed({"world"}, {"hello world again"}), std::make_pair(std::string("hello "), true));
}

TEST(StopMatcher, StopSplitAcrossPieces) {
  EXPECT_EQ(Feed({"world"}, {"hello wo", "r", "ld!"}), std::make_pair(std::string("hello "), true));
}

TEST(StopMatcher, HoldsBackOnlyWhatMayStartAStop) {
  StopMatcher m({"world"});
  std::string out;
  EXPECT_FALSE(m.Push("hello wo", &out));
  EXPECT_EQ(out, "hello ");  // "wo" may begin "world"
  EXPECT_FALSE(m.Push("x", &out));
  EXPECT_EQ(out, "hello wox");  // it did not
  m.Flush(&out);
  EXPECT_EQ(out, "hello wox");
}

TEST(StopMatcher, FlushReleasesAnUndecidedTail) {
  EXPECT_EQ(Feed({"world"}, {"hello wor"}), std::make_pair(std::string("hello wor"), false));
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  EXPECT_EQ(Feed({"cd", "b"}, {"abcd"}), std::make_pair(std::string("a"), true));
  EXPECT_EQ(Feed({"bc", "abx"}, {"a", "b", "c"}), std::make_pair(std::string("a"), true));
}

TEST(StopMatcher, StopAtTheStartGivesNothing) {
  EXPECT_EQ(Feed({"\n"}, {"\n", "more"}), std::make_pair(std::string(""), true));
}

TEST(StopMatcher, RepeatedPrefixCharacters) {
  // "aab": after "aa" both "a" and "aa" are candidate prefixes; the longer one is held.
  EXPECT_EQ(Feed({"aab"}, {"xa", "a", "a", "b"}), std::make_pair(std::string("xa"), true));
}

TEST(StopMatcher, MultibyteStop) {
  EXPECT_EQ(Feed({"\xc3\xa9t\xc3\xa9"}, {"un \xc3\xa9", "t\xc3\xa9 chaud"}), std::make_pair(std::string("un "), true));
}

TEST(StopMatcher, NothingAfterTheStop) {
  StopMatcher m({"x"});
  std::string out;
  EXPECT_TRUE(m.Push("axb", &out));
  EXPECT_TRUE(m.Push("more", &out));
  m.Flush(&out);
  EXPECT_EQ(out, "a");
}

std::optional<ApiError> Parse(const std::string& body, Endpoint ep, GenerationRequest* g) {
  return ParseGenerationRequest(body, ep, g);
}

TEST(ParseGenerationRequest, CompletionDefaults) {
  GenerationRequest g;
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": "hi"})", Endpoint::kCompletions, &g));
  EXPECT_EQ(g.model, "m");
  EXPECT_EQ(g.prompt_text, "hi");
  EXPECT_FALSE(g.prompt_is_ids);
  EXPECT_FALSE(g.max_tokens.has_value());
  EXPECT_FLOAT_EQ(g.temperature, 1.0f);
  EXPECT_FLOAT_EQ(g.top_p, 1.0f);
  EXPECT_FALSE(g.stream);
  EXPECT_FALSE(g.seed.has_value());
}

TEST(ParseGenerationRequest, PromptForms) {
  GenerationRequest g;
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": [1, 2, 3]})", Endpoint::kCompletions, &g));
  EXPECT_TRUE(g.prompt_is_ids);
  EXPECT_EQ(g.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": [[4, 5]]})", Endpoint::kCompletions, &g));
  EXPECT_EQ(g.prompt_ids, (std::vector<int32_t>{4, 5}));
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": ["one"]})", Endpoint::kCompletions, &g));
  EXPECT_EQ(g.prompt_text, "one");
  auto e = Parse(R"({"model": "m", "prompt": ["one", "two"]})", Endpoint::kCompletions, &g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
  e = Parse(R"({"model": "m", "prompt": [1.5]})", Endpoint::kCompletions, &g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 400);
  e = Parse(R"({"model": "m", "prompt": []})", Endpoint::kCompletions, &g);
  ASSERT_TRUE(e);
}

TEST(ParseGenerationRequest, SamplingFields) {
  GenerationRequest g;
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": "x", "max_tokens": 7, "temperature": 0, "top_p": 0.5,
                         "seed": -3, "top_k": -1, "min_p": 0.1, "stop": ["a", "", "b"], "stream": true,
                         "stream_options": {"include_usage": true}, "user": "u", "n": 1, "logprobs": null,
                         "presence_penalty": 0, "unknown_extension": {"x": 1}})",
                     Endpoint::kCompletions, &g));
  EXPECT_EQ(*g.max_tokens, 7u);
  EXPECT_FLOAT_EQ(g.temperature, 0.0f);
  EXPECT_FLOAT_EQ(g.top_p, 0.5f);
  EXPECT_EQ(*g.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(g.top_k, 0);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"a", "b"}));  // empty strings never match
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
  EXPECT_EQ(g.user, "u");
}

TEST(ParseGenerationRequest, ChatMessagesAndMaxCompletionTokens) {
  GenerationRequest g;
  ASSERT_FALSE(Parse(R"({"model": "m", "max_tokens": 5, "max_completion_tokens": 9, "messages": [
                           {"role": "system", "content": "s"},
                           {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                           {"role": "assistant", "content": null}]})",
                     Endpoint::kChat, &g));
  ASSERT_EQ(g.messages.size(), 3u);
  EXPECT_EQ(g.messages[1].content, "ab");
  EXPECT_EQ(g.messages[2].content, "");
  EXPECT_EQ(*g.max_tokens, 9u);
}

TEST(ParseGenerationRequest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {Case{R"({"model": 1, "prompt": "x"})", "model"},
                        Case{R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens"},
                        Case{R"({"model": "m", "prompt": "x", "max_tokens": 1.0})", "max_tokens"},
                        Case{R"({"model": "m", "prompt": "x", "temperature": -0.1})", "temperature"},
                        Case{R"({"model": "m", "prompt": "x", "top_p": 1.5})", "top_p"},
                        Case{R"({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
                        Case{R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
                        Case{R"({"model": "m", "prompt": "x", "n": 3})", "n"},
                        Case{R"({"model": "m", "prompt": "x", "echo": true})", "echo"},
                        Case{R"({"model": "m", "prompt": "x", "best_of": 2})", "best_of"},
                        Case{R"({"model": "m", "prompt": "x", "frequency_penalty": 0.5})", "frequency_penalty"},
                        Case{R"({"model": "m", "prompt": "x", "logit_bias": {"1": 5}})", "logit_bias"},
                        Case{R"({"model": "m", "prompt": "x", "seed": 18446744073709551615})", "seed"},
                        Case{R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": 1}})",
                             "stream_options.include_usage"}}) {
    GenerationRequest g;
    auto e = Parse(c.body, Endpoint::kCompletions, &g);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->http_status, 400) << c.body;
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->param, c.param) << c.body;
    EXPECT_FALSE(e->message.empty());
  }
  GenerationRequest g;
  auto e = Parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
                 Endpoint::kChat, &g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools");
  EXPECT_EQ(e->code, "unsupported_parameter");
}

TEST(ParseGenerationRequest, MalformedJsonIsA400) {
  GenerationRequest g;
  for (const char* body : {"", "{", "nul", "[]", "\"x\"", "{\"model\": \"m\", \"prompt\": \"x\", \"seed\": 1e999}"}) {
    auto e = Parse(body, Endpoint::kCompletions, &g);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->http_status, 400) << body;
  }
}

TEST(ErrorJson, OpenAiShape) {
  ApiError e = InvalidRequest("bad \"thing\"", "field", "some_code");
  EXPECT_EQ(ErrorJson(e),
            R"({"error":{"code":"some_code","message":"bad \"thing\"","param":"field","type":"invalid_request_error"}})");
  e = InvalidRequest("m");
  EXPECT_EQ(ErrorJson(e), R"({"error":{"code":null,"message":"m","param":null,"type":"invalid_request_error"}})");
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({1, 2});
  h.Observe(0.5);
  h.Observe(1.5);
  h.Observe(1.5);
  h.Observe(9);
  std::string out;
  h.Render("x", "help", &out);
  EXPECT_EQ(out,
            "# HELP x help\n# TYPE x histogram\n"
            "x_bucket{le=\"1\"} 1\nx_bucket{le=\"2\"} 3\nx_bucket{le=\"+Inf\"} 4\nx_sum 12.5\nx_count 4\n");
}

TEST(Metrics, LabelledCounterAndEscaping) {
  LabelledCounter c;
  c.Add("code=\"200\"");
  c.Add("code=\"200\"", 2);
  c.Add("code=\"" + EscapeLabel("a\"b\\") + "\"");
  std::string out;
  c.Render("r", "h", &out);
  EXPECT_EQ(out, "# HELP r h\n# TYPE r counter\nr{code=\"200\"} 3\nr{code=\"a\\\"b\\\\\"} 1\n");
}

// The runtime's backend from --backend (auto by default); anything else is a usage error (exit 2).
int Parse(std::vector<std::string> args, ServerOptions* out) {
  args.insert(args.begin(), "llm-server");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  bool exit_now = false;
  return ParseArgs(static_cast<int>(argv.size()), argv.data(), out, &exit_now);
}

TEST(ServerOptions, Backend) {
  ServerOptions o;
  ASSERT_EQ(Parse({"--model", "m"}, &o), 0);
  EXPECT_EQ(o.backend, LLM_BACKEND_AUTO);
  const std::pair<const char*, int32_t> forms[] = {
      {"auto", LLM_BACKEND_AUTO}, {"cpu", LLM_BACKEND_CPU}, {"cuda", LLM_BACKEND_CUDA}};
  for (const auto& [name, backend] : forms) {
    ServerOptions p;
    ASSERT_EQ(Parse({"--model", "m", "--backend", name}, &p), 0) << name;
    EXPECT_EQ(p.backend, backend) << name;
  }
  ServerOptions bad;
  EXPECT_EQ(Parse({"--model", "m", "--backend", "gpu"}, &bad), 2);
  EXPECT_EQ(Parse({"--model", "m", "--backend"}, &bad), 2);
}

}  // namespace
}  // namespace llm_server
