// The server's handle on the media workers' zygote: one framezip-media-worker process, started
// once, that has loaded the decoders' libraries and locked itself down, and forks a fresh worker
// for each request (media/worker/worker_process.h). Starting a worker is then a fork of a warm
// process (about a millisecond) instead of a new program that links some 250 libraries and runs
// their constructors (about 130 ms of CPU, measured by `framezip bench media`), which on a busy
// machine ran beside the request being decoded.
//
// The workers are the zygote's children, not the server's: the zygote reaps them and reports each
// one's wait status, and the server signals a worker through the pidfd the zygote sent with it, so
// a reused pid is never hit.
//
// Thread-safe. If the zygote dies, alive() turns false and every call fails fast (its workers die
// with it); the pool starts another.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/status.h"

namespace framezip::media::worker {

struct ZygoteOptions {
  std::filesystem::path binary;                     // framezip-media-worker
  uint64_t memory_bytes = 0;                        // RLIMIT_AS of each worker (0: none)
  uint32_t cpu_seconds = 0;                         // RLIMIT_CPU of each worker (0: none)
  std::chrono::milliseconds answer_timeout{10000};  // the zygote must answer a Fork by then
};

// A worker the zygote forked. `pidfd` (-1 where the kernel has no pidfds) is the caller's.
struct ForkedWorker {
  pid_t pid = -1;
  int pidfd = -1;
};

class Zygote {
 public:
  // UNAVAILABLE naming the binary when it cannot be started.
  static StatusOr<std::shared_ptr<Zygote>> Start(const ZygoteOptions& options);
  // Closes the channel (the zygote exits, and its workers with it) and reaps the zygote.
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Forks a worker whose channel to the server is `worker_socket` (the zygote gets a copy; the
  // caller still owns and should close its own). UNAVAILABLE when the zygote is gone, cannot
  // fork, or does not answer within answer_timeout (it is then stopped and alive() is false).
  StatusOr<ForkedWorker> Fork(int worker_socket);

  // The wait status of worker `pid` once the zygote has reaped it, waiting up to `timeout`;
  // nullopt when it did not end by then or the zygote is gone.
  std::optional<int> WaitExit(pid_t pid, std::chrono::milliseconds timeout);
  // The server killed `pid` and will not ask how it ended: its status is dropped on arrival.
  void Forget(pid_t pid);

  bool alive() const;

 private:
  Zygote(pid_t pid, int channel, std::chrono::milliseconds answer_timeout);
  void ReadLoop();
  void Stop();

  const pid_t pid_;
  const int channel_;
  const std::chrono::milliseconds answer_timeout_;
  std::mutex fork_mu_;  // one Fork at a time: the zygote answers them in order

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool dead_ = false;
  std::deque<StatusOr<ForkedWorker>> answers_;
  std::unordered_map<pid_t, int> exited_;
  std::unordered_set<pid_t> forgotten_;
  std::thread reader_;
};

}  // namespace framezip::media::worker
