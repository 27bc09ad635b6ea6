#include "media/worker/worker_process.h"

#include <fcntl.h>
#include <sys/mman.h>
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

// The frames, in a memfd sealed against any change, for the server to read.
StatusOr<int> FramesMemfd(const std::vector<float>& frames) {
  const int fd = memfd_create("framezip-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ResourceExhaustedError("memfd_create failed: {}", std::strerror(errno));
  const auto* bytes = reinterpret_cast<const char*>(frames.data());
  size_t left = frames.size() * sizeof(float);
  while (left > 0) {
    const ssize_t n = ::write(fd, bytes, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return ResourceExhaustedError("writing the frames failed: {}", std::strerror(errno));
    }
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd;
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
  StatusOr<ReadyMessage> ready = ApplySandbox(limits);
  if (!ready.ok()) Die(MessageOf(ready.status()));
  if (!SendMessage(kChannelFd, EncodeReady(*ready)).ok()) _exit(4);

  StatusOr<ReceivedMessage> received = ReceiveMessage(kChannelFd, kMaxMessageBytes);
  if (!received.ok() || received->bytes.empty()) _exit(0);  // the pool shut down
  WorkResponse response;
  std::vector<float> frames;
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
    StatusOr<int> fd = FramesMemfd(frames);
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

}  // namespace framezip::media::worker
