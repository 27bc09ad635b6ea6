// libFuzzer target over the server's parsing of what a media worker sends back
// (media/worker/wire.h: DecodeResponse, DecodeReady), and of requests (DecodeRequest): a worker
// that has just parsed a hostile file may be compromised, so its replies are untrusted input.
// A reply that parses must respect the request's limits and encode back to a reply that parses
// the same. Run:
//   build-fuzz/bin/fuzz_media_worker_reply -max_total_time=600 tests/fuzz/corpus/media_worker_reply/
#include <cstddef>
#include <cstdint>
#include <span>

#include "media/worker/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace framezip::media;
  using namespace framezip::media::worker;
  const std::span<const uint8_t> bytes(data, size);
  (void)DecodeReady(bytes);
  (void)DecodeRequest(bytes);
  MediaLimits limits;
  limits.max_frames = 16;
  limits.max_output_bytes = 64 << 20;
  auto reply = DecodeResponse(bytes, limits);
  if (!reply.ok()) return 0;
  if (reply->result.timestamps_s.size() > 16) __builtin_trap();
  if (reply->has_frames && reply->result.frames.num_frames > 16) __builtin_trap();
  auto again = DecodeResponse(EncodeResponse(*reply), limits);
  if (!again.ok() || again->code != reply->code || again->message != reply->message ||
      again->result.timestamps_s != reply->result.timestamps_s) {
    __builtin_trap();
  }
  return 0;
}
