// The OpenAI wire format: request bodies of /v1/completions and /v1/chat/completions parsed and
// validated into a GenerationRequest, and the JSON of responses, stream chunks and errors.
// Nothing here touches llmrt; the HTTP layer turns a GenerationRequest into tokens.
#ifndef LLMRT_SAMPLES_LLM_SERVER_OPENAI_API_H_
#define LLMRT_SAMPLES_LLM_SERVER_OPENAI_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llm_server {

// An error as the OpenAI API reports it: the HTTP status and the body
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 500;
  std::string type;      // "invalid_request_error", "rate_limit_error", "server_error", ...
  std::string message;   // names the field or limit at fault
  std::string param;     // the request field at fault; empty: null
  std::string code;      // a stable machine-readable code; empty: null
  int retry_after_s = 0; // > 0: sent as Retry-After
};

ApiError InvalidRequest(std::string message, std::string param = "", std::string code = "");
std::string ErrorJson(const ApiError& e);

enum class Endpoint { kCompletions, kChat };

struct ChatMessage {
  std::string role;
  std::string content;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // /v1/completions: the prompt as text, or as token ids (prompt_is_ids).
  std::string prompt_text;
  bool prompt_is_ids = false;
  std::vector<int32_t> prompt_ids;
  // /v1/chat/completions.
  std::vector<ChatMessage> messages;
  std::optional<uint32_t> max_tokens;  // absent: 16 for completions, the rest of the context for chat
  std::string max_tokens_field = "max_tokens";  // the field it came from (chat: or max_completion_tokens)
  float temperature = 1.0f;            // OpenAI's default; 0 is greedy
  float top_p = 1.0f;
  int32_t top_k = 0;                   // extension (as vLLM): 0 = off
  float min_p = 0.0f;                  // extension (as vLLM): 0 = off
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;       // at most 4 non-empty strings
  bool ignore_eos = false;             // extension (as vLLM): generate max_tokens whatever is sampled
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::string user;
};

// Parses `body` for `endpoint`. Unknown fields are ignored (clients send extensions); fields this
// server does not implement (n > 1, logprobs, echo, best_of, penalties, logit_bias, tools) are
// refused with a 400 naming them rather than silently ignored.
std::optional<ApiError> ParseGenerationRequest(std::string_view body, Endpoint endpoint, GenerationRequest* out);

struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
};

// The non-streaming response object ("text_completion" or "chat.completion").
std::string CompletionJson(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                           const std::string& text, const std::string& finish_reason, const Usage& usage);

// One streaming chunk ("text_completion" or "chat.completion.chunk"). `first` adds the chat
// delta's role; `finish_reason` empty is null; `usage` is included when given.
std::string ChunkJson(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                      const std::string& text, bool first, const std::string& finish_reason,
                      const Usage* usage);

// The stream_options.include_usage chunk: no choices, only usage.
std::string UsageChunkJson(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage);

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_OPENAI_API_H_
