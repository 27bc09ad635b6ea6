// Converts decoded AVFrames of any pixel format (yuv420p/422/444 at 8-12 bits, yuvj*, nv12,
// pal8 from GIF, rgb/bgr with alpha, gray...) and any size (odd sizes too) to packed RGB24, using
// the frame's colour matrix and range, then applies the stream's display rotation so frames come
// out upright. Reuses its scaler and buffers across frames. Internal to media/.
//
// The RGB buffer swscale writes into is an AVFrame from av_frame_get_buffer, padded and aligned
// as FFmpeg's own frames are: swscale's SIMD converters store whole vectors past a row's last
// pixel and pick their code path by the destination's alignment, so a tightly packed buffer both
// overflows (heap corruption at some widths) and rounds differently from the ffmpeg tool.
#pragma once

#include "common/status.h"
#include "media/ffmpeg_handles.h"
#include "media/image_view.h"

namespace framezip::media::internal {

class RgbConverter {
 public:
  // `rotation_degrees`: clockwise rotation for display, one of 0, 90, 180, 270.
  explicit RgbConverter(int rotation_degrees) : rotation_(rotation_degrees) {}

  // The view stays valid until the next Convert call or destruction.
  StatusOr<ImageView> Convert(const AVFrame& frame);

 private:
  int rotation_;
  SwsContextPtr sws_;
  AvFramePtr upright_;  // rgb24, FFmpeg's padding and alignment
  RgbImage rotated_;
};

// Clockwise display rotation of a stream from its display matrix, rounded to a multiple of 90.
int StreamRotationDegrees(const AVStream& stream);

}  // namespace framezip::media::internal
