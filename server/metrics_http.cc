#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace framezip::server {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(std::function<std::string()> render)
    : render_(std::move(render)) {}

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
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return UnavailableError("metrics: socket: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
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

void MetricsHttpServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    ::close(fd);
  }
}

void MetricsHttpServer::Answer(int fd) {
  // A slow or silent client cannot hold the endpoint for more than a couple of seconds.
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  const bool get = request.rfind("GET ", 0) == 0;
  const size_t path_end = request.find(' ', 4);
  const std::string path = get && path_end != std::string::npos
                               ? request.substr(4, path_end - 4)
                               : std::string();
  if (path == "/metrics" || path.rfind("/metrics?", 0) == 0) {
    const std::string body = render_();
    WriteAll(fd, fmt::format("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
                             "charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                             body.size()));
    WriteAll(fd, body);
  } else {
    const std::string body = "not found; metrics are at /metrics\n";
    WriteAll(fd, fmt::format("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                             "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                             body.size(), body));
  }
}

}  // namespace framezip::server
