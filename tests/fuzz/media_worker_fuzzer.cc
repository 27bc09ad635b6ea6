// libFuzzer target over the media path exactly as a sandboxed media worker runs it
// (media/worker/handle_request.h): the fuzzed bytes are the media, handed over as a memfd as the
// server hands them to a worker; the operation (probe, verify, decode) is chosen by the input's
// length, so the bytes stay a file as uploaded. The worker's reply is encoded and parsed back the
// way the server parses it, which must accept every reply a worker builds. Run:
//   build-fuzz/bin/fuzz_media_worker -max_total_time=3600 tests/fuzz/corpus/media/
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "media/worker/handle_request.h"
#include "media/worker/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace framezip::media;
  using namespace framezip::media::worker;
  static const int fd = memfd_create("fuzz-media", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 0) != 0) __builtin_trap();
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) __builtin_trap();
    done += static_cast<size_t>(n);
  }
  WorkRequest request;
  request.op = static_cast<WorkOp>(1 + size % 3);
  request.limits.max_bytes = 4 << 20;
  request.limits.max_width = 1024;
  request.limits.max_height = 1024;
  request.limits.max_frames = 8;
  request.limits.max_decode_s = 2.0;
  request.limits.decode_threads = 1;
  request.limits.max_output_bytes = 8 << 20;
  request.sampling.num_frames = 3;
  request.preprocess.height = 24;
  request.preprocess.width = 24;
  // What the server sends goes through the wire too.
  auto decoded_request = DecodeRequest(EncodeRequest(request));
  if (!decoded_request.ok()) __builtin_trap();

  FrameData frames;
  const WorkResponse response = HandleRequest(*decoded_request, fd, &frames);
  auto parsed = DecodeResponse(EncodeResponse(response), request.limits);
  if (!parsed.ok()) __builtin_trap();  // the server must accept what an honest worker sends
  if (response.has_frames) {
    const FrameBatch& f = response.result.frames;
    if (frames.size() != f.FrameSize() * static_cast<size_t>(f.num_frames)) __builtin_trap();
  }
  return 0;
}
