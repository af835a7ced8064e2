#include "openai_api.h"

#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace llm_server {
namespace {

using Json = nlohmann::json;

// Invalid UTF-8 never reaches our output (the detokenizer emits whole characters), but error
// messages quote client strings: replace rather than throw.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json NullOr(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

const char* TypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

// Field readers: absent and null leave *out as it is; a wrong type or range is a 400 naming the
// field.
std::optional<ApiError> ReadNumber(const Json& body, const char* key, double lo, double hi, bool lo_open,
                                   float* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    return InvalidRequest(std::string("'") + key + "' must be a number, got " + TypeName(*it), key);
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
    return InvalidRequest(std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") + Dump(Json(lo)) + ", " +
                              Dump(Json(hi)) + "], got " + Dump(*it),
                          key);
  }
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const Json& body, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return InvalidRequest(std::string("'") + key + "' must be an integer, got " + TypeName(*it), key);
  }
  // Unsigned JSON integers above INT64_MAX are out of every range we accept.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidRequest(std::string("'") + key + "' is out of range: " + Dump(*it), key);
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return InvalidRequest(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(v),
                          key);
  }
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const Json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    return InvalidRequest(std::string("'") + key + "' must be a boolean, got " + TypeName(*it), key);
  }
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> Unsupported(const char* key, const std::string& what) {
  return InvalidRequest(std::string("'") + key + "' " + (what.empty() ? "" : what + " ") + "is not supported by this server", key,
                        "unsupported_parameter");
}

