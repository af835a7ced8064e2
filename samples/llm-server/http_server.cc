#include "http_server.h"

#include <sys/socket.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "connection_probe.h"

namespace llm_server {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

// How long a request thread waits for its session's events before it checks the connection.
constexpr milliseconds kPollInterval{20};

std::string Sse(const std::string& json) { return "data: " + json + "\n\n"; }

// Names from the command line or the client may hold invalid UTF-8: replace, never throw.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

ApiError ServerError(int status, std::string code, std::string message) {
  ApiError e;
  e.http_status = status;
  e.type = "server_error";
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

// One generation as its request thread sees it: the session's events turned into text, usage
// and an outcome.
struct Generation {
  Generation(Engine* engine, std::shared_ptr<Request> request, const httplib::Request& req, int retry_after_s)
      : engine(engine),
        request(std::move(request)),
        probe(req.local_port, req.remote_addr, req.remote_port),
        retry_after_s(retry_after_s),
        admitted(std::chrono::steady_clock::now()) {}

  // Applies step events; appends the text they release to *out.
  void Apply(const std::vector<StepEvent>& events, std::string* out) {
    for (const StepEvent& e : events) {
      if (done) return;
      if (e.token != LLM_TOKEN_NONE) {
        if (usage.completion_tokens == 0) {
          engine->ObserveTimeToFirstToken(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - admitted).count());
        }
        ++usage.completion_tokens;
      }
      *out += e.text;
      if (e.stop_string) {
        // A stop string ended the reply (the engine cancelled the session).
        done = true;
        finish_reason = "stop";
        return;
      }
      if (e.finish_reason == LLM_FINISH_NONE && e.status == LLM_OK) continue;
      done = true;
      if (e.status == LLM_OK && (e.finish_reason == LLM_FINISH_STOP || e.finish_reason == LLM_FINISH_LENGTH)) {
        finish_reason = e.finish_reason == LLM_FINISH_STOP ? "stop" : "length";
      } else {
        error = ErrorFor(e);
      }
    }
  }

  ApiError ErrorFor(const StepEvent& e) const {
    switch (e.status) {
      case LLM_ERR_KV_EXHAUSTED: {
        ApiError err = ServerError(503, "kv_cache_exhausted",
                                   "the KV cache has no free page for this request's next tokens; retry later");
        err.retry_after_s = retry_after_s;
        return err;
      }
      case LLM_ERR_KV_INTEGRITY:
        return ServerError(500, "kv_integrity_violation",
                           "KV cache integrity check failed for this request: " + std::to_string(e.failed_pages) +
                               " of its pages (first: page " + std::to_string(e.failed_page) +
                               ") no longer hold its data; the request was aborted, other requests are unaffected");
      case LLM_ERR_CANCELLED:
        return ServerError(503, "shutting_down", "the request was cancelled: the server is shutting down");
      default:
        return ServerError(500, "generation_failed",
                           std::string("generation failed: ") + llm_status_string(e.status));
    }
  }

  // Waits up to kPollInterval for events and applies them. Returns false when the client hung
  // up: the session is then cancelled (its pages freed at once).
  bool Poll(std::string* out) {
    std::vector<StepEvent> events;
    if (request->Wait(kPollInterval, &events)) Apply(events, out);
    if (!done && probe.Closed()) {
      engine->Cancel(request.get(), CancelReason::kDisconnect);
      done = true;
      ApiError e;
      e.http_status = 499;  // nginx's "client closed request": only the access log sees it
      e.type = "invalid_request_error";
      e.message = "the client closed the connection";
      error = e;
      return false;
    }
    return true;
  }

  Engine* const engine;
  const std::shared_ptr<Request> request;
  const ConnectionProbe probe;
  const int retry_after_s;
  const std::chrono::steady_clock::time_point admitted;
  Usage usage;
  bool done = false;
  std::string finish_reason;
  std::optional<ApiError> error;
  // Streaming.
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
  bool first_chunk_sent = false;
  bool final_sent = false;
  std::string pending;  // text released before the response headers went out
};

// Decrements the in-flight count when the handler returns, unless a stream took it over.
class InFlightGuard {
 public:
  explicit InFlightGuard(std::atomic<int>* n) : n_(n) { ++*n_; }
  ~InFlightGuard() {
    if (n_ != nullptr) --*n_;
  }
  void Release() { n_ = nullptr; }

