#include "media/worker/sandbox.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

namespace framezip::media::worker {
namespace {

// AddressSanitizer and ThreadSanitizer reserve terabytes of shadow memory: an address-space
// limit would stop them before main.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kShadowMemorySanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kShadowMemorySanitizer = true;
#else
constexpr bool kShadowMemorySanitizer = false;
#endif
#else
constexpr bool kShadowMemorySanitizer = false;
#endif

Status SetLimit(int resource, rlim_t soft, rlim_t hard, const char* name) {
  rlimit r{soft, hard};
  if (setrlimit(resource, &r) != 0) {
    return InternalError("media worker: setrlimit({}) failed: {}", name, std::strerror(errno));
  }
  return absl::OkStatus();
}

struct SeccompDeleter {
  void operator()(scmp_filter_ctx* ctx) const { seccomp_release(*ctx); delete ctx; }
};

// Syscalls a decoder never makes. Refused with EPERM, so a library probing for a feature sees a
// plain failure rather than a killed process.
constexpr int kDenied[] = {
    // network: no sockets (the worker's one socket to the server was inherited)
    SCMP_SYS(socket), SCMP_SYS(socketpair), SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(listen),
    SCMP_SYS(accept), SCMP_SYS(accept4),
    // processes and programs
    SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace),
    SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(kill), SCMP_SYS(tkill),
    SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_getfd), SCMP_SYS(pidfd_send_signal),
    // files: the media comes as a descriptor, frames leave in a memfd
    SCMP_SYS(open), SCMP_SYS(openat), SCMP_SYS(openat2), SCMP_SYS(creat),
    SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at), SCMP_SYS(truncate),
    SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(rename), SCMP_SYS(renameat),
    SCMP_SYS(renameat2), SCMP_SYS(link), SCMP_SYS(linkat), SCMP_SYS(symlink), SCMP_SYS(symlinkat),
    SCMP_SYS(mkdir), SCMP_SYS(mkdirat), SCMP_SYS(rmdir), SCMP_SYS(mknod), SCMP_SYS(mknodat),
    SCMP_SYS(chmod), SCMP_SYS(fchmodat), SCMP_SYS(chown), SCMP_SYS(lchown), SCMP_SYS(fchownat),
    SCMP_SYS(chdir), SCMP_SYS(chroot), SCMP_SYS(pivot_root), SCMP_SYS(mount), SCMP_SYS(umount2),
    SCMP_SYS(fsopen), SCMP_SYS(fsmount), SCMP_SYS(move_mount), SCMP_SYS(open_tree),
    // privileges, namespaces and the kernel's other doors
    SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setreuid), SCMP_SYS(setregid),
    SCMP_SYS(setresuid), SCMP_SYS(setresgid), SCMP_SYS(setgroups), SCMP_SYS(unshare),
    SCMP_SYS(setns), SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(bpf),
    SCMP_SYS(perf_event_open), SCMP_SYS(userfaultfd), SCMP_SYS(init_module),
    SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(kexec_load),
    SCMP_SYS(kexec_file_load), SCMP_SYS(reboot), SCMP_SYS(swapon), SCMP_SYS(swapoff),
    SCMP_SYS(acct), SCMP_SYS(settimeofday), SCMP_SYS(clock_settime), SCMP_SYS(adjtimex),
    SCMP_SYS(clock_adjtime), SCMP_SYS(iopl), SCMP_SYS(ioperm), SCMP_SYS(io_uring_setup),
    SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register), SCMP_SYS(personality),
    SCMP_SYS(quotactl), SCMP_SYS(syslog), SCMP_SYS(vhangup), SCMP_SYS(lookup_dcookie)};

// Syscalls the zygote itself needs from kDenied: it forks the workers and hands the server a
// pidfd of each. Every worker it forks loads the whole filter on top of the zygote's.
bool ZygoteNeeds(int sys) {
  return sys == SCMP_SYS(fork) || sys == SCMP_SYS(vfork) || sys == SCMP_SYS(pidfd_open);
}

enum class FilterFor { kZygote, kWorker };

