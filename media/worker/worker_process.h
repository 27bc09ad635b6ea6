// The life of one media worker process (framezip-media-worker), started by the server's
// WorkerPool (media/worker/worker_pool.h) with its end of a SOCK_SEQPACKET socket as
// descriptor 3:
//
//   framezip-media-worker [--memory-bytes N] [--cpu-seconds S]
//
// It applies its sandbox (media/worker/sandbox.h), says Ready, receives one Request with the
// media's descriptor, runs it (media/worker/handle_request.h), sends the Response (frames in a
// sealed memfd) and exits with _exit: the process is never reused, so nothing one request left
// behind (a corrupted heap, another tenant's frames) can reach the next. Not for people to run.
#pragma once

#include <functional>
#include <optional>

#include "media/worker/wire.h"

namespace framezip::media::worker {

inline constexpr int kChannelFd = 3;

// Tests only (a fault-injecting worker): called inside the sandbox with the request and the
// media's descriptor before it is handled; a response returned is sent instead of handling it.
using RequestHook =
    std::function<std::optional<WorkResponse>(const WorkRequest& request, int media_fd)>;

// Never returns: the worker exits with _exit (0 after replying; 3 when the sandbox fails).
[[noreturn]] int RunWorker(int argc, char** argv, const RequestHook& hook = nullptr);

}  // namespace framezip::media::worker
