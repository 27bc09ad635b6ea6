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
// In two steps, because workers are forked from a zygote (media/worker/zygote.h): the zygote locks
// itself down with everything but the per-request limits and the refusal of new processes, and
// each fork adds those before it reads a request. Filters stack, so a worker is held by both.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "media/worker/wire.h"

namespace framezip::media::worker {

struct SandboxLimits {
  uint64_t memory_bytes = 0;  // 0 = no address-space limit
  uint32_t cpu_seconds = 0;   // 0 = no CPU limit
};

// The zygote's part, from its main thread before any other starts: no core files, few
// descriptors, death with the server, no new privileges, the network namespace (whether one was
// made is returned), and the filter without the process rules (it must fork). An error when a
// required step fails.
StatusOr<bool> ApplyZygoteSandbox();

// A forked worker's part, before it reads a request: death with the zygote, RLIMIT_AS, RLIMIT_CPU
// and the whole filter. Returns what the worker runs under, for its Ready message.
StatusOr<ReadyMessage> ApplyWorkerSandbox(const SandboxLimits& limits, bool network_namespace);

}  // namespace framezip::media::worker
