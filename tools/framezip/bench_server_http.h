// `framezip bench server --protocol http`: one streamed chat-completions request to the
// OpenAI-compatible API, timed as the client sees it (Boost.Beast, the library the server uses).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace framezip::cli {

struct HttpChatResult {
  std::string error;   // empty: the turn ended with [DONE] and a usage chunk
  std::string answer;  // the streamed text
  std::chrono::steady_clock::time_point start, end;
  // Each content event's arrival; the server sends one event per engine delta (one token, or
  // several merged while a write was in flight: counted as one here).
  std::vector<std::chrono::steady_clock::time_point> arrivals;
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

// POSTs `body` (a chat-completions request with "stream": true and
// stream_options.include_usage) to 127.0.0.1:`port`/v1/chat/completions and reads the stream.
HttpChatResult HttpChatTurn(int port, const std::string& body);

}  // namespace framezip::cli
