// WorkerPool: a MediaBackend that decodes untrusted media in sandboxed, single-use worker
// processes (framezip-media-worker), so a decoder crash, hang, memory blow-up or exploit fails
// that one request and never the server.
//
//   auto pool = WorkerPool::Start({.worker_binary = "/usr/bin/framezip-media-worker"});
//   StatusOr<DecodedMedia> d = (*pool)->Decode(source, sampling, spec, limits);
//
// Each request runs in a fresh process, forked from a zygote that has the decoders loaded
// (media/worker/zygote.h): the pool keeps up to `max_workers` workers forked and sandboxed ahead
// of time (so a request does not wait for one), hands a request to one with the media as a file
// descriptor, reads the reply (frames through a sealed memfd), then kills that worker; a
// background thread forks its replacement. At most `max_workers`
// requests decode at once; more wait their turn (or until cancelled).
//
// Errors, besides the media stage's own (media/media.h), which workers send back as they are:
//   INVALID_ARGUMENT    the decoder crashed on the media (signal named): corrupt or malicious.
//   RESOURCE_EXHAUSTED  the worker hit its CPU-time limit, or was killed for memory.
//   DEADLINE_EXCEEDED   no reply within limits.max_decode_s (+ a grace): the worker was killed.
//   CANCELLED           options.cancel was raised: the worker was killed.
//   UNAVAILABLE         a worker could not be started (the message names the binary).
//   INTERNAL            a malformed reply (a compromised worker), or one that exited early.
//
// Thread-safe. Destroying the pool kills its idle workers and waits for requests in flight.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "media/media_backend.h"
#include "media/worker/wire.h"
#include "media/worker/zygote.h"

namespace framezip::media::worker {

struct WorkerPoolOptions {
  std::filesystem::path worker_binary;
  int max_workers = 2;                  // requests decoding at once, and workers kept ready
  uint64_t memory_bytes = 4ull << 30;   // RLIMIT_AS of a worker
  uint32_t cpu_seconds = 120;           // RLIMIT_CPU of a worker (one request)
  std::chrono::milliseconds start_timeout{10000};  // a new worker must be Ready by then
  std::chrono::milliseconds reply_grace{5000};     // past limits.max_decode_s
};

struct WorkerPoolStats {
  uint64_t requests = 0;
  uint64_t crashes = 0;      // a worker died of a signal before replying
  uint64_t timeouts = 0;     // killed for taking too long
  uint64_t limit_hits = 0;   // CPU or memory limit
  uint64_t bad_replies = 0;  // malformed replies
  uint64_t started = 0;      // workers started
  uint64_t zygotes_started = 0;  // 1, and one more each time the last one died
};

class WorkerPool final : public MediaBackend {
 public:
  // Starts one worker to check that the binary runs and sandboxes itself (what it applied is
  // logged once and kept in sandbox()). UNAVAILABLE naming the binary when it cannot.
  static StatusOr<std::unique_ptr<WorkerPool>> Start(WorkerPoolOptions options);
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  StatusOr<MediaInfo> Probe(const MediaSource& source, const MediaLimits& limits,
                            const DecodeOptions& options = {}) override;
  StatusOr<DecodedMedia> Decode(const MediaSource& source, const FrameSamplingSpec& sampling,
                                const PreprocessSpec& preprocess, const MediaLimits& limits,
                                const DecodeOptions& options = {}) override;
  StatusOr<DecodedMedia> Verify(const MediaSource& source, const FrameSamplingSpec& sampling,
                                const MediaLimits& limits,
                                const DecodeOptions& options = {}) override;

  // A copy: every worker the refill thread starts reports it again (under mu_).
  ReadyMessage sandbox() const;
  WorkerPoolStats stats() const;

 private:
  struct Worker {
    pid_t pid = -1;
    int pidfd = -1;
    int socket = -1;
    std::shared_ptr<Zygote> zygote;  // that forked it, reaps it, and knows how it ended
  };
  explicit WorkerPool(WorkerPoolOptions options);
  ZygoteOptions ZygoteOptionsFor() const;
  // The zygote, started again if the last one died.
  StatusOr<std::shared_ptr<Zygote>> LiveZygote();
  // A new sandboxed worker, Ready.
  StatusOr<Worker> Spawn();
  static void Signal(const Worker& worker, int sig);
  static void Kill(Worker& worker);  // SIGKILL and close; the zygote reaps it
  // A ready worker for one request (an idle one, or a fresh one).
  StatusOr<Worker> Take();
  void RefillLoop();
  // Runs `request` on `source` in a worker; fills `frames` for a decode.
  StatusOr<WorkResponse> Run(const WorkRequest& request, const MediaSource& source,
                             const DecodeOptions& options, FrameData* frames);
  // The status of a worker that closed its socket without replying (it is reaped here).
  Status DeathStatus(Worker& worker);

  const WorkerPoolOptions options_;
  ReadyMessage sandbox_;

  mutable std::mutex mu_;
  std::condition_variable cv_;        // refill thread: workers taken / stopping
  std::condition_variable slot_cv_;   // requests waiting for a slot
  std::deque<Worker> idle_;
  int in_flight_ = 0;
  bool stopping_ = false;
  WorkerPoolStats stats_;
  std::thread refill_;

  std::mutex zygote_mu_;
  std::shared_ptr<Zygote> zygote_;
};

}  // namespace framezip::media::worker
