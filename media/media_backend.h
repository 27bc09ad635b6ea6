// MediaBackend: where media decoding runs. The media stage's three entry points (media.h) behind
// one interface, so a caller decides once whether untrusted bytes are decoded in its own process
// (InProcessMediaBackend: the CLI, tests) or in sandboxed worker processes that a decoder crash,
// hang or memory blow-up cannot take down (media/worker/worker_pool.h: the server).
//
// Implementations are thread-safe; errors are those of media.h, plus the worker pool's own
// (media/worker/worker_pool.h).
#pragma once

#include <memory>

#include "media/media.h"

namespace framezip::media {

class MediaBackend {
 public:
  virtual ~MediaBackend() = default;
  virtual StatusOr<MediaInfo> Probe(const MediaSource& source, const MediaLimits& limits,
                                    const DecodeOptions& options = {}) = 0;
  virtual StatusOr<DecodedMedia> Decode(const MediaSource& source,
                                        const FrameSamplingSpec& sampling,
                                        const PreprocessSpec& preprocess,
                                        const MediaLimits& limits,
                                        const DecodeOptions& options = {}) = 0;
  virtual StatusOr<DecodedMedia> Verify(const MediaSource& source,
                                        const FrameSamplingSpec& sampling,
                                        const MediaLimits& limits,
                                        const DecodeOptions& options = {}) = 0;
};

// Calls ProbeMedia / DecodeMedia / VerifyMedia in the calling process.
std::unique_ptr<MediaBackend> NewInProcessMediaBackend();

}  // namespace framezip::media
