// TEST DOUBLE: framezip-media-worker with faults on demand, for the WorkerPool tests. It runs the
// real worker (sandbox, protocol, handling) and misbehaves only for media whose bytes start with
// "FZFAULT:<mode>", inside the sandbox, as a compromised or broken decoder would:
//   crash     dies of SIGSEGV            hang   never replies
//   spin      burns CPU (RLIMIT_CPU)     hog    allocates until the memory limit refuses
//   garbage   replies with junk bytes    frames claims frames it does not send
//   sandbox   tries what the filter forbids and reports each errno in its reply's message
// Never shipped.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "media/worker/worker_process.h"

namespace framezip::media::worker {
namespace {

std::string Errno(int rc) { return rc >= 0 ? "allowed" : strerrorname_np(errno); }

WorkResponse Reply(absl::StatusCode code, std::string message) {
  WorkResponse r;
  r.code = static_cast<int32_t>(code);
  r.message = std::move(message);
  return r;
}

std::optional<WorkResponse> Fault(const WorkRequest& /*request*/, int media_fd) {
  char head[32] = {};
  const ssize_t n = ::pread(media_fd, head, sizeof(head) - 1, 0);
  const std::string text(head, n > 0 ? static_cast<size_t>(n) : 0);
  if (text.rfind("FZFAULT:", 0) != 0) return std::nullopt;  // a real request: handle it
  const std::string mode = text.substr(8, text.find_first_of("\n ", 8) - 8);
  if (mode == "crash") {
    // What a decoder's wild write in FFmpeg (not instrumented by sanitizers) ends in.
    raise(SIGSEGV);
  }
  if (mode == "hang") {
    for (;;) pause();
  }
  if (mode == "spin") {
    uint64_t spins = 0;
    for (;;) {
      ++spins;
      asm volatile("" : "+r"(spins));  // keeps the loop from being optimised away
    }
  }
  if (mode == "hog") {
    std::vector<std::vector<char>> held;
    try {
      for (int i = 0; i < 1024; ++i) held.emplace_back(size_t{64} << 20, 'x');  // up to 64 GiB
    } catch (const std::bad_alloc&) {
      return Reply(absl::StatusCode::kResourceExhausted,
                   "allocation refused after " + std::to_string(held.size() * 64) + " MiB");
    }
    return Reply(absl::StatusCode::kOk, "allocated 64 GiB: no memory limit");
  }
  if (mode == "garbage") {
    const char junk[] = "FZMW and then not a reply at all";
    ::send(kChannelFd, junk, sizeof(junk), MSG_NOSIGNAL);
    _exit(0);
  }
  if (mode == "frames") {
    WorkResponse r;
    r.has_frames = true;
    r.result.frames.num_frames = 1;
    r.result.frames.height = 4;
    r.result.frames.width = 4;
    r.result.timestamps_s = {0.0};
    r.result.targets_s = {0.0};
    return r;  // and no memfd: the pool must refuse it
  }
  if (mode == "sandbox") {
    const pid_t child = ::fork();
    if (child == 0) _exit(0);  // only if the filter failed to refuse it
    const std::string report =
        "socket=" + Errno(::socket(AF_INET, SOCK_STREAM, 0)) +
        " open=" + Errno(::open("/etc/hostname", O_RDONLY)) +
        " creat=" + Errno(::open("/tmp/fzfault", O_WRONLY | O_CREAT, 0600)) +
        " fork=" + Errno(child) + " exec=" + Errno(::execl("/bin/true", "true", nullptr)) +
        " kill=" + Errno(::kill(1, 0));
    return Reply(absl::StatusCode::kFailedPrecondition, report);
  }
  return Reply(absl::StatusCode::kInvalidArgument, "unknown fault mode '" + mode + "'");
}

}  // namespace
}  // namespace framezip::media::worker

int main(int argc, char** argv) {
  framezip::media::worker::RunWorker(argc, argv, framezip::media::worker::Fault);
}
