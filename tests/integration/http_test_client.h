// A blocking HTTP/1.1 client for the OpenAI-compatible API's tests, on Boost.Beast (the library
// the server uses), plus raw-socket helpers for the hostile clients Beast would not be (a
// trickled request, headers announcing a body never sent, a client that never reads).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace framezip::testing {

struct HttpCall {
  std::string method = "POST";
  std::string target = "/v1/chat/completions";
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{60000};
};

struct HttpReply {
  int status = 0;  // 0: no response (see `error`)
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error;                           // transport error, if any
  bool dropped = false;                        // `on_data` asked to drop the connection
};

// Sends `call` to 127.0.0.1:`port`. `on_data` (optional) sees the body as it arrives, chunk by
// chunk; returning false closes the connection there (a client that goes away mid-answer).
HttpReply Http(int port, const HttpCall& call,
               const std::function<bool(const std::string& data)>& on_data = {});

// The payloads of a server-sent-events body's "data: " lines, in order.
std::vector<std::string> SseData(const std::string& body);

// A raw TCP connection to 127.0.0.1:`port` (-1 on failure); `recv_buffer` > 0 shrinks its
// receive buffer (a client that never reads fills it sooner).
int ConnectRaw(int port, int recv_buffer = 0);
bool SendAll(int fd, const std::string& bytes);
// Reads until the peer closes or `timeout` passes; returns what arrived.
std::string ReadUntilClose(int fd, std::chrono::milliseconds timeout, bool* closed = nullptr);

}  // namespace framezip::testing
