// Sees a client hang up while its request waits. cpp-httplib gives a handler no access to the
// connection's socket, and a write only fails one round trip after the peer closed; a request
// that waits for KV pages, or for its prefill, writes nothing at all. So the probe finds the
// accepted socket by the request's address pair once, then polls it for the peer's FIN/RST
// (POLLRDHUP) without reading, which costs one poll() per check.
//
// A client that half-closes its side after sending the request (shutdown(SHUT_WR), as some
// HTTP/1.0 tools do) looks like one that left; HTTP/1.1 clients, the openai client among them,
// do not do that.
//
// The search reads the metadata (fstat, getsockname, getpeername) of every descriptor of the
// process, while other threads may close or reuse theirs. That race is harmless: nothing but our
// own connection (open for as long as its handler runs) can match its exact address pair, and
// other descriptors are only looked at, never changed. ThreadSanitizer reports it as a race on
// the descriptor; tests/server/tsan.supp suppresses exactly that.
#ifndef LLMRT_SAMPLES_LLM_SERVER_CONNECTION_PROBE_H_
#define LLMRT_SAMPLES_LLM_SERVER_CONNECTION_PROBE_H_

#include <string>

namespace llm_server {

class ConnectionProbe {
 public:
  // The socket whose local port is `local_port` and whose peer is remote_addr:remote_port (as
  // cpp-httplib reports them, numeric). When none is found (not Linux, or a proxy in between)
  // Closed() is always false and disconnects are seen only when a write fails.
  ConnectionProbe(int local_port, const std::string& remote_addr, int remote_port);
  // True once the peer has closed or reset the connection.
  bool Closed() const;
  // Stops reading the connection (shutdown SHUT_RD): the response still goes out, then the
  // server sees the end of the stream and closes it. For a request whose body was refused
  // unread, so that the body is never parsed as the next request.
  void StopReading() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // borrowed: cpp-httplib owns and closes it after the request
};

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_CONNECTION_PROBE_H_
