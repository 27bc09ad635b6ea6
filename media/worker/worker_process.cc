#include "media/worker/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "media/worker/handle_request.h"
#include "media/worker/sandbox.h"
#include "media/worker/socket_io.h"

namespace framezip::media::worker {
namespace {

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "framezip-media-worker: %s\n", why.c_str());
  std::fflush(stderr);
  _exit(3);
}

// One worker's life, in a fork of the zygote whose channel to the server is kChannelFd: lock down,
// say Ready, serve one request, _exit.
[[noreturn]] void ServeOneRequest(const SandboxLimits& limits, bool network_namespace,
                                  const RequestHook& hook) {
  StatusOr<ReadyMessage> ready = ApplyWorkerSandbox(limits, network_namespace);
  if (!ready.ok()) Die(MessageOf(ready.status()));
  if (!SendMessage(kChannelFd, EncodeReady(*ready)).ok()) _exit(4);

  StatusOr<ReceivedMessage> received = ReceiveMessage(kChannelFd, kMaxMessageBytes);
  if (!received.ok() || received->bytes.empty()) _exit(0);  // the pool shut down
  WorkResponse response;
  FrameData frames;
  StatusOr<WorkRequest> request = DecodeRequest(received->bytes);
  if (!request.ok()) {
    response.code = static_cast<int32_t>(request.status().code());
    response.message = MessageOf(request.status());
  } else if (received->fd < 0) {
    response.code = static_cast<int32_t>(absl::StatusCode::kInvalidArgument);
    response.message = "the request carried no media descriptor";
  } else {
    std::optional<WorkResponse> hooked;
    if (hook) hooked = hook(*request, received->fd);
    response = hooked ? *std::move(hooked) : HandleRequest(*request, received->fd, &frames);
  }
  int frames_fd = -1;
  if (response.code == 0 && response.has_frames) {
    StatusOr<int> fd = frames.ReleaseSealedMemfd();
    if (fd.ok()) {
      frames_fd = *fd;
    } else {
      response = WorkResponse();
      response.code = static_cast<int32_t>(fd.status().code());
      response.message = MessageOf(fd.status());
    }
  }
  if (!SendMessage(kChannelFd, EncodeResponse(response), frames_fd).ok()) _exit(4);
  // _exit: no destructors or atexit handlers run under the filter (a leak checker would need
  // ptrace), and nothing is flushed that the server did not already get.
  _exit(0);
}

// Tells the server of every worker that has ended since the last call, with its wait status.
void ReportExits() {
  int status = 0;
  pid_t pid = 0;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (!SendMessage(kChannelFd, EncodeExited({.pid = pid, .wait_status = status})).ok()) _exit(0);
  }
}

}  // namespace

int RunWorker(int argc, char** argv, const RequestHook& hook) {
  SandboxLimits limits;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--memory-bytes") {
      limits.memory_bytes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--cpu-seconds") {
      limits.cpu_seconds = static_cast<uint32_t>(std::strtoul(value, nullptr, 10));
    } else {
      Die("unknown flag " + flag + " (this program is started by framezip-server)");
    }
  }
  StatusOr<bool> network_namespace = ApplyZygoteSandbox();
  if (!network_namespace.ok()) Die(MessageOf(network_namespace.status()));

  // SIGCHLD arrives through a descriptor, polled beside the server's channel.
  sigset_t child_signal, previous;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child_signal, &previous);
  const int child_exits = signalfd(-1, &child_signal, SFD_CLOEXEC | SFD_NONBLOCK);
  if (child_exits < 0) Die(std::string("signalfd failed: ") + std::strerror(errno));

  for (;;) {
    pollfd fds[2] = {{kChannelFd, POLLIN, 0}, {child_exits, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Die(std::string("poll failed: ") + std::strerror(errno));
    }
    if (fds[1].revents != 0) {
      signalfd_siginfo info;
      while (::read(child_exits, &info, sizeof(info)) == sizeof(info)) {
      }
      ReportExits();
    }
    if (fds[0].revents == 0) continue;
    StatusOr<ReceivedMessage> received = ReceiveMessage(kChannelFd, kMaxMessageBytes);
    // The server closed the channel (or is gone): the workers die with this process.
    if (!received.ok() || received->bytes.empty()) _exit(0);
    if (!DecodeFork(received->bytes).ok() || received->fd < 0) {
      Die("malformed message from the server on the zygote's channel");
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(child_exits);
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      if (::dup2(received->fd, kChannelFd) != kChannelFd) _exit(4);
      ::close(received->fd);
      ServeOneRequest(limits, *network_namespace, hook);
    }
    const int fork_error = pid < 0 ? errno : 0;
    ::close(received->fd);
    // A pidfd lets the server signal this worker without racing the reuse of its pid once it is
    // reaped here.
    const int pidfd = pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)) : -1;
    const ForkedMessage forked{.pid = pid > 0 ? pid : -1, .error = fork_error};
    const Status sent = SendMessage(kChannelFd, EncodeForked(forked), pidfd);
    if (pidfd >= 0) ::close(pidfd);
    if (!sent.ok()) _exit(0);
  }
}

}  // namespace framezip::media::worker
