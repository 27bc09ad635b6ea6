#include "media/frame_convert.h"

#include <cmath>
#include <cstring>

extern "C" {
#include <libavutil/display.h>
#include <libavutil/pixdesc.h>
}

namespace framezip::media::internal {
namespace {

// The yuvj* formats are yuv* with full range; swscale wants the plain format plus a range flag.
AVPixelFormat PlainFormat(AVPixelFormat f, bool* full_range) {
  switch (f) {
    case AV_PIX_FMT_YUVJ420P:
      *full_range = true;
      return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P:
      *full_range = true;
      return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P:
      *full_range = true;
      return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P:
      *full_range = true;
      return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P:
      *full_range = true;
      return AV_PIX_FMT_YUV411P;
    default:
      return f;
  }
}

int SwsColorspace(int space) {
  switch (space) {
    case AVCOL_SPC_BT709:
      return SWS_CS_ITU709;
    case AVCOL_SPC_FCC:
      return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M:
      return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL:
      return SWS_CS_BT2020;
    default:
      return SWS_CS_DEFAULT;  // BT.601, also what players assume when unspecified
  }
}

}  // namespace

int StreamRotationDegrees(const AVStream& stream) {
  const uint8_t* matrix = av_stream_get_side_data(&stream, AV_PKT_DATA_DISPLAYMATRIX, nullptr);
  if (matrix == nullptr) return 0;
  const double ccw = av_display_rotation_get(reinterpret_cast<const int32_t*>(matrix));
  if (std::isnan(ccw)) return 0;
  // av_display_rotation_get is counter-clockwise; players rotate clockwise by its negation.
  int cw = static_cast<int>(std::lround(-ccw / 90.0)) * 90;
  cw %= 360;
  if (cw < 0) cw += 360;
  return cw;
}

StatusOr<ImageView> RgbConverter::Convert(const AVFrame& frame) {
  const int w = frame.width, h = frame.height;
  if (w <= 0 || h <= 0) return InvalidArgumentError("decoded frame has no size ({}x{})", w, h);
  // Read the colour enums as plain ints: FFmpeg copies them from the bitstream, so a hostile
  // file can hold values outside the enums (loading such an enum is undefined behaviour).
  int color_range = 0;
  int color_space = 0;
  static_assert(sizeof(frame.color_range) == sizeof(int) &&
                sizeof(frame.colorspace) == sizeof(int));
  std::memcpy(&color_range, &frame.color_range, sizeof(int));
  std::memcpy(&color_space, &frame.colorspace, sizeof(int));
  bool full_range = color_range == AVCOL_RANGE_JPEG;
  const AVPixelFormat src_format =
      PlainFormat(static_cast<AVPixelFormat>(frame.format), &full_range);
  if (sws_isSupportedInput(src_format) == 0) {
    const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame.format));
    return InvalidArgumentError("unsupported pixel format '{}'", name ? name : "unknown");
  }
  // Same size in and out: the flags only choose chroma upsampling and rounding. swscale's
  // defaults (no full-chroma interpolation), as the ffmpeg tool and PyAV use, so frames match
  // what the Python stacks that models were trained with decode.
  SwsContext* ctx = sws_getCachedContext(sws_.release(), w, h, src_format, w, h, AV_PIX_FMT_RGB24,
                                         SWS_BICUBIC, nullptr, nullptr, nullptr);
  sws_.reset(ctx);
  if (ctx == nullptr) return InternalError("cannot create a pixel converter for {}x{}", w, h);
  const int* coefficients = sws_getCoefficients(SwsColorspace(color_space));
  sws_setColorspaceDetails(ctx, coefficients, full_range ? 1 : 0,
                           sws_getCoefficients(SWS_CS_DEFAULT), /*dst_range=*/1, 0, 1 << 16,
                           1 << 16);

  if (!upright_ || upright_->width != w || upright_->height != h) {
    upright_.reset(av_frame_alloc());
    if (!upright_) return ResourceExhaustedError("out of memory converting a {}x{} frame", w, h);
    upright_->format = AV_PIX_FMT_RGB24;
    upright_->width = w;
    upright_->height = h;
    // align 0: the CPU's widest vector alignment, what the ffmpeg tool's frames get.
    if (av_frame_get_buffer(upright_.get(), 0) < 0) {
      upright_.reset();
      return ResourceExhaustedError("out of memory converting a {}x{} frame", w, h);
    }
  }
  const int rows = sws_scale(ctx, frame.data, frame.linesize, 0, h, upright_->data,
                             upright_->linesize);
  if (rows != h) return InvalidArgumentError("pixel conversion failed for a {}x{} frame", w, h);
  const ImageView upright{upright_->data[0], w, h, static_cast<size_t>(upright_->linesize[0])};
  if (rotation_ == 0) return upright;

  const bool swap = rotation_ == 90 || rotation_ == 270;
  rotated_.width = swap ? h : w;
  rotated_.height = swap ? w : h;
  rotated_.pixels.resize(static_cast<size_t>(w) * h * 3);
  const int ow = rotated_.width;
  for (int y = 0; y < h; ++y) {
    const uint8_t* src = upright.Row(y);
    for (int x = 0; x < w; ++x) {
      int ox = x, oy = y;
      if (rotation_ == 90) {  // clockwise: top row becomes the right column
        ox = h - 1 - y;
        oy = x;
      } else if (rotation_ == 180) {
        ox = w - 1 - x;
        oy = h - 1 - y;
      } else {  // 270
        ox = y;
        oy = w - 1 - x;
      }
      uint8_t* d = &rotated_.pixels[(static_cast<size_t>(oy) * ow + ox) * 3];
      d[0] = src[x * 3];
      d[1] = src[x * 3 + 1];
      d[2] = src[x * 3 + 2];
    }
  }
  return rotated_.View();
}

}  // namespace framezip::media::internal
