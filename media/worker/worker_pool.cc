#include "media/worker/worker_pool.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/logging.h"
#include "media/file_access.h"
#include "media/worker/socket_io.h"

namespace framezip::media::worker {
namespace {

using Clock = std::chrono::steady_clock;

// A worker that ended with its zygote, not by anything of its request.
constexpr std::string_view kLostWithZygote = "the media worker was lost with its zygote";
Status LostWithZygoteError() { return UnavailableError("{}", kLostWithZygote); }
bool IsLostWithZygote(const Status& s) {
  return s.code() == absl::StatusCode::kUnavailable && MessageOf(s) == kLostWithZygote;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// The media as a descriptor the worker can read: a file under the root (opened and checked
// here), a caller's descriptor, or a memfd holding the bytes.
struct WorkerInput {
  ScopedFd owned;
  int fd = -1;
};

StatusOr<WorkerInput> InputFor(const MediaSource& source, const MediaLimits& limits) {
  WorkerInput in;
  switch (source.kind) {
    case MediaSource::Kind::kFd:
      in.fd = source.fd;
      return in;
    case MediaSource::Kind::kFile: {
      FZ_ASSIGN_OR_RETURN(OpenedFile file, OpenUnderRoot(source.root, source.path));
      if (file.size_bytes > limits.max_bytes) {
        return ResourceExhaustedError("media is {} bytes; the limit is {} bytes (max_bytes)",
                                      file.size_bytes, limits.max_bytes);
      }
      in.owned = std::move(file.fd);
      in.fd = in.owned.get();
      return in;
    }
    case MediaSource::Kind::kBytes: {
      if (static_cast<int64_t>(source.bytes.size()) > limits.max_bytes) {
        return ResourceExhaustedError("media is {} bytes; the limit is {} bytes (max_bytes)",
                                      source.bytes.size(), limits.max_bytes);
      }
      const int fd = memfd_create("framezip-media", MFD_CLOEXEC);
      if (fd < 0) return ResourceExhaustedError("memfd_create failed: {}", std::strerror(errno));
      in.owned = ScopedFd(fd);
      size_t done = 0;
      while (done < source.bytes.size()) {
        const ssize_t n = ::write(fd, source.bytes.data() + done, source.bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ResourceExhaustedError("buffering the media failed: {}", std::strerror(errno));
        done += static_cast<size_t>(n);
      }
      in.fd = fd;
      return in;
    }
  }
  return InvalidArgumentError("unknown media source");
}

}  // namespace

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(WorkerPoolOptions options) {
  if (options.max_workers < 1) return InvalidArgumentError("media workers: max_workers < 1");
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(options)));
  FZ_ASSIGN_OR_RETURN(Worker first, pool->Spawn());
  pool->idle_.push_back(first);
  FZ_LOG_INFO(
      "media workers: {} at most, each one request, forked from a zygote, sandbox: seccomp {}, "
      "memory limit {}, CPU "
      "limit {}, network namespace {}",
      pool->options_.max_workers, pool->sandbox_.seccomp ? "on" : "off",
      pool->sandbox_.memory_limit ? "on" : "off (sanitizer build)",
      pool->sandbox_.cpu_limit ? "on" : "off",
      pool->sandbox_.network_namespace ? "on" : "off (sockets refused by seccomp)");
  pool->refill_ = std::thread([raw = pool.get()] { raw->RefillLoop(); });
  return pool;
}

WorkerPool::~WorkerPool() {
  std::deque<Worker> idle;
  {
    std::unique_lock lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    slot_cv_.notify_all();
    slot_cv_.wait(lock, [this] { return in_flight_ == 0; });
    idle.swap(idle_);
  }
  if (refill_.joinable()) refill_.join();
  {
    std::lock_guard lock(mu_);
    for (Worker& w : idle_) idle.push_back(w);
    idle_.clear();
  }
  for (Worker& w : idle) Kill(w);
}

WorkerPoolStats WorkerPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

ZygoteOptions WorkerPool::ZygoteOptionsFor() const {
  return {.binary = options_.worker_binary,
          .memory_bytes = options_.memory_bytes,
          .cpu_seconds = options_.cpu_seconds,
          .answer_timeout = options_.start_timeout};
}

StatusOr<std::shared_ptr<Zygote>> WorkerPool::LiveZygote() {
  std::lock_guard lock(zygote_mu_);
  if (zygote_ == nullptr || !zygote_->alive()) {
    FZ_ASSIGN_OR_RETURN(zygote_, Zygote::Start(ZygoteOptionsFor()));
    std::lock_guard stats_lock(mu_);
    ++stats_.zygotes_started;
  }
  return zygote_;
}

StatusOr<WorkerPool::Worker> WorkerPool::Spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return UnavailableError("media workers: socketpair failed: {}", std::strerror(errno));
  }
  const std::string binary = options_.worker_binary.string();
  StatusOr<ForkedWorker> forked = UnavailableError("not tried");
  std::shared_ptr<Zygote> zygote;
  // A zygote that died since the last fork is replaced once.
  for (int attempt = 0; attempt < 2 && !forked.ok(); ++attempt) {
    StatusOr<std::shared_ptr<Zygote>> live = LiveZygote();
    if (!live.ok()) {
      forked = live.status();
      break;
    }
    zygote = *live;
    forked = zygote->Fork(sv[1]);
  }
  ::close(sv[1]);
  if (!forked.ok()) {
    ::close(sv[0]);
    return UnavailableError(
        "media workers: no worker from '{}' ({}); the zygote's stderr is in the server's log",
        binary, MessageOf(forked.status()));
  }
  Worker worker{forked->pid, forked->pidfd, sv[0], std::move(zygote)};
  pollfd pfd{worker.socket, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, static_cast<int>(options_.start_timeout.count()));
  StatusOr<ReceivedMessage> message =
      ready > 0 ? ReceiveMessage(worker.socket, kMaxMessageBytes)
                : StatusOr<ReceivedMessage>(UnavailableError("no answer"));
  StatusOr<ReadyMessage> decoded = message.ok() && !message->bytes.empty()
                                       ? DecodeReady(message->bytes)
                                       : StatusOr<ReadyMessage>(UnavailableError("no answer"));
  if (message.ok() && message->fd >= 0) ::close(message->fd);
  if (!decoded.ok()) {
    Kill(worker);
    return UnavailableError(
        "media workers: '{}' did not start and sandbox itself within {} ms ({}); its stderr is in "
        "the server's log",
        binary, options_.start_timeout.count(), MessageOf(decoded.status()));
  }
  std::lock_guard lock(mu_);
  sandbox_ = *decoded;
  ++stats_.started;
  return worker;
}

