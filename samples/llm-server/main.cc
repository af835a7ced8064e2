// llm-server: an OpenAI-compatible HTTP server over llmrt's public C ABI (see README.md here).
//
//   llm-server --model DIR [--port N] [--kv-dtype fp8] [--kv-integrity tags] [--kv-pressure queue] ...
//
// Threads: the main thread owns the signals (SIGINT/SIGTERM, blocked everywhere else) and runs
// the shutdown; one thread runs cpp-httplib's accept loop, whose pool threads run the handlers
// (request threads); the engine's stepping thread drives llm_decode_step.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "engine.h"
#include "http_server.h"
#include "options.h"

namespace {

// Waits up to `ms` for one of `set`'s signals; returns it, or 0 on timeout.
int WaitSignal(const sigset_t& set, int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace

int main(int argc, char** argv) {
  llm_server::ServerOptions options;
  bool exit_now = false;
  if (int rc = llm_server::ParseArgs(argc, argv, &options, &exit_now); rc != 0 || exit_now) return rc;

  // Block the shutdown signals before any thread starts so that every thread inherits the mask
  // and only the main thread receives them (sigtimedwait below). A write to a closed socket
  // must fail with EPIPE rather than kill the process.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string error;
  std::unique_ptr<llm_server::Engine> engine = llm_server::Engine::Create(options, &error);
  if (engine == nullptr) {
    std::fprintf(stderr, "llm-server: cannot load the model: %s\n", error.c_str());
    return 1;
  }
  auto http = std::make_unique<llm_server::HttpServer>(options, engine.get());
  const int port = http->Bind();
  if (port < 0) {
    std::fprintf(stderr, "llm-server: cannot listen on %s:%d\n", options.host.c_str(), options.port);
    return 1;
  }
  std::printf("llm-server: serving %s (context %u tokens) on http://%s:%d\n", options.served_model_name.c_str(),
              engine->context_length(), options.host.c_str(), port);
  std::fflush(stdout);

  std::atomic<bool> listen_failed{false};
  std::thread listener([&] { listen_failed = !http->Listen(); });
  // Main thread: wait for a shutdown signal (checking now and then that the listener runs).
  int sig = 0;
  while (sig == 0) {
    sig = WaitSignal(signals, 200);
    if (listen_failed) break;
  }
  if (sig != 0) {
    std::fprintf(stderr, "llm-server: %s: draining %d in-flight request(s), at most %d s (signal again to cancel them)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", http->InFlight(), options.shutdown_timeout_s);
    http->BeginDrain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.shutdown_timeout_s);
    while (http->InFlight() > 0 && std::chrono::steady_clock::now() < deadline) {
      if (WaitSignal(signals, 10) != 0) break;  // a second signal: do not wait any longer
    }
    if (http->InFlight() > 0) {
      // Cancelled requests end with a 503 (or an error event in their stream) and [DONE].
      std::fprintf(stderr, "llm-server: cancelling %d request(s)\n", http->InFlight());
      engine->CancelAll();
      const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (http->InFlight() > 0 && std::chrono::steady_clock::now() < hard) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
  http->Stop();
  listener.join();
  http.reset();
  engine.reset();
  std::fprintf(stderr, "llm-server: stopped\n");
  return listen_failed ? 1 : 0;
}
