// Sees a client hang up while its request waits. cpp-httplib gives a handler no access to the
// connection's socket, and a write only fails one round trip after the peer closed; a request
// that waits for KV pages, or for its prefill, writes nothing at all. So the probe finds the
// accepted socket by the request's address pair once, then polls it for the peer's FIN/RST
// (POLLRDHUP) without reading, which costs one poll() per check.
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
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // borrowed: cpp-httplib owns and closes it after the request
};

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_CONNECTION_PROBE_H_