ReadyMessage WorkerPool::sandbox() const {
  std::lock_guard lock(mu_);
  return sandbox_;
}

void WorkerPool::Signal(const Worker& worker, int sig) {
  if (worker.pid <= 0) return;
  if (worker.pidfd >= 0) {
    ::syscall(SYS_pidfd_send_signal, worker.pidfd, sig, nullptr, 0);
  } else {
    ::kill(worker.pid, sig);  // a kernel without pidfds
  }
}

void WorkerPool::Kill(Worker& worker) {
  if (worker.socket >= 0) ::close(worker.socket);
  Signal(worker, SIGKILL);
  // The zygote reaps it; nobody asks how it ended.
  if (worker.zygote != nullptr && worker.pid > 0) worker.zygote->Forget(worker.pid);
  if (worker.pidfd >= 0) ::close(worker.pidfd);
  worker = Worker{};
}

void WorkerPool::RefillLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (static_cast<int>(idle_.size()) >= options_.max_workers) {
      cv_.wait(lock);
      continue;
    }
    lock.unlock();
    StatusOr<Worker> worker = Spawn();
    lock.lock();
    if (!worker.ok()) {
      FZ_LOG_ERROR("{}", MessageOf(worker.status()));
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; });
      continue;
    }
    if (stopping_) {
      lock.unlock();
      Kill(*worker);
      lock.lock();
      break;
    }
    idle_.push_back(*worker);
  }
}

StatusOr<WorkerPool::Worker> WorkerPool::Take() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      Worker w = idle_.front();
      idle_.pop_front();
      cv_.notify_all();  // refill
      return w;
    }
  }
  return Spawn();
}

