#include "tools/framezip/video_frames.h"

#include <algorithm>

namespace framezip::cli {

StatusOr<engine::Tensor> DecodeVideoFrames(const std::filesystem::path& file, int num_frames,
                                           const media::PreprocessSpec& spec) {
  const std::filesystem::path path = std::filesystem::absolute(file);
  FZ_ASSIGN_OR_RETURN(
      media::DecodedMedia decoded,
      media::DecodeMedia(media::MediaSource::FromFile(path.parent_path(), path.filename().string()),
                         media::FrameSamplingSpec{.num_frames = num_frames}, spec,
                         media::MediaLimits{}));
  const media::FrameBatch& fb = decoded.frames;
  FZ_ASSIGN_OR_RETURN(engine::Tensor t,
                      engine::Tensor::Empty({fb.num_frames, fb.channels, fb.height, fb.width},
                                            engine::DType::kF32));
  std::copy(fb.data.begin(), fb.data.end(), t.data<float>());
  return t;
}

}  // namespace framezip::cli
