#include "media/media_backend.h"

namespace framezip::media {
namespace {

class InProcessMediaBackend final : public MediaBackend {
 public:
  StatusOr<MediaInfo> Probe(const MediaSource& source, const MediaLimits& limits,
                            const DecodeOptions& options) override {
    return ProbeMedia(source, limits, options);
  }
  StatusOr<DecodedMedia> Decode(const MediaSource& source, const FrameSamplingSpec& sampling,
                                const PreprocessSpec& preprocess, const MediaLimits& limits,
                                const DecodeOptions& options) override {
    return DecodeMedia(source, sampling, preprocess, limits, options);
  }
  StatusOr<DecodedMedia> Verify(const MediaSource& source, const FrameSamplingSpec& sampling,
                                const MediaLimits& limits, const DecodeOptions& options) override {
    return VerifyMedia(source, sampling, limits, options);
  }
};

}  // namespace

std::unique_ptr<MediaBackend> NewInProcessMediaBackend() {
  return std::make_unique<InProcessMediaBackend>();
}

}  // namespace framezip::media
