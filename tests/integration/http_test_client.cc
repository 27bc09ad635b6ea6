#include "tests/integration/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

// Asio's awaitable.hpp uses std::exchange without including <utility> (Boost 1.74).
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <cctype>
#include <utility>

namespace framezip::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

HttpReply Http(int port, const HttpCall& call,
               const std::function<bool(const std::string& data)>& on_data) {
  HttpReply reply;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(call.timeout);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  if (ec) {
    reply.error = ec.message();
    return reply;
  }
  http::request<http::string_body> request(http::string_to_verb(call.method), call.target, 11);
  request.set(http::field::host, "127.0.0.1");
  if (!call.body.empty() || call.method == "POST") {
    request.set(http::field::content_type, call.content_type);
  }
  for (const auto& [name, value] : call.headers) request.set(name, value);
  request.body() = call.body;
  request.prepare_payload();
  beast::get_lowest_layer(stream).socket().set_option(tcp::no_delay(true), ec);
  http::write(stream, request, ec);
  if (ec) {
    reply.error = ec.message();
    return reply;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(uint64_t{1} << 30);
  http::read_header(stream, buffer, parser, ec);
  if (ec) {
    reply.error = ec.message();
    return reply;
  }
  reply.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    reply.headers[name] = std::string(field.value());
  }
  // The parser keeps a reference to this callback, so it lives as long as the parser does.
  auto on_chunk = [&](std::uint64_t, beast::string_view body, beast::error_code& e) {
    const std::string data(body);
    reply.body += data;
    if (!on_data(data)) {
      reply.dropped = true;
      e = net::error::operation_aborted;
    }
    return body.size();
  };
  if (on_data) parser.on_chunk_body(on_chunk);
  while (!parser.is_done()) {
    http::read_some(stream, buffer, parser, ec);
    if (ec) break;
    if (on_data && !parser.chunked() && !parser.get().body().empty()) {
      std::string data = std::move(parser.get().body());
      parser.get().body().clear();
      reply.body += data;
      if (!on_data(data)) {
        reply.dropped = true;
        break;
      }
    }
  }
  if (!on_data) reply.body = parser.get().body();
  if (ec && !reply.dropped) reply.error = ec.message();
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return reply;
}

std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    const std::string line = body.substr(pos, end - pos);
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
    pos = end + 1;
  }
  return out;
}

int ConnectRaw(int port, int recv_buffer) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (recv_buffer > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &recv_buffer, sizeof(recv_buffer));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadUntilClose(int fd, std::chrono::milliseconds timeout, bool* closed) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (closed != nullptr) *closed = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace framezip::testing
