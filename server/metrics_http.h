// A minimal HTTP/1.x endpoint for Prometheus scrapes: GET /metrics answers the text exposition
// that `render` returns; anything else is 404. On its own port, served by one thread running an
// event loop (poll) over non-blocking sockets: every connection is read and written as its bytes
// come, so a client that sends its request a byte at a time (or never reads the answer) holds
// only its own connection, and is dropped at its deadline (`request_timeout` from its accept);
// at most `max_connections` are open at once (the oldest is dropped for a new one).
//
// Why not prometheus-cpp's Exposer: Debian's civetweb gives its workers ~100 KiB stacks, and in
// a process that links OpenBLAS (61 KiB of static TLS per thread, carved from each stack) a scrape
// overflows the stack and crashes the server. This endpoint's thread has a normal stack.
//
// Thread-safe: Start once, Stop (or the destructor) once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/status.h"

namespace framezip::server {

struct MetricsHttpOptions {
  std::chrono::milliseconds request_timeout{5000};
  int max_connections = 64;
};

class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(std::function<std::string()> render, MetricsHttpOptions options = {});
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Listens on "HOST:PORT" (an IPv4 address or "0.0.0.0"; port 0 picks one); returns the port.
  StatusOr<int> Start(const std::string& address);
  void Stop();

 private:
  struct Connection;
  void Serve();
  // Reads what arrived; once the request is complete, queues the response. False: close it.
  bool OnReadable(Connection& c);
  bool OnWritable(Connection& c);  // false: done or failed, close it

  std::function<std::string()> render_;
  const MetricsHttpOptions options_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace framezip::server
