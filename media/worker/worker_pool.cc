#include "media/worker/worker_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/logging.h"
#include "media/file_access.h"
#include "media/worker/socket_io.h"

extern char** environ;

namespace framezip::media::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Environment a worker gets: nothing of the server's (tokens, credentials) but what sanitizer
// runtimes read.
std::vector<std::string> WorkerEnvironment() {
  // In sanitizer builds, a worker that a file makes misbehave must end the way an unsanitized one
  // would, by a signal the pool classifies as a crash: fatal signals are left to the kernel and
  // a sanitizer report ends in SIGABRT (not exit code 1). Workers _exit under a seccomp filter,
  // so a leak check at exit (it needs ptrace) is off. Harmless without sanitizers.
  std::string asan = "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:"
                     "abort_on_error=1:detect_leaks=0";
  std::string ubsan = "abort_on_error=1";
  std::vector<std::string> env = {"LSAN_OPTIONS=detect_leaks=0"};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("ASAN_OPTIONS=", 0) == 0) asan = kv.substr(13) + ":" + asan;
    if (kv.rfind("UBSAN_OPTIONS=", 0) == 0) ubsan = kv.substr(14) + ":" + ubsan;
    if (kv.rfind("TSAN_OPTIONS=", 0) == 0) env.push_back(kv);  // its suppressions (make test-tsan)
  }
  env.push_back("ASAN_OPTIONS=" + asan);
  env.push_back("UBSAN_OPTIONS=" + ubsan);
  return env;
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

// Reads the sealed frames memfd into `frames`, which must hold exactly `floats` values.
Status ReadFrames(int fd, int64_t floats, std::vector<float>* frames) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size != floats * static_cast<int64_t>(sizeof(float))) {
    return InternalError("malformed reply from the media worker (frame buffer size)");
  }
  frames->resize(static_cast<size_t>(floats));
  auto* out = reinterpret_cast<char*>(frames->data());
  int64_t done = 0;
  const int64_t total = st.st_size;
  while (done < total) {
    const ssize_t n = ::pread(fd, out + done, static_cast<size_t>(total - done), done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return InternalError("reading the media worker's frames failed");
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(WorkerPoolOptions options) {
  if (options.max_workers < 1) return InvalidArgumentError("media workers: max_workers < 1");
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(options)));
  FZ_ASSIGN_OR_RETURN(Worker first, pool->Spawn());
  pool->idle_.push_back(first);
  FZ_LOG_INFO(
      "media workers: {} at most, each one request, sandbox: seccomp {}, memory limit {}, CPU "
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

StatusOr<WorkerPool::Worker> WorkerPool::Spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return UnavailableError("media workers: socketpair failed: {}", std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 3);  // dup2 clears FD_CLOEXEC on 3
  posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The server blocks termination signals on its threads; a worker starts with none blocked and
  // every signal at its default action, so SIGXCPU ends it.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  const std::string binary = options_.worker_binary.string();
  std::vector<std::string> args = {binary, "--memory-bytes", std::to_string(options_.memory_bytes),
                                   "--cpu-seconds", std::to_string(options_.cpu_seconds)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = WorkerEnvironment();
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    return UnavailableError("media workers: cannot start '{}': {} (set --media-worker)", binary,
                            std::strerror(rc));
  }
  Worker worker{pid, sv[0]};
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

void WorkerPool::Kill(Worker& worker) {
  if (worker.socket >= 0) ::close(worker.socket);
  if (worker.pid > 0) {
    ::kill(worker.pid, SIGKILL);
    int status = 0;
    while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
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
  // It closed its end; give it a moment to finish dying before deciding how it ended.
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 200 && got == 0; ++i) {
    got = ::waitpid(worker.pid, &status, WNOHANG);
    if (got == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (got == 0) {
    ::kill(worker.pid, SIGKILL);
    while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(worker.socket);
  worker = Worker{};
  std::lock_guard lock(mu_);
  if (got > 0 && WIFSIGNALED(status)) {
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
  if (got > 0 && WIFEXITED(status)) {
    return InternalError("the media worker exited with code {} before replying",
                         WEXITSTATUS(status));
  }
  return InternalError("the media worker closed its channel without replying");
}

StatusOr<WorkResponse> WorkerPool::Run(const WorkRequest& request, const MediaSource& source,
                                       const DecodeOptions& options, std::vector<float>* frames) {
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

  FZ_ASSIGN_OR_RETURN(Worker worker, Take());
  if (Status s = SendMessage(worker.socket, EncodeRequest(request), input.fd); !s.ok()) {
    return DeathStatus(worker);
  }
  const auto deadline = Clock::now() +
                        std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(request.limits.max_decode_s)) +
                        options_.reply_grace;
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
          "media decoding did not finish within {:.0f} s (max_decode_s); the decoder was stopped",
          request.limits.max_decode_s);
    }
    pollfd pfd{worker.socket, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 50);
    if (ready > 0) break;
    if (ready < 0 && errno != EINTR) return DeathStatus(worker);
  }
  StatusOr<ReceivedMessage> message = ReceiveMessage(worker.socket, kMaxMessageBytes);
  if (!message.ok() || message->bytes.empty()) {
    if (message.ok() && message->fd >= 0) ::close(message->fd);
    return DeathStatus(worker);
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
    if (Status s = ReadFrames(frames_fd.get(), floats, frames); !s.ok()) {
      std::lock_guard lock(mu_);
      ++stats_.bad_replies;
      return s;
    }
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
  std::vector<float> frames;
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