 private:
  std::atomic<int>* n_;
};

std::string EndpointLabel(const std::string& path) {
  for (const char* p : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                        "/tokenize", "/detokenize", "/debug/corrupt"}) {
    if (path == p) return p;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, Engine* engine)
    : options_(options), engine_(engine), created_(static_cast<int64_t>(std::time(nullptr))) {
  Routes();
}

void HttpServer::SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(ErrorJson(e), "application/json");
}

void HttpServer::Routes() {
  const int threads = options_.http_threads;
  server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_.set_payload_max_length(options_.max_body_bytes);
  // SSE chunks are small: without TCP_NODELAY, Nagle's algorithm holds one back until the
  // client's delayed ACK, adding tens of milliseconds between tokens.
  server_.set_tcp_nodelay(true);

  server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(req, res, Endpoint::kCompletions);
  });
  server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(req, res, Endpoint::kChat);
  });
  auto model_json = [this] {
    return Json{{"id", options_.served_model_name}, {"object", "model"}, {"created", created_},
                {"owned_by", "llmrt"}, {"root", options_.model_dir}, {"max_model_len", engine_->context_length()}};
  };
  server_.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model_json()})}}), "application/json");
  });
  server_.Get("/v1/models/(.+)", [this, model_json](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != options_.served_model_name) {
      SendError(res, [&] {
        ApiError e = InvalidRequest("the model '" + std::string(req.matches[1]) + "' does not exist", "model",
                                    "model_not_found");
        e.http_status = 404;
        return e;
      }());
      return;
    }
    res.set_content(Dump(model_json()), "application/json");
  });
  server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      res.status = 503;
      res.set_content("{\"status\":\"shutting_down\"}", "application/json");
    } else {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    }
  });
  server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { HandleTokenize(req, res); });
  server_.Post("/detokenize",
               [this](const httplib::Request& req, httplib::Response& res) { HandleDetokenize(req, res); });
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { HandleMetrics(res); });
  if (options_.enable_test_hooks) {
    server_.Post("/debug/corrupt",
                 [this](const httplib::Request& req, httplib::Response& res) { HandleDebugCorrupt(req, res); });
  }

  // cpp-httplib 0.11 bounds only bodies that declare a Content-Length (413 above the limit): a
  // chunked body, or a POST with neither, it reads to the end whatever its size. Such requests
  // are refused before their body is read (411), and the connection is read no further once the
  // answer is out: its reading side is shut as the answer's last byte is written, so that the
  // server then sees the stream's end and closes it. (Shut before the answer, the answer was
  // lost: cpp-httplib checks that the peer is still there before it writes, and a reading side
  // at its end looks like a peer gone, unless more body than a page was still unread.)
  server_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method != "POST" && req.method != "PUT" && req.method != "PATCH" && req.method != "DELETE") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const bool chunked = req.has_header("Transfer-Encoding");
    if (!chunked && req.has_header("Content-Length")) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e = InvalidRequest(chunked ? "request bodies must be sent with a Content-Length, not Transfer-Encoding"
                                        : "a request body needs a Content-Length header",
                                "", "length_required");
    e.http_status = 411;
    res.status = e.http_status;
    res.set_header("Connection", "close");
    const std::string body = ErrorJson(e);
    const ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
    res.set_content_provider(body.size(), "application/json",
                             [body, probe](size_t offset, size_t length, httplib::DataSink& sink) {
                               sink.write(body.data() + offset, length);
                               if (offset + length >= body.size()) probe.StopReading();
                               return true;
                             });
    return httplib::Server::HandlerResponse::Handled;
  });

  // Every error cpp-httplib produces itself (unknown path 404, body over the limit 413, a
  // malformed request line 400) gets an OpenAI-style body too; ours already have one (in the
  // body, or from a content provider, which set the Content-Type).
  server_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                   httplib::Response& res) {
    if (!res.body.empty() || res.has_header("Content-Type")) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e = InvalidRequest("");
    e.http_status = res.status;
    if (res.status == 404 && req.method != "POST" &&
        (req.path == "/v1/completions" || req.path == "/v1/chat/completions" || req.path == "/tokenize" ||
         req.path == "/detokenize")) {
      e.http_status = res.status = 405;
      res.set_header("Allow", "POST");
      e.code = "method_not_allowed";
      e.message = req.method + " " + req.path + ": this URL takes POST";
    } else if (res.status == 404) {
      e.code = "not_found";
      e.message = "unknown request URL: " + req.method + " " + req.path;
    } else if (res.status == 413) {
      e.code = "request_too_large";
      e.message = "the request body is larger than this server accepts (--max-body-bytes)";
    } else {
      e.message = "the HTTP request was refused (status " + std::to_string(res.status) + ")";
    }
    res.set_content(ErrorJson(e), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  server_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    SendError(res, ServerError(500, "internal_error", "internal error: " + what));
  });
  server_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    requests_.Add("endpoint=\"" + EndpointLabel(req.path) + "\",code=\"" + std::to_string(res.status) + "\"");
    if (!options_.quiet) {
      std::fprintf(stderr, "llm-server: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    }
  });
}

