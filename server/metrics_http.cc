#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace framezip::server {

struct MetricsHttpServer::Connection {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  std::string request;
  std::string response;  // queued once the request is complete
  size_t sent = 0;
};

MetricsHttpServer::MetricsHttpServer(std::function<std::string()> render,
                                     MetricsHttpOptions options)
    : render_(std::move(render)), options_(options) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

StatusOr<int> MetricsHttpServer::Start(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("--metrics-listen: '{}' is not HOST:PORT", address);
  }
  std::string host = address.substr(0, colon);
  if (host.empty() || host == "*" || host == "[::]") host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (port < 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("--metrics-listen: '{}' is not IPV4:PORT", address);
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return UnavailableError("metrics: socket: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
    return UnavailableError("cannot serve metrics on {}: {}", address, why);
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return UnavailableError("metrics: pipe: {}", std::strerror(errno));
  }
  thread_ = std::thread([this] { Serve(); });
  return static_cast<int>(ntohs(addr.sin_port));
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 1;
  (void)!::write(wake_pipe_[1], &byte, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  listen_fd_ = -1;
}

bool MetricsHttpServer::OnReadable(Connection& c) {
  char buf[2048];
  bool eof = false;
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.request.append(buf, static_cast<size_t>(n));
      if (c.request.size() > 16384) return false;  // no scrape request is this large
      continue;
    }
    if (n == 0) {  // half-closed: answer what arrived, if complete
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  if (c.request.find("\r\n\r\n") == std::string::npos) return !eof;  // wait for the rest
  const bool get = c.request.rfind("GET ", 0) == 0;
  const size_t path_end = c.request.find(' ', 4);
  const std::string path =
      get && path_end != std::string::npos ? c.request.substr(4, path_end - 4) : std::string();
  if (path == "/metrics" || path.rfind("/metrics?", 0) == 0) {
    const std::string body = render_();
    c.response = fmt::format(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
  } else {
    const std::string body = "not found; metrics are at /metrics\n";
    c.response = fmt::format(
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n{}",
        body.size(), body);
  }
  return OnWritable(c);
}

bool MetricsHttpServer::OnWritable(Connection& c) {
  while (c.sent < c.response.size()) {
    const ssize_t n =
        ::send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // wait, or give up
  }
  return false;  // all sent: close
}

void MetricsHttpServer::Serve() {
  std::vector<Connection> connections;
  auto close_at = [&](size_t i) {
    ::close(connections[i].fd);
    connections.erase(connections.begin() + static_cast<ptrdiff_t>(i));
  };
  for (;;) {
    // Drop the connections past their deadline first: a slow client gets no more of our time.
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = connections.size(); i-- > 0;) {
      if (now >= connections[i].deadline) close_at(i);
    }
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.response.empty() ? POLLIN : POLLOUT), 0});
    }
    int timeout_ms = -1;
    for (const Connection& c : connections) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now);
      const int ms = static_cast<int>(std::max<int64_t>(left.count(), 0)) + 1;
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    // Existing connections (fds[2..]) before new ones, indices matching `connections`.
    for (size_t i = connections.size(); i-- > 0;) {
      const short revents = fds[i + 2].revents;
      if (revents == 0) continue;
      Connection& c = connections[i];
      bool keep = true;
      if ((revents & (POLLERR | POLLNVAL)) != 0) {
        keep = false;
      } else if (c.response.empty()) {
        keep = OnReadable(c);
      } else {
        keep = OnWritable(c);
      }
      if (!keep) close_at(i);
    }
    if ((fds[0].revents & POLLIN) != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (static_cast<int>(connections.size()) >= options_.max_connections) close_at(0);
        connections.push_back({fd, std::chrono::steady_clock::now() + options_.request_timeout,
                               {}, {}, 0});
      }
    }
  }
  for (const Connection& c : connections) ::close(c.fd);
}

}  // namespace framezip::server
