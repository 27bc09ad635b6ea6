// Locks a media worker process down before it touches untrusted bytes (media/worker/README.md):
//   - resource limits: address space (RLIMIT_AS), CPU time (RLIMIT_CPU: SIGXCPU at the soft
//     limit), no core files, few descriptors;
//   - no new privileges, and death with its parent (PR_SET_PDEATHSIG);
//   - an empty network namespace when the kernel lets an unprivileged process make one;
//   - a seccomp filter (libseccomp) that refuses, with EPERM, everything a decoder never needs
//     and an attacker would: creating sockets or processes, exec, opening or changing files
//     (the media arrives as a descriptor, frames leave in a memfd), ptrace and cross-process
//     memory access, mounts, namespaces, keyrings, BPF, perf, module loading, io_uring.
// Threads stay allowed (FFmpeg's frame threads): clone without CLONE_THREAD is refused, clone3
// answers ENOSYS so the C library falls back to clone.
//
// Call once, early, from the worker's main thread before any other thread starts.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "media/worker/wire.h"

namespace framezip::media::worker {

struct SandboxLimits {
  uint64_t memory_bytes = 0;  // 0 = no address-space limit
  uint32_t cpu_seconds = 0;   // 0 = no CPU limit
};

// What was applied (ReadyMessage). An error only when a required step fails (a limit cannot be
// set, the filter cannot be loaded where libseccomp is present).
StatusOr<ReadyMessage> ApplySandbox(const SandboxLimits& limits);

}  // namespace framezip::media::worker