int HttpServer::Bind() {
  const int port = options_.port == 0 ? server_.bind_to_any_port(options_.host)
                                      : (server_.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port < 0) return -1;
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients connecting at once would
  // see refused SYNs and a one-second retransmit. Listening again raises it (Linux allows it).
  ::listen(server_.listen_socket(), SOMAXCONN);
  return port;
}

bool HttpServer::Listen() { return server_.listen_after_bind(); }

std::optional<ApiError> HttpServer::BuildPrompt(const GenerationRequest& g, std::vector<int32_t>* prompt) {
  const llm_tokenizer* tok = engine_->tokenizer();
  std::string text;
  int32_t parse_special = 0;
  if (g.endpoint == Endpoint::kCompletions) {
    if (g.prompt_is_ids) {
      for (int32_t id : g.prompt_ids) {
        if (static_cast<uint32_t>(id) >= engine_->vocab_size()) {
          return InvalidRequest("'prompt' token id " + std::to_string(id) + " is outside the vocabulary of " +
                                    std::to_string(engine_->vocab_size()),
                                "prompt");
        }
      }
      *prompt = g.prompt_ids;
      return std::nullopt;
    }
    text = g.prompt_text;  // plain text: special-token spellings stay text
  } else {
    std::vector<llm_chat_message> msgs;
    for (const ChatMessage& m : g.messages) msgs.push_back({m.role.c_str(), m.content.c_str()});
    // The chat format inserts content as is: special-token text inside a message becomes that
    // token (as Hugging Face's apply_chat_template + encode does); see the README.
    for (const ChatMessage& m : g.messages) {
      if (m.content.find('\0') != std::string::npos) {
        return InvalidRequest("message content may not contain NUL characters", "messages");
      }
    }
    size_t len = 0;
    llm_status st = llm_chat_apply_template(tok, msgs.data(), msgs.size(), 1, 0, nullptr, 0, &len);
    if (st == LLM_ERR_BUFFER_TOO_SMALL || st == LLM_OK) {
      text.assign(len + 1, '\0');
      st = llm_chat_apply_template(tok, msgs.data(), msgs.size(), 1, 0, text.data(), text.size(), &len);
    }
    if (st != LLM_OK) {
      return InvalidRequest(std::string("the messages cannot be rendered in this model's chat format: ") +
                                llm_last_error(),
                            "messages");
    }
    text.resize(len);
    parse_special = 1;
  }
  size_t n = 0;
  llm_status st = llm_tokenize(tok, text.data(), text.size(), parse_special, nullptr, 0, &n);
  if (st == LLM_ERR_BUFFER_TOO_SMALL || st == LLM_OK) {
    prompt->resize(n);
    st = llm_tokenize(tok, text.data(), text.size(), parse_special, prompt->data(), prompt->size(), &n);
  }
  if (st != LLM_OK) {
    return InvalidRequest(std::string("the prompt cannot be tokenized: ") + llm_last_error(),
                          g.endpoint == Endpoint::kChat ? "messages" : "prompt");
  }
  prompt->resize(n);
  if (prompt->empty()) {
    return InvalidRequest("the prompt encodes to no tokens", g.endpoint == Endpoint::kChat ? "messages" : "prompt");
  }
  return std::nullopt;
}