Status WorkerPool::DeathStatus(Worker& worker) {
  // It closed its end; give it a moment to finish dying (the zygote reaps it and reports how it
  // ended) before stopping it.
  std::optional<int> ended;
  if (worker.zygote != nullptr) {
    ended = worker.zygote->WaitExit(worker.pid, std::chrono::seconds(1));
    if (!ended) {
      Signal(worker, SIGKILL);
      ended = worker.zygote->WaitExit(worker.pid, std::chrono::seconds(5));
    }
  }
  const int status = ended.value_or(0);
  const bool got = ended.has_value();
  if (!got && worker.zygote != nullptr && !worker.zygote->alive()) {
    ::close(worker.socket);
    if (worker.pidfd >= 0) ::close(worker.pidfd);
    worker = Worker{};
    return LostWithZygoteError();
  }
  ::close(worker.socket);
  if (worker.pidfd >= 0) ::close(worker.pidfd);
  worker = Worker{};
  std::lock_guard lock(mu_);
  if (got && WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXCPU) {
      ++stats_.limit_hits;
      return ResourceExhaustedError(
          "decoding this media used more than its CPU-time limit of {} s "
          "(media_worker_cpu_seconds)",
          options_.cpu_seconds);
    }
    if (sig == SIGKILL) {
      ++stats_.limit_hits;
      return ResourceExhaustedError(
          "the media worker was killed while decoding (its hard CPU limit, or the machine ran "
          "out of memory)");
    }
    ++stats_.crashes;
    return InvalidArgumentError(
        "the media decoder crashed on this file ({}): it is corrupt, or not media this server "
        "can read",
        SignalName(sig));
  }
  ++stats_.crashes;
  if (got && WIFEXITED(status)) {
    return InternalError("the media worker exited with code {} before replying",
                         WEXITSTATUS(status));
  }
  return InternalError("the media worker closed its channel without replying");
}

StatusOr<WorkResponse> WorkerPool::Run(const WorkRequest& request, const MediaSource& source,
                                       const DecodeOptions& options, FrameData* frames) {
  FZ_ASSIGN_OR_RETURN(WorkerInput input, InputFor(source, request.limits));
  auto cancelled = [&] { return options.cancel != nullptr && options.cancel->load(); };
  {
    std::unique_lock lock(mu_);
    while (in_flight_ >= options_.max_workers && !stopping_) {
      if (cancelled()) return CancelledError("media decoding was cancelled");
      slot_cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
    if (stopping_) return UnavailableError("the media workers are shutting down");
    ++in_flight_;
    ++stats_.requests;
  }
  struct SlotRelease {
    WorkerPool* pool;
    ~SlotRelease() {
      std::lock_guard lock(pool->mu_);
      --pool->in_flight_;
      pool->slot_cv_.notify_all();
    }
  } release{this};

  const std::vector<uint8_t> request_bytes = EncodeRequest(request);
  const auto deadline = Clock::now() +
                        std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(request.limits.max_decode_s)) +
                        options_.reply_grace;
  Worker worker;
  StatusOr<ReceivedMessage> message = UnavailableError("no worker yet");
  // A worker lost with its zygote (an idle one found dead, or one killed under the request) is not
  // the media's doing, since the zygote never reads media: the request goes once more to a worker
  // of the zygote started in its place.
  for (int attempt = 0;; ++attempt) {
    FZ_ASSIGN_OR_RETURN(worker, attempt == 0 ? Take() : Spawn());
    Status lost = absl::OkStatus();
    if (!SendMessage(worker.socket, request_bytes, input.fd).ok()) {
      // An idle worker that died before its request: the request never reached it.
      if (attempt == 0) {
        Kill(worker);
        continue;
      }
      lost = DeathStatus(worker);
    } else {
      for (;;) {
        if (cancelled()) {
          Kill(worker);
          return CancelledError("media decoding was cancelled");
        }
        if (Clock::now() >= deadline) {
          Kill(worker);
          std::lock_guard lock(mu_);
          ++stats_.timeouts;
          return DeadlineExceededError(
              "media decoding did not finish within {:.0f} s (max_decode_s); the decoder was "
              "stopped",
              request.limits.max_decode_s);
        }
        pollfd pfd{worker.socket, POLLIN, 0};
        const int ready = ::poll(&pfd, 1, 50);
        if (ready > 0) break;
        if (ready < 0 && errno != EINTR) return DeathStatus(worker);
      }
      message = ReceiveMessage(worker.socket, kMaxMessageBytes);
      if (message.ok() && !message->bytes.empty()) break;
      if (message.ok() && message->fd >= 0) ::close(message->fd);
      lost = DeathStatus(worker);
    }
    if (attempt == 0 && IsLostWithZygote(lost)) continue;
    return lost;
  }
  ScopedFd frames_fd(message->fd);
  Kill(worker);  // single use: it has replied, it goes
  StatusOr<WorkResponse> response = DecodeResponse(message->bytes, request.limits);
  if (!response.ok()) {
    std::lock_guard lock(mu_);
    ++stats_.bad_replies;
    return response.status();
  }
  if (response->code != 0) return *response;
  if (response->has_frames) {
    if (request.op != WorkOp::kDecode || frames == nullptr) {
      return InternalError("malformed reply from the media worker (unexpected frames)");
    }
    const FrameBatch& f = response->result.frames;
    const int64_t floats = int64_t{f.num_frames} * f.channels * f.height * f.width;
    // Read where the worker wrote them: a read-only mapping of its sealed memfd.
    StatusOr<FrameData> mapped =
        FrameData::MapSealedMemfd(frames_fd.get(), static_cast<size_t>(floats));
    if (!mapped.ok()) {
      std::lock_guard lock(mu_);
      ++stats_.bad_replies;
      return InternalError("malformed reply from the media worker ({})",
                           MessageOf(mapped.status()));
    }
    *frames = *std::move(mapped);
  } else if (request.op == WorkOp::kDecode) {
    return InternalError("malformed reply from the media worker (no frames)");
  }
  return response;
}

