// The life of the media worker processes (framezip-media-worker), started once by the server's
// WorkerPool (media/worker/zygote.h) with its end of a SOCK_SEQPACKET socket as descriptor 3:
//
//   framezip-media-worker [--memory-bytes N] [--cpu-seconds S]
//
// The process is a zygote: it loads the decoders' libraries once, locks itself down
// (media/worker/sandbox.h, ApplyZygoteSandbox), and then only forks. For each Fork message it
// forks a worker whose channel is the socket the message carried, answers Forked with the
// worker's pid and a pidfd, and later Exited with the worker's wait status once it has reaped it.
// A worker adds its own limits and the whole filter, says Ready, receives one Request with the
// media's descriptor, runs it (media/worker/handle_request.h), sends the Response (frames in a
// sealed memfd) and exits with _exit: a worker is never reused, so nothing one request left
// behind (a corrupted heap, another tenant's frames) can reach the next. The zygote never reads
// media. Not for people to run.
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

// Never returns: the zygote exits with _exit when the server closes its channel (3 when its
// sandbox fails); each worker with _exit (0 after replying, 3 when its sandbox fails).
[[noreturn]] int RunWorker(int argc, char** argv, const RequestHook& hook = nullptr);

}  // namespace framezip::media::worker