void HttpServer::HandleGeneration(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  InFlightGuard in_flight(&in_flight_);
  if (draining_) {
    SendError(res, ServerError(503, "shutting_down", "the server is shutting down"));
    return;
  }
  GenerationRequest g;
  if (auto e = ParseGenerationRequest(req.body, endpoint, &g)) {
    SendError(res, *e);
    return;
  }
  if (g.model != options_.served_model_name) {
    ApiError e = InvalidRequest("the model '" + g.model + "' does not exist; this server serves '" +
                                    options_.served_model_name + "'",
                                "model", "model_not_found");
    e.http_status = 404;
    SendError(res, e);
    return;
  }
  std::vector<int32_t> prompt;
  if (auto e = BuildPrompt(g, &prompt)) {
    SendError(res, *e);
    return;
  }
  const size_t ctx = engine_->context_length();
  if (prompt.size() >= ctx) {
    SendError(res, InvalidRequest("this model's maximum context length is " + std::to_string(ctx) +
                                      " tokens; the prompt has " + std::to_string(prompt.size()) + " tokens",
                                  endpoint == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded"));
    return;
  }
  const uint32_t room = static_cast<uint32_t>(ctx - prompt.size());
  uint32_t max_new = endpoint == Endpoint::kChat ? room : std::min<uint32_t>(16, room);
  if (g.max_tokens) {
    if (*g.max_tokens > room) {
      SendError(res, InvalidRequest("this model's maximum context length is " + std::to_string(ctx) +
                                        " tokens; the prompt has " + std::to_string(prompt.size()) +
                                        " and " + g.max_tokens_field + " asks for " + std::to_string(*g.max_tokens) +
                                        " more",
                                    g.max_tokens_field, "context_length_exceeded"));
      return;
    }
    max_new = *g.max_tokens;
  }

  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.flags = LLM_SAMPLING_NO_LOGITS;  // only the sampled ids come back
  so.temperature = g.temperature;
  so.top_p = g.top_p;
  so.top_k = g.top_k;
  so.min_p = g.min_p;
  so.max_new_tokens = max_new;
  so.seed = g.seed ? *g.seed : std::random_device{}();
  std::vector<int32_t> stops;
  if (!g.ignore_eos) {
    if (endpoint == Endpoint::kChat) {
      stops = engine_->chat_stop_tokens();
    } else if (engine_->eos_id() >= 0) {
      stops.push_back(engine_->eos_id());
    }
  }
  so.stop_tokens = stops.data();
  so.num_stop_tokens = static_cast<uint32_t>(stops.size());

  ApiError submit_error;
  std::shared_ptr<Request> request = engine_->Submit(prompt, so, g.stop, g.user, &submit_error);
  if (request == nullptr) {
    SendError(res, submit_error);
    return;
  }
  auto gen = std::make_shared<Generation>(engine_, request, req, options_.retry_after_s);
  gen->usage.prompt_tokens = static_cast<uint32_t>(prompt.size());
  gen->endpoint = endpoint;
  gen->id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  gen->created = static_cast<int64_t>(std::time(nullptr));
  gen->model = options_.served_model_name;
  gen->include_usage = g.include_usage;

  // Wait for the first token (or the end): a stream's status line must say whether the request
  // succeeded, and the KV cache decides that during prefill.
  std::string text;
  while (!gen->done && gen->usage.completion_tokens == 0) {
    if (!gen->Poll(&text)) {
      SendError(res, *gen->error);
      return;
    }
  }
  if (!g.stream) {
    while (!gen->done) {
      if (!gen->Poll(&text)) {
        SendError(res, *gen->error);
        return;
      }
    }
    if (gen->error) {
      SendError(res, *gen->error);
      return;
    }
    res.set_content(CompletionJson(endpoint, gen->id, gen->created, gen->model, text, gen->finish_reason, gen->usage),
                    "application/json");
    return;
  }
  if (gen->error) {
    SendError(res, *gen->error);
    return;
  }
  gen->pending = std::move(text);
  res.set_header("Cache-Control", "no-cache");
  in_flight.Release();  // the stream's releaser decrements
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, gen](size_t /*offset*/, httplib::DataSink& sink) {
        std::string payload;
        if (!gen->first_chunk_sent) {
          gen->first_chunk_sent = true;
          if (gen->endpoint == Endpoint::kChat || !gen->pending.empty()) {
            payload += Sse(ChunkJson(gen->endpoint, gen->id, gen->created, gen->model, gen->pending,
                                     /*first=*/true, "", nullptr));
          }
          gen->pending.clear();
        } else if (!gen->done) {
          std::string delta;
          if (!gen->Poll(&delta)) return false;  // the client hung up; the session is cancelled
          if (!delta.empty()) {
            payload += Sse(ChunkJson(gen->endpoint, gen->id, gen->created, gen->model, delta, false, "", nullptr));
          }
        }
        if (gen->done && !gen->final_sent) {
          gen->final_sent = true;
          if (gen->error) {
            // The status line went out with the first token: report the failure in the stream,
            // as the OpenAI client expects ({"error": ...} raises APIError there).
            payload += Sse(ErrorJson(*gen->error));
          } else {
            payload += Sse(ChunkJson(gen->endpoint, gen->id, gen->created, gen->model, "", false, gen->finish_reason,
                                     &gen->usage));
            if (gen->include_usage) {
              payload += Sse(UsageChunkJson(gen->endpoint, gen->id, gen->created, gen->model, gen->usage));
            }
          }
          payload += "data: [DONE]\n\n";
        }
        if (!payload.empty() && !sink.write(payload.data(), payload.size())) {
          engine_->Cancel(gen->request.get(), CancelReason::kDisconnect);
          return false;
        }
        if (gen->final_sent) sink.done();
        return true;
      },
      [this, gen](bool /*success*/) {
        // However the stream ended (done, write failure, server stop), the session must not run on.
        if (!gen->final_sent) engine_->Cancel(gen->request.get(), CancelReason::kDisconnect);
        --in_flight_;
      });
}

