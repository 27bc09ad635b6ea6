#include "tools/framezip/video_frames.h"

#include <algorithm>

namespace framezip::cli {
namespace {

StatusOr<media::DecodedMedia> DecodeFile(const std::filesystem::path& file, int num_frames,
                                         const media::PreprocessSpec& spec) {
  const std::filesystem::path path = std::filesystem::absolute(file);
  return media::DecodeMedia(
      media::MediaSource::FromFile(path.parent_path(), path.filename().string()),
      media::FrameSamplingSpec{.num_frames = num_frames}, spec, media::MediaLimits{});
}

StatusOr<engine::Tensor> FramesTensor(const media::FrameBatch& fb) {
  FZ_ASSIGN_OR_RETURN(engine::Tensor t,
                      engine::Tensor::Empty({fb.num_frames, fb.channels, fb.height, fb.width},
                                            engine::DType::kF32));
  std::copy(fb.data.begin(), fb.data.end(), t.data<float>());
  return t;
}

}  // namespace

StatusOr<engine::Tensor> DecodeVideoFrames(const std::filesystem::path& file, int num_frames,
                                           const media::PreprocessSpec& spec) {
  FZ_ASSIGN_OR_RETURN(const media::DecodedMedia decoded, DecodeFile(file, num_frames, spec));
  return FramesTensor(decoded.frames);
}

StatusOr<engine::runtime::VisualInput> DecodeImageInput(const std::filesystem::path& file,
                                                        const media::PreprocessSpec& spec) {
  FZ_ASSIGN_OR_RETURN(const media::DecodedMedia decoded, DecodeFile(file, 1, spec));
  if (decoded.info.kind != media::MediaKind::kImage) {
    return InvalidArgumentError("'{}' is a video ({}), not a still image: pass it with --video",
                                file.string(), decoded.info.codec);
  }
  engine::runtime::VisualInput input;
  input.kind = engine::runtime::VisualInput::Kind::kImage;
  FZ_ASSIGN_OR_RETURN(input.pixels, FramesTensor(decoded.frames));
  if (!spec.anyres_pinpoints.empty()) {
    input.original_height = decoded.info.height;
    input.original_width = decoded.info.width;
  }
  return input;
}

}  // namespace framezip::cli
