// The OpenAI-compatible HTTP API (--openai-listen): POST /v1/chat/completions (JSON or
// server-sent events), GET /v1/models, GET /health and GET /ready, on the same engine, scheduler,
// admission, limits and principals as the gRPC service (it drives the ServiceCore that
// VideoChatService owns; server/openai_protocol.h translates the bodies).
//
// Transport: Boost.Beast over Asio, one I/O thread running every connection asynchronously (no
// thread per connection: 256 concurrent streams hold 256 sockets, not 256 threads; the
// measurement behind the choice is in docs/api.md). Parsing bodies, decoding media and probing
// them run on the media pool, never on the I/O thread.
//
// Hostile clients:
//   - a request's headers and body must arrive within `request_timeout` from its first byte (a
//     client that trickles its request is dropped);
//   - a body over `max_body_bytes` is refused with 413 from its Content-Length, before any of it is
//     read (a chunked body: as soon as the limit is passed);
//   - authentication is checked on the headers, before the body is read (401);
//   - an answer write that makes no progress for `write_timeout` (a client that never reads its
//     stream) closes the connection and cancels the turn, freeing its pages; so does a client
//     that disconnects while its turn runs, streamed or not;
//   - at most `max_connections` connections are open; past that a new one gets 503 and is closed.
//
// Thread-safe: Start once, Stop (or the destructor) once. Stop cancels turns still running and
// waits for their end, so no engine callback outlives the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/service_core.h"

namespace framezip::server {

struct OpenAiHttpOptions {
  uint64_t max_body_bytes = uint64_t{64} << 20;
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds idle_timeout{120000};  // a kept-alive connection between requests
  int max_connections = 1024;
  // file:///PATH media URLs are read from under this directory (empty: refused, the default).
  std::string local_media_dir;
  uint64_t max_local_media_bytes = uint64_t{512} << 20;
};

class OpenAiHttpServer {
 public:
  // `core` must outlive the server.
  OpenAiHttpServer(ServiceCore* core, OpenAiHttpOptions options);
  ~OpenAiHttpServer();
  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;

  // Listens on "HOST:PORT" (an IPv4 or IPv6 address, "0.0.0.0", "localhost"; port 0 picks one);
  // returns the port. INVALID_ARGUMENT for a malformed address, UNAVAILABLE when it cannot bind.
  StatusOr<int> Start(const std::string& address);
  void Stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace framezip::server
