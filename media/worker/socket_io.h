// One SOCK_SEQPACKET message with at most one file descriptor attached (SCM_RIGHTS), each way:
// the transport between the server and a media worker. Internal to media/worker.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace framezip::media::worker {

// Sends `bytes` (and `fd` when >= 0) as one message. UNAVAILABLE when the peer is gone.
Status SendMessage(int socket, std::span<const uint8_t> bytes, int fd = -1);

struct ReceivedMessage {
  std::vector<uint8_t> bytes;  // empty: the peer closed the socket
  int fd = -1;                 // owned by the caller
};
// Receives one message of at most `max_bytes`; a longer one (truncated by the kernel) or more
// than one descriptor is an error (and closes what arrived). UNAVAILABLE on a socket error.
StatusOr<ReceivedMessage> ReceiveMessage(int socket, size_t max_bytes);

}  // namespace framezip::media::worker
