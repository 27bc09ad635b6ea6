// A minimal HTTP/1.x endpoint for Prometheus scrapes: GET /metrics answers the text exposition
// that `render` returns; anything else is 404. One thread, one request at a time (scrapers are
// few), on its own port.
//
// Why not prometheus-cpp's Exposer: Debian's civetweb gives its workers ~100 KiB stacks, and in
// a process that links OpenBLAS (61 KiB of static TLS per thread, carved from each stack) a scrape
// overflows the stack and crashes the server. This endpoint's thread has a normal stack.
//
// Thread-safe: Start once, Stop (or the destructor) once.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "common/status.h"

namespace framezip::server {

class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Listens on "HOST:PORT" (an IPv4 address or "0.0.0.0"; port 0 picks one); returns the port.
  StatusOr<int> Start(const std::string& address);
  void Stop();

 private:
  void Serve();
  void Answer(int fd);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace framezip::server