StatusOr<MediaInfo> WorkerPool::Probe(const MediaSource& source, const MediaLimits& limits,
                                      const DecodeOptions& options) {
  WorkRequest request;
  request.op = WorkOp::kProbe;
  request.limits = limits;
  if (options.known_content_hash) {
    request.has_content_hash = true;
    request.content_hash = *options.known_content_hash;
  }
  FZ_ASSIGN_OR_RETURN(WorkResponse response, Run(request, source, options, nullptr));
  FZ_RETURN_IF_ERROR(ResponseStatus(response));
  return std::move(response.result.info);
}

StatusOr<DecodedMedia> WorkerPool::Decode(const MediaSource& source,
                                          const FrameSamplingSpec& sampling,
                                          const PreprocessSpec& preprocess,
                                          const MediaLimits& limits,
                                          const DecodeOptions& options) {
  WorkRequest request;
  request.op = WorkOp::kDecode;
  request.sampling = sampling;
  request.preprocess = preprocess;
  request.limits = limits;
  if (options.known_content_hash) {
    request.has_content_hash = true;
    request.content_hash = *options.known_content_hash;
  }
  FrameData frames;
  FZ_ASSIGN_OR_RETURN(WorkResponse response, Run(request, source, options, &frames));
  FZ_RETURN_IF_ERROR(ResponseStatus(response));
  response.result.frames.data = std::move(frames);
  return std::move(response.result);
}

StatusOr<DecodedMedia> WorkerPool::Verify(const MediaSource& source,
                                          const FrameSamplingSpec& sampling,
                                          const MediaLimits& limits,
                                          const DecodeOptions& options) {
  WorkRequest request;
  request.op = WorkOp::kVerify;
  request.sampling = sampling;
  request.limits = limits;
  if (options.known_content_hash) {
    request.has_content_hash = true;
    request.content_hash = *options.known_content_hash;
  }
  FZ_ASSIGN_OR_RETURN(WorkResponse response, Run(request, source, options, nullptr));
  FZ_RETURN_IF_ERROR(ResponseStatus(response));
  return std::move(response.result);
}

}  // namespace framezip::media::worker
