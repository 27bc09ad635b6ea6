#include "tests/integration/kvstore_harness.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "tests/testing/temp_dir.h"

namespace framezip::kvstore::test {
namespace {

using namespace std::chrono_literals;

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

std::unique_ptr<testing::ChildProcess> Spawn(const std::vector<std::string>& argv,
                                             const std::filesystem::path& log) {
  auto child = testing::ChildProcess::Start(argv, log);
  if (!child) return nullptr;
  return std::make_unique<testing::ChildProcess>(std::move(*child));
}

}  // namespace

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

bool RedisPing(int port) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr) return false;
  bool ok = false;
  if (c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = r != nullptr && r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG";
    if (r) freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

RedisServer::RedisServer(const std::filesystem::path& dir, int port)
    : dir_(dir), port_(port != 0 ? port : FreeLoopbackPort()) {
  Start();
}

bool RedisServer::Start() {
  child_ = Spawn({"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",
                  "", "--appendonly", "no", "--dir", dir_.string()},
                 dir_ / "redis.log");
  if (!child_) return false;
  if (!WaitFor([&] { return RedisPing(port_); }, 10s)) {
    child_.reset();
    return false;
  }
  return true;
}

void RedisServer::Kill() {
  if (!child_) return;
  child_->Signal(SIGKILL);
  child_->Wait(10s);
  child_.reset();
}

std::string RedisServer::Command(const std::vector<std::string>& argv) const {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  if (c == nullptr || c->err != 0) {
    if (c) redisFree(c);
    return "(error) cannot connect";
  }
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
  std::string out = "(error) no reply";
  if (r != nullptr) {
    switch (r->type) {
      case REDIS_REPLY_NIL:
        out = "(nil)";
        break;
      case REDIS_REPLY_INTEGER:
        out = std::to_string(r->integer);
        break;
      default:
        out = std::string(r->str != nullptr ? r->str : "", r->len);
        break;
    }
    freeReplyObject(r);
  }
  redisFree(c);
  return out;
}

KvstoreDaemon::KvstoreDaemon(const std::filesystem::path& dir, std::vector<std::string> args,
                             int port)
    : dir_(dir) {
  const auto port_file = dir / "kvstore.port";
  const auto metrics_file = dir / "kvstore.metrics-port";
  std::filesystem::remove(port_file);
  std::filesystem::remove(metrics_file);
  std::vector<std::string> argv = {(testing::BinaryDir() / "bin" / "framezip-kvstore").string(),
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--port-file",
                                   port_file.string(),
                                   "--metrics-listen",
                                   "127.0.0.1:0",
                                   "--metrics-port-file",
                                   metrics_file.string(),
                                   "--grace-seconds",
                                   "5"};
  argv.insert(argv.end(), args.begin(), args.end());
  child_ = Spawn(argv, dir / "kvstore.log");
  if (!child_) return;
  if (auto port = testing::WaitForFile(port_file, 20s)) port_ = std::stoi(*port);
  if (auto port = testing::WaitForFile(metrics_file, 5s)) metrics_port_ = std::stoi(*port);
}

void KvstoreDaemon::Kill() {
  if (!child_) return;
  child_->Signal(SIGKILL);
  child_->Wait(10s);
  child_.reset();
}

std::optional<int> KvstoreDaemon::Stop() {
  if (!child_) return std::nullopt;
  child_->Signal(SIGTERM);
  auto code = child_->Wait(20s);
  child_.reset();
  return code;
}

std::string KvstoreDaemon::Log() const {
  std::ifstream in(dir_ / "kvstore.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
    }
  }
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::optional<double> MetricValue(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const size_t space = line.rfind(' ');
      if (space != std::string::npos) return std::stod(line.substr(space + 1));
    }
  }
  return std::nullopt;
}

}  // namespace framezip::kvstore::test
