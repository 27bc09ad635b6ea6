// The messages between the server and a sandboxed media worker (media/worker/worker_pool.h),
// each one SOCK_SEQPACKET datagram, so message boundaries are the kernel's:
//
//   worker -> server  Ready     once the worker has locked itself down (what it managed to apply)
//   server -> worker  Request   probe / decode / verify; the media comes as a file descriptor
//                               (SCM_RIGHTS), never a path, so the worker opens nothing
//   worker -> server  Response  the status, the media's info, frame times and decode stats; for a
//                               decode, the preprocessed frames in a sealed memfd (SCM_RIGHTS)
//
// and between the server and the zygote that forks the workers (media/worker/zygote.h):
//
//   server -> zygote  Fork      fork a worker whose channel is the attached socket
//   zygote -> server  Forked    its pid (or why no process), its pidfd attached
//   zygote -> server  Exited    a worker the zygote reaped, and its wait status
//
// Encoding: a 4-byte magic, a version, the message kind, then fixed-width little-endian fields
// and length-prefixed strings. The server treats every Response as hostile (the worker has just
// parsed untrusted bytes and may be compromised): DecodeResponse bounds every count, string and
// size and refuses anything inconsistent, and the frame buffer's size must match the frame shape
// it declares. Both ends are the same build, so there is no version negotiation: a mismatch is
// an error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "media/media_types.h"

namespace framezip::media::worker {

inline constexpr uint32_t kWireMagic = 0x574d5a46;  // "FZMW"
inline constexpr uint16_t kWireVersion = 3;
// Largest message either side accepts.
inline constexpr size_t kMaxMessageBytes = 256 * 1024;
inline constexpr size_t kMaxWireString = 4096;
inline constexpr int kMaxWireFrames = 4096;

enum class MessageKind : uint16_t {
  kReady = 1,
  kRequest = 2,
  kResponse = 3,
  kFork = 4,
  kForked = 5,
  kExited = 6,
};

struct ReadyMessage {
  bool seccomp = false;       // the syscall filter is installed
  bool memory_limit = false;  // RLIMIT_AS is set (not under AddressSanitizer)
  bool cpu_limit = false;     // RLIMIT_CPU is set
  bool network_namespace = false;  // an empty network namespace (needs privileges; best effort)
};

enum class WorkOp : uint8_t { kProbe = 1, kDecode = 2, kVerify = 3 };

struct WorkRequest {
  WorkOp op = WorkOp::kProbe;
  FrameSamplingSpec sampling;
  PreprocessSpec preprocess;
  MediaLimits limits;
  bool has_content_hash = false;
  ContentHash content_hash{};
};

struct WorkResponse {
  int32_t code = 0;  // absl::StatusCode
  std::string message;
  DecodedMedia result;  // info, timestamps, targets, stats; frames: shape only, data in the memfd
  bool has_frames = false;
};

std::vector<uint8_t> EncodeReady(const ReadyMessage& ready);
StatusOr<ReadyMessage> DecodeReady(std::span<const uint8_t> bytes);

// The zygote's side of the protocol. The zygote never parses media, so its messages are trusted
// as much as the worker binary is; they are still bounds-checked.
struct ForkedMessage {
  int32_t pid = -1;   // the worker's pid; -1 when fork failed
  int32_t error = 0;  // errno of the failed fork
};
struct ExitedMessage {
  int32_t pid = -1;
  int32_t wait_status = 0;  // as waitpid reports it
};
std::vector<uint8_t> EncodeFork();
Status DecodeFork(std::span<const uint8_t> bytes);
std::vector<uint8_t> EncodeForked(const ForkedMessage& forked);
std::vector<uint8_t> EncodeExited(const ExitedMessage& exited);
// The kind of a zygote's message (kForked or kExited), to pick its decoder; INTERNAL otherwise.
StatusOr<MessageKind> ZygoteMessageKind(std::span<const uint8_t> bytes);
StatusOr<ForkedMessage> DecodeForked(std::span<const uint8_t> bytes);
StatusOr<ExitedMessage> DecodeExited(std::span<const uint8_t> bytes);

std::vector<uint8_t> EncodeRequest(const WorkRequest& request);
// INVALID_ARGUMENT for anything malformed (the worker answers with it).
StatusOr<WorkRequest> DecodeRequest(std::span<const uint8_t> bytes);

// `response.result.frames.data` is not encoded (it travels in the memfd).
std::vector<uint8_t> EncodeResponse(const WorkResponse& response);
// INTERNAL "malformed reply from the media worker: <what>" for anything malformed or out of
// bounds; `limits` are the request's, which every count must respect.
StatusOr<WorkResponse> DecodeResponse(std::span<const uint8_t> bytes, const MediaLimits& limits);

// The status a response carries.
Status ResponseStatus(const WorkResponse& response);

}  // namespace framezip::media::worker