Status InstallFilter(FilterFor role) {
  scmp_filter_ctx raw = seccomp_init(SCMP_ACT_ALLOW);
  if (raw == nullptr) return InternalError("media worker: seccomp_init failed");
  std::unique_ptr<scmp_filter_ctx, SeccompDeleter> ctx(new scmp_filter_ctx(raw));
  for (int sys : kDenied) {
    // A syscall this kernel/architecture does not know is resolved as negative: skip it.
    if (sys < 0) continue;
    if (role == FilterFor::kZygote && ZygoteNeeds(sys)) continue;
    const int rc = seccomp_rule_add(raw, SCMP_ACT_ERRNO(EPERM), sys, 0);
    if (rc != 0 && rc != -EDOM) {
      return InternalError("media worker: seccomp rule for syscall {} failed: {}", sys,
                           std::strerror(-rc));
    }
  }
  int rc = 0;
  if (role == FilterFor::kWorker) {
    // Threads only: clone without CLONE_THREAD would be a new process.
    rc = seccomp_rule_add(raw, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    if (rc != 0) {
      return InternalError("media worker: seccomp clone rule failed: {}", std::strerror(-rc));
    }
  }
  // clone3 passes its flags in memory a filter cannot read: refuse it as unknown, so the C
  // library falls back to clone, which the rule above checks.
  rc = seccomp_rule_add(raw, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  if (rc != 0 && rc != -EDOM) {
    return InternalError("media worker: seccomp clone3 rule failed: {}", std::strerror(-rc));
  }
  // A worker's thread may only signal threads of its own process (abort() and raise() use
  // tgkill). Not in the zygote's filter: it would hold every worker to the zygote's pid.
  if (role == FilterFor::kWorker) {
    rc = seccomp_rule_add(raw, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1,
                          SCMP_A0(SCMP_CMP_NE, static_cast<scmp_datum_t>(getpid())));
    if (rc != 0) {
      return InternalError("media worker: seccomp tgkill rule failed: {}", std::strerror(-rc));
    }
  }
  rc = seccomp_load(raw);
  if (rc != 0) return InternalError("media worker: seccomp_load failed: {}", std::strerror(-rc));
  return absl::OkStatus();
}

}  // namespace

StatusOr<bool> ApplyZygoteSandbox() {
  // Die with the server, and never core-dump what may hold another tenant's frames.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  FZ_RETURN_IF_ERROR(SetLimit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE"));
  FZ_RETURN_IF_ERROR(SetLimit(RLIMIT_NOFILE, 64, 64, "RLIMIT_NOFILE"));
  // Best effort: an empty network namespace needs CAP_SYS_ADMIN or unprivileged user
  // namespaces. The seccomp filter refuses sockets either way.
  const bool network_namespace = unshare(CLONE_NEWNET) == 0;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return InternalError("media worker: PR_SET_NO_NEW_PRIVS failed: {}", std::strerror(errno));
  }
  FZ_RETURN_IF_ERROR(InstallFilter(FilterFor::kZygote));
  return network_namespace;
}

StatusOr<ReadyMessage> ApplyWorkerSandbox(const SandboxLimits& limits, bool network_namespace) {
  ReadyMessage applied;
  applied.network_namespace = network_namespace;
  // A fork's death signal is reset: the worker dies with the zygote (which dies with the server).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (limits.memory_bytes > 0 && !kShadowMemorySanitizer) {
    FZ_RETURN_IF_ERROR(
        SetLimit(RLIMIT_AS, limits.memory_bytes, limits.memory_bytes, "RLIMIT_AS"));
    applied.memory_limit = true;
  }
  if (limits.cpu_seconds > 0) {
    // SIGXCPU at the soft limit (the pool reports it), SIGKILL a few seconds later regardless.
    // A fork starts its CPU time at zero, so the limit is this request's.
    FZ_RETURN_IF_ERROR(
        SetLimit(RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5, "RLIMIT_CPU"));
    applied.cpu_limit = true;
  }
  FZ_RETURN_IF_ERROR(InstallFilter(FilterFor::kWorker));
  applied.seccomp = true;
  return applied;
}

}  // namespace framezip::media::worker
