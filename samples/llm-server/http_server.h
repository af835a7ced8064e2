// The HTTP side: cpp-httplib routes for the OpenAI endpoints, /health, /metrics and (with
// --enable-test-hooks) /debug/corrupt; SSE streaming; disconnect detection; graceful drain.
#ifndef LLMRT_SAMPLES_LLM_SERVER_HTTP_SERVER_H_
#define LLMRT_SAMPLES_LLM_SERVER_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <httplib.h>

#include "engine.h"
#include "metrics.h"
#include "openai_api.h"
#include "options.h"

namespace llm_server {

class HttpServer {
 public:
  HttpServer(const ServerOptions& options, Engine* engine);

  // Binds options.host:options.port (port 0: any free one). Returns the port, or -1.
  int Bind();
  // Serves until Stop(); returns false if the server could not run.
  bool Listen();
  // Refuse new generations (503) and report unhealthy, so that load balancers move on.
  void BeginDrain() { draining_ = true; }
  // Generations that have not finished writing their response.
  int InFlight() const { return in_flight_.load(); }
  void Stop() { server_.stop(); }

 private:
  void Routes();
  void HandleGeneration(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  // Encodes the request's prompt (chat: through the model's chat template). Null on success.
  std::optional<ApiError> BuildPrompt(const GenerationRequest& g, std::vector<int32_t>* prompt);
  // vLLM's /tokenize and /detokenize: the ids a prompt becomes, and the text of ids.
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDebugCorrupt(const httplib::Request& req, httplib::Response& res);
  void HandleMetrics(httplib::Response& res);
  static void SendError(httplib::Response& res, const ApiError& e);

  const ServerOptions options_;
  Engine* const engine_;
  // cpp-httplib with access to its listening socket (see Bind).
  class Server : public httplib::Server {
   public:
    int listen_socket() const { return svr_sock_; }
  };
  Server server_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_id_{1};
  const int64_t created_;  // /v1/models "created"
  LabelledCounter requests_;  // {endpoint, code}
};

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_HTTP_SERVER_H_
