// libFuzzer target over media decoding from bytes: sniffing, the container demuxers we allow,
// every decoder they lead to, frame conversion, seeking/sampling and preprocessing. Built with
// ASan + UBSan by the `fuzz` preset; run as
//   build-fuzz/bin/fuzz_media_decode -max_total_time=600 tests/fuzz/corpus/media/
// Limits are small so each input is cheap and a pathological one ends by the decode-time limit
// (a status, not a hang). Any crash, sanitizer report or timeout is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "media/media.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace framezip::media;
  MediaLimits limits;
  limits.max_bytes = 4 << 20;
  limits.max_width = 1024;
  limits.max_height = 1024;
  limits.max_frames = 8;
  limits.max_decode_s = 2.0;
  limits.decode_threads = 1;  // deterministic, and ASan-friendly
  limits.max_output_bytes = 8 << 20;

  FrameSamplingSpec sampling;
  sampling.num_frames = 4;
  PreprocessSpec spec;
  spec.height = 24;
  spec.width = 24;
  const auto bytes = std::span<const uint8_t>(data, size);

  (void)SniffMedia(bytes);
  (void)ProbeMedia(MediaSource::FromBytes(bytes), limits);
  auto decoded = DecodeMedia(MediaSource::FromBytes(bytes), sampling, spec, limits);
  if (decoded.ok()) {
    // The contract: a batch of exactly the frames planned, every value finite.
    const FrameBatch& f = decoded->frames;
    if (f.data.size() != f.FrameSize() * static_cast<size_t>(f.num_frames) ||
        decoded->timestamps_s.size() != static_cast<size_t>(f.num_frames)) {
      __builtin_trap();
    }
  }
  // Exercise the other sampling mode and resampler on the same input.
  sampling.mode = FrameSamplingSpec::Mode::kFps;
  sampling.fps = 3.0;
  spec.resampler = Resampler::kPil;
  spec.resize = ResizeMode::kShortestEdge;
  spec.shortest_edge = 16;
  spec.crop_height = spec.crop_width = 16;
  (void)DecodeMedia(MediaSource::FromBytes(bytes), sampling, spec, limits);
  return 0;
}
