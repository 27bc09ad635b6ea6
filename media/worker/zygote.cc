#include "media/worker/zygote.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/logging.h"
#include "media/worker/socket_io.h"
#include "media/worker/wire.h"

extern char** environ;

namespace framezip::media::worker {
namespace {

// Environment the zygote (and so every worker) gets: nothing of the server's (tokens,
// credentials) but what sanitizer runtimes read, and one BLAS thread.
std::vector<std::string> ZygoteEnvironment() {
  // In sanitizer builds, a worker that a file makes misbehave must end the way an unsanitized one
  // would, by a signal the pool classifies as a crash: fatal signals are left to the kernel and
  // a sanitizer report ends in SIGABRT (not exit code 1). Workers _exit under a seccomp filter,
  // so a leak check at exit (it needs ptrace) is off. Harmless without sanitizers.
  std::string asan =
      "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:"
      "abort_on_error=1:detect_leaks=0";
  std::string ubsan = "abort_on_error=1";
  // ThreadSanitizer's runtime has a thread of its own, so the zygote's forks count as forks of a
  // threaded process, which it refuses by default; and its fatal-signal handling is left to the
  // kernel as AddressSanitizer's is.
  std::string tsan =
      "die_after_fork=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0";
  // OpenCV's core links a BLAS whose constructor starts a spinning thread per core; the media
  // stage never calls it.
  std::vector<std::string> env = {"LSAN_OPTIONS=detect_leaks=0", "OPENBLAS_NUM_THREADS=1"};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("ASAN_OPTIONS=", 0) == 0) asan = kv.substr(13) + ":" + asan;
    if (kv.rfind("UBSAN_OPTIONS=", 0) == 0) ubsan = kv.substr(14) + ":" + ubsan;
    if (kv.rfind("TSAN_OPTIONS=", 0) == 0) tsan = kv.substr(13) + ":" + tsan;  // suppressions
  }
  env.push_back("ASAN_OPTIONS=" + asan);
  env.push_back("UBSAN_OPTIONS=" + ubsan);
  env.push_back("TSAN_OPTIONS=" + tsan);
  return env;
}

}  // namespace

StatusOr<std::shared_ptr<Zygote>> Zygote::Start(const ZygoteOptions& options) {
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
  // The server blocks termination signals on its threads; the zygote starts with none blocked and
  // every signal at its default action, so SIGXCPU ends a worker.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  const std::string binary = options.binary.string();
  std::vector<std::string> args = {binary, "--memory-bytes", std::to_string(options.memory_bytes),
                                   "--cpu-seconds", std::to_string(options.cpu_seconds)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = ZygoteEnvironment();
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
  std::shared_ptr<Zygote> zygote(new Zygote(pid, sv[0], options.answer_timeout));
  zygote->reader_ = std::thread([raw = zygote.get()] { raw->ReadLoop(); });
  return zygote;
}

Zygote::Zygote(pid_t pid, int channel, std::chrono::milliseconds answer_timeout)
    : pid_(pid), channel_(channel), answer_timeout_(answer_timeout) {}

Zygote::~Zygote() {
  Stop();
  if (reader_.joinable()) reader_.join();
  ::close(channel_);
  // Answers nobody took (a Fork that timed out): their pidfds.
  for (const StatusOr<ForkedWorker>& answer : answers_) {
    if (answer.ok() && answer->pidfd >= 0) ::close(answer->pidfd);
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Zygote::Stop() {
  // The zygote reads end-of-file and exits; its workers die with it (PR_SET_PDEATHSIG). The
  // reader wakes from its blocked receive.
  ::shutdown(channel_, SHUT_RDWR);
  ::kill(pid_, SIGKILL);  // still the server's unreaped child: the pid cannot be reused yet
}

bool Zygote::alive() const {
  std::lock_guard lock(mu_);
  return !dead_;
}

void Zygote::ReadLoop() {
  for (;;) {
    StatusOr<ReceivedMessage> message = ReceiveMessage(channel_, kMaxMessageBytes);
    StatusOr<MessageKind> kind = message.ok() && !message->bytes.empty()
                                     ? ZygoteMessageKind(message->bytes)
                                     : StatusOr<MessageKind>(UnavailableError("closed"));
    std::lock_guard lock(mu_);
    if (kind.ok() && *kind == MessageKind::kForked) {
      StatusOr<ForkedMessage> forked = DecodeForked(message->bytes);
      if (forked.ok() && forked->pid > 0) {
        answers_.push_back(ForkedWorker{forked->pid, message->fd});
      } else {
        if (message->fd >= 0) ::close(message->fd);
        answers_.push_back(forked.ok()
                               ? UnavailableError("media workers: the zygote cannot fork: {}",
                                                  std::strerror(forked->error))
                               : forked.status());
      }
      cv_.notify_all();
      continue;
    }
    if (message.ok() && message->fd >= 0) ::close(message->fd);
    if (kind.ok() && *kind == MessageKind::kExited) {
      StatusOr<ExitedMessage> exited = DecodeExited(message->bytes);
      if (exited.ok()) {
        if (forgotten_.erase(exited->pid) == 0) exited_[exited->pid] = exited->wait_status;
        cv_.notify_all();
        continue;
      }
      kind = exited.status();
    }
    if (!kind.ok() && !message.ok()) kind = message.status();
    if (!message.ok() || !message->bytes.empty()) {
      FZ_LOG_ERROR("media workers: the zygote's channel failed ({}); starting another",
                   MessageOf(kind.status()));
    }
    dead_ = true;
    cv_.notify_all();
    return;
  }
}

StatusOr<ForkedWorker> Zygote::Fork(int worker_socket) {
  std::lock_guard fork_lock(fork_mu_);
  if (!alive()) return UnavailableError("media workers: the zygote is gone");
  if (!SendMessage(channel_, EncodeFork(), worker_socket).ok()) {
    return UnavailableError("media workers: the zygote is gone");
  }
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, answer_timeout_, [this] { return dead_ || !answers_.empty(); })) {
    // A late answer would be taken for the next fork's: this zygote is done.
    lock.unlock();
    Stop();
    return UnavailableError("media workers: the zygote did not answer within {} ms",
                            answer_timeout_.count());
  }
  if (answers_.empty()) return UnavailableError("media workers: the zygote is gone");
  StatusOr<ForkedWorker> answer = std::move(answers_.front());
  answers_.pop_front();
  return answer;
}

std::optional<int> Zygote::WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return dead_ || exited_.contains(pid); });
  const auto it = exited_.find(pid);
  if (it == exited_.end()) return std::nullopt;
  const int status = it->second;
  exited_.erase(it);
  return status;
}

void Zygote::Forget(pid_t pid) {
  std::lock_guard lock(mu_);
  if (exited_.erase(pid) == 0 && !dead_) forgotten_.insert(pid);
}

}  // namespace framezip::media::worker