// Fields of the API this server does not implement: refused when they ask for behaviour.
std::optional<ApiError> RefuseUnsupported(const Json& body, Endpoint endpoint) {
  if (auto it = body.find("n"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1) return Unsupported("n", "other than 1");
  }
  if (auto it = body.find("best_of"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1) return Unsupported("best_of", "other than 1");
  }
  if (auto it = body.find("echo"); it != body.end() && !it->is_null() && *it != Json(false)) {
    return Unsupported("echo", "true");
  }
  // (A completion's logprobs of 0 still asks for the sampled token's log-probability.)
  if (auto it = body.find("logprobs"); it != body.end() && !it->is_null() && *it != Json(false)) {
    return Unsupported("logprobs", "");
  }
  if (auto it = body.find("top_logprobs"); it != body.end() && !it->is_null() && *it != Json(0)) {
    return Unsupported("top_logprobs", "");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (auto it = body.find(key); it != body.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0)) {
      return Unsupported(key, "other than 0");
    }
  }
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null() && !(it->is_object() && it->empty())) {
    return Unsupported("logit_bias", "");
  }
  for (const char* key : {"tools", "functions"}) {
    if (auto it = body.find(key); it != body.end() && !it->is_null() && !(it->is_array() && it->empty())) {
      return Unsupported(key, "(tool calling)");
    }
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || it->value("type", Json("text")) != Json("text")) {
      return Unsupported("response_format", "other than {\"type\": \"text\"}");
    }
  }
  if (endpoint == Endpoint::kCompletions) {
    if (auto it = body.find("suffix"); it != body.end() && !it->is_null() && *it != Json("")) {
      return Unsupported("suffix", "");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ReadTokenIds(const Json& arr, const char* param, std::vector<int32_t>* out) {
  if (arr.empty()) return InvalidRequest("'prompt' is an empty list of token ids", param);
  out->reserve(arr.size());
  for (const Json& v : arr) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return InvalidRequest("'prompt' token ids must be non-negative integers, got " + Dump(v), param);
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return std::nullopt;
}

// prompt: a string, a list of token ids, or a list holding exactly one of those (a batch of
// several prompts would need n choices per request; use one request per prompt).
std::optional<ApiError> ReadPrompt(const Json& body, GenerationRequest* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return InvalidRequest("'prompt' is required", "prompt");
  const Json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out->prompt_text = p->get<std::string>();
    return std::nullopt;
  }
  if (p->is_array()) {
    if (!p->empty() && (*p)[0].is_string()) {
      return InvalidRequest("'prompt' holds " + std::to_string(p->size()) +
                                " prompts; this server takes one prompt per request",
                            "prompt");
    }
    out->prompt_is_ids = true;
    return ReadTokenIds(*p, "prompt", &out->prompt_ids);
  }
  return InvalidRequest(std::string("'prompt' must be a string or a list of token ids, got ") + TypeName(*p), "prompt");
}

std::optional<ApiError> ReadMessages(const Json& body, GenerationRequest* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return InvalidRequest("'messages' is required", "messages");
  if (!it->is_array() || it->empty()) return InvalidRequest("'messages' must be a non-empty array", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return InvalidRequest("'" + where + "' must be an object", where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return InvalidRequest("'" + where + ".role' must be a string", where + ".role");
    ChatMessage msg;
    msg.role = role->get<std::string>();
    // The API's newer name for the system role ("developer messages", which replace system
    // messages): the model's templates know the system role.
    if (msg.role == "developer") msg.role = "system";
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant turn that only called tools has no content; others must have some.
      if (msg.role != "assistant") return InvalidRequest("'" + where + ".content' is required", where + ".content");
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const Json& part = (*content)[k];
        const std::string pw = where + ".content[" + std::to_string(k) + "]";
        if (!part.is_object() || part.value("type", Json()) != Json("text") || !part.contains("text") ||
            !part["text"].is_string()) {
          return InvalidRequest("'" + pw + "' must be {\"type\": \"text\", \"text\": ...}; this model reads text only",
                                pw);
        }
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return InvalidRequest("'" + where + ".content' must be a string or an array of text parts", where + ".content");
    }
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadStop(const Json& body, GenerationRequest* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) out->stop.push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array() || it->size() > 4) {
    return InvalidRequest("'stop' must be a string or an array of at most 4 strings", "stop");
  }
  for (const Json& s : *it) {
    if (!s.is_string()) return InvalidRequest("'stop' entries must be strings, got " + std::string(TypeName(s)), "stop");
    if (!s.get<std::string>().empty()) out->stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

}  // namespace

ApiError InvalidRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.type = "invalid_request_error";
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string ErrorJson(const ApiError& e) {
  return Dump(Json{{"error", {{"message", e.message}, {"type", e.type}, {"param", NullOr(e.param)},
                              {"code", NullOr(e.code)}}}});
}

std::optional<ApiError> ParseGenerationRequest(std::string_view body, Endpoint endpoint, GenerationRequest* out) {
  *out = GenerationRequest{};
  out->endpoint = endpoint;
  Json j;
  try {
    j = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    return InvalidRequest(std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) {
    return InvalidRequest(std::string("the request body must be a JSON object, got ") + TypeName(j), "", "invalid_json");
  }
  auto model = j.find("model");
  if (model == j.end() || !model->is_string()) return InvalidRequest("'model' must be a string", "model");
  out->model = model->get<std::string>();
  if (auto e = RefuseUnsupported(j, endpoint)) return e;
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = ReadPrompt(j, out)) return e;
  } else {
    if (auto e = ReadMessages(j, out)) return e;
  }
  std::optional<int64_t> max_tokens;
  const char* max_key = "max_tokens";
  if (endpoint == Endpoint::kChat && j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()) {
    max_key = "max_completion_tokens";
  }
  if (auto e = ReadInt(j, max_key, 1, std::numeric_limits<int32_t>::max(), &max_tokens)) return e;
  if (max_tokens) out->max_tokens = static_cast<uint32_t>(*max_tokens);
  out->max_tokens_field = max_key;
  if (auto e = ReadNumber(j, "temperature", 0.0, 2.0, false, &out->temperature)) return e;
  if (auto e = ReadNumber(j, "top_p", 0.0, 1.0, true, &out->top_p)) return e;
  if (auto e = ReadNumber(j, "min_p", 0.0, 1.0, false, &out->min_p)) return e;
  std::optional<int64_t> top_k;
  if (auto e = ReadInt(j, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k)) return e;
  if (top_k) out->top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);  // -1: off, as vLLM
  std::optional<int64_t> seed;
  if (auto e = ReadInt(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed)) {
    return e;
  }
  if (seed) out->seed = static_cast<uint64_t>(*seed);
  if (auto e = ReadStop(j, out)) return e;
  if (auto e = ReadBool(j, "stream", &out->stream)) return e;
  if (auto e = ReadBool(j, "ignore_eos", &out->ignore_eos)) return e;
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidRequest("'stream_options' must be an object", "stream_options");
    if (auto e = ReadBool(*it, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
    if (!out->stream) return InvalidRequest("'stream_options' is only allowed when 'stream' is true", "stream_options");
  }
  if (auto it = j.find("user"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidRequest("'user' must be a string", "user");
    out->user = it->get<std::string>();
  }
  return std::nullopt;
}

std::string CompletionJson(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                           const std::string& text, const std::string& finish_reason, const Usage& usage) {
  Json choice;
  if (endpoint == Endpoint::kChat) {
    choice = {{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"logprobs", nullptr},
              {"finish_reason", finish_reason}};
  } else {
    choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  }
  Json j = {{"id", id},
            {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", Json::array({choice})},
            {"usage",
             {{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}}}};
  return Dump(j);
}

std::string ChunkJson(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                      const std::string& text, bool first, const std::string& finish_reason, const Usage* usage) {
  Json choice;
  if (endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", NullOr(finish_reason)}};
  } else {
    choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", NullOr(finish_reason)}};
  }
  Json j = {{"id", id},
            {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", Json::array({choice})}};
  if (usage != nullptr) {
    j["usage"] = {{"prompt_tokens", usage->prompt_tokens},
                  {"completion_tokens", usage->completion_tokens},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  return Dump(j);
}

std::string UsageChunkJson(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage) {
  Json j = {{"id", id},
            {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", Json::array()},
            {"usage",
             {{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}}}};
  return Dump(j);
}

}  // namespace llm_server