void HttpServer::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  // The same parsing and prompt rules as generation: "prompt" for a completion prompt,
  // "messages" for a chat prompt rendered through the chat template.
  Json j = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const Endpoint endpoint = j.is_object() && j.contains("messages") ? Endpoint::kChat : Endpoint::kCompletions;
  GenerationRequest g;
  if (auto e = ParseGenerationRequest(req.body, endpoint, &g)) {
    SendError(res, *e);
    return;
  }
  if (g.model != options_.served_model_name) {
    ApiError e = InvalidRequest("the model '" + g.model + "' does not exist", "model", "model_not_found");
    e.http_status = 404;
    SendError(res, e);
    return;
  }
  std::vector<int32_t> prompt;
  if (auto e = BuildPrompt(g, &prompt)) {
    SendError(res, *e);
    return;
  }
  res.set_content(Dump(Json{{"count", prompt.size()}, {"max_model_len", engine_->context_length()}, {"tokens", prompt}}),
                  "application/json");
}

void HttpServer::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  Json j = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    SendError(res, InvalidRequest("the request body must be a JSON object", "", "invalid_json"));
    return;
  }
  if (!j.contains("model") || !j["model"].is_string() || j["model"] != options_.served_model_name) {
    ApiError e = InvalidRequest("'model' must name the served model '" + options_.served_model_name + "'", "model",
                                "model_not_found");
    e.http_status = 404;
    SendError(res, e);
    return;
  }
  std::vector<int32_t> ids;
  if (!j.contains("tokens") || !j["tokens"].is_array()) {
    SendError(res, InvalidRequest("'tokens' must be an array of token ids", "tokens"));
    return;
  }
  for (const Json& v : j["tokens"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= engine_->vocab_size()) {
      SendError(res, InvalidRequest("'tokens' holds " + Dump(v) + ", not an id below " +
                                        std::to_string(engine_->vocab_size()),
                                    "tokens"));
      return;
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  size_t len = 0;
  std::string text;
  llm_status st = llm_detokenize(engine_->tokenizer(), ids.data(), ids.size(), /*skip_special=*/1, nullptr, 0, &len);
  if (st == LLM_ERR_BUFFER_TOO_SMALL || st == LLM_OK) {
    text.assign(len + 1, '\0');
    st = llm_detokenize(engine_->tokenizer(), ids.data(), ids.size(), 1, text.data(), text.size(), &len);
  }
  if (st != LLM_OK) {
    SendError(res, InvalidRequest(std::string("the tokens cannot be decoded: ") + llm_last_error(), "tokens"));
    return;
  }
  text.resize(len);
  res.set_content(Dump(Json{{"prompt", text}}), "application/json");
}

void HttpServer::HandleDebugCorrupt(const httplib::Request& req, httplib::Response& res) {
  Json j = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("user") || !j["user"].is_string()) {
    SendError(res, InvalidRequest("the body must be {\"user\": \"...\", \"op\": \"free_mapped_page\"|\"corrupt_entry\", "
                                  "\"entry\": N, \"page\": P}",
                                  "user"));
    return;
  }
  const std::string op_name = j.value("op", std::string("free_mapped_page"));
  int32_t op = 0;
  if (op_name == "free_mapped_page") op = LLM_TESTCTL_KV_FREE_MAPPED_PAGE;
  else if (op_name == "corrupt_entry") op = LLM_TESTCTL_KV_CORRUPT_ENTRY;
  else {
    SendError(res, InvalidRequest("'op' must be free_mapped_page or corrupt_entry", "op"));
    return;
  }
  const Json entry = j.value("entry", Json(0));
  const Json page = j.value("page", Json(0));
  if (!entry.is_number_integer() || !page.is_number_integer()) {
    SendError(res, InvalidRequest("'entry' and 'page' must be integers", "entry"));
    return;
  }
  uint64_t session_id = 0;
  if (auto e = engine_->InjectFault(j["user"].get<std::string>(), op, entry.get<int64_t>(), page.get<int64_t>(),
                                    &session_id)) {
    SendError(res, *e);
    return;
  }
  res.set_content(Dump(Json{{"session_id", session_id}, {"op", op_name}}), "application/json");
}

void HttpServer::HandleMetrics(httplib::Response& res) {
  std::string out;
  engine_->RenderMetrics(&out);
  RenderScalar("llmrt_http_generations_in_flight", "gauge", "Generation requests not yet answered in full.",
               in_flight_.load(), &out);
  RenderScalar("llmrt_http_draining", "gauge", "1 while the server shuts down.", draining_ ? 1 : 0, &out);
  requests_.Render("llmrt_http_requests_total", "HTTP requests answered, by endpoint and status code.", &out);
  res.set_content(out, "text/plain; version=0.0.4");
}

}  // namespace llm_server
