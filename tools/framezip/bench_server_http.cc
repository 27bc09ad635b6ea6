#include "tools/framezip/bench_server_http.h"

// Asio's awaitable.hpp uses std::exchange without including <utility> (Boost 1.74).
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>
#include <utility>

namespace framezip::cli {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

HttpChatResult HttpChatTurn(int port, const std::string& body) {
  HttpChatResult r;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(std::chrono::minutes(10));
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
                 ec);
  if (ec) {
    r.error = "connect: " + ec.message();
    return r;
  }
  stream.socket().set_option(tcp::no_delay(true), ec);
  http::request<http::string_body> request(http::verb::post, "/v1/chat/completions", 11);
  request.set(http::field::host, "127.0.0.1");
  request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  r.start = std::chrono::steady_clock::now();
  http::write(stream, request, ec);
  if (ec) {
    r.error = "write: " + ec.message();
    return r;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(uint64_t{1} << 30);
  std::string pending;  // SSE text not yet split into events
  bool done = false;
  auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
    const auto now = std::chrono::steady_clock::now();
    pending.append(data.data(), data.size());
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) r.error = j["error"].value("message", "error");
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", 0u);
        r.completion_tokens = j["usage"].value("completion_tokens", 0u);
        r.cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", 0u);
      }
      for (const auto& choice : j.value("choices", nlohmann::json::array())) {
        const auto& delta = choice["delta"];
        if (delta.contains("content") && delta["content"].is_string()) {
          r.answer += delta["content"].get<std::string>();
          r.arrivals.push_back(now);
        }
      }
    }
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  http::read(stream, buffer, parser, ec);
  r.end = std::chrono::steady_clock::now();
  if (ec) {
    if (r.error.empty()) r.error = "read: " + ec.message();
    return r;
  }
  if (parser.get().result_int() != 200) {
    r.error = "HTTP " + std::to_string(parser.get().result_int()) + ": " + parser.get().body();
  } else if (!done && r.error.empty()) {
    r.error = "the stream ended without [DONE]";
  }
  return r;
}

}  // namespace framezip::cli
