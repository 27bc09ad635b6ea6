#include "media/worker/socket_io.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace framezip::media::worker {

Status SendMessage(int socket, std::span<const uint8_t> bytes, int fd) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return absl::OkStatus();
    if (n < 0 && errno == EINTR) continue;
    return UnavailableError("media worker channel: send failed: {}",
                            n < 0 ? std::strerror(errno) : "short write");
  }
}

StatusOr<ReceivedMessage> ReceiveMessage(int socket, size_t max_bytes) {
  ReceivedMessage out;
  out.bytes.resize(max_bytes + 1);  // one spare byte tells an oversize message apart
  iovec iov{out.bytes.data(), out.bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return UnavailableError("media worker channel: receive failed: {}", std::strerror(errno));
  // Collect every descriptor that arrived, so none leaks whatever happens next.
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.push_back(fd);
    }
  }
  const bool truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
                         static_cast<size_t>(n) > max_bytes;
  if (truncated || fds.size() > 1) {
    for (int fd : fds) ::close(fd);
    return InternalError("media worker channel: oversized message or too many descriptors");
  }
  out.bytes.resize(static_cast<size_t>(n));
  if (!fds.empty()) out.fd = fds.front();
  return out;
}

}  // namespace framezip::media::worker
