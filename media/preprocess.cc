#include "media/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "media/resample.h"

namespace framezip::media {
namespace {

constexpr int kMaxSide = 16384;

// transformers' get_resize_output_image_size(size=int, default_to_square=False); (width, height).
std::pair<int, int> ShortestEdgeSize(int shortest_edge, int width, int height) {
  const bool width_short = width <= height;
  const int short_side = width_short ? width : height;
  const int long_side = width_short ? height : width;
  const int new_long =
      static_cast<int>(static_cast<int64_t>(shortest_edge) * long_side / std::max(short_side, 1));
  return width_short ? std::pair{shortest_edge, new_long} : std::pair{new_long, shortest_edge};
}

RgbImage PadToSquare(const ImageView& in, const std::array<uint8_t, 3>& rgb) {
  const int side = std::max(in.width, in.height);
  RgbImage out;
  out.width = side;
  out.height = side;
  out.pixels.resize(static_cast<size_t>(side) * side * 3);
  for (size_t i = 0; i < out.pixels.size(); i += 3) std::memcpy(&out.pixels[i], rgb.data(), 3);
  const int x0 = (side - in.width) / 2;
  const int y0 = (side - in.height) / 2;
  for (int y = 0; y < in.height; ++y) {
    std::memcpy(&out.pixels[(static_cast<size_t>(y0 + y) * side + x0) * 3], in.Row(y),
                static_cast<size_t>(in.width) * 3);
  }
  return out;
}

}  // namespace

Status ValidatePreprocessSpec(const PreprocessSpec& spec) {
  auto check_side = [](const char* name, int v) -> Status {
    if (v < 1 || v > kMaxSide) {
      return InvalidArgumentError("preprocess {} = {} is out of range [1, {}]", name, v, kMaxSide);
    }
    return absl::OkStatus();
  };
  switch (spec.resize) {
    case ResizeMode::kNone:
      break;
    case ResizeMode::kExact:
      FZ_RETURN_IF_ERROR(check_side("height", spec.height));
      FZ_RETURN_IF_ERROR(check_side("width", spec.width));
      break;
    case ResizeMode::kShortestEdge:
      FZ_RETURN_IF_ERROR(check_side("shortest_edge", spec.shortest_edge));
      break;
  }
  if (spec.crop_height != 0 || spec.crop_width != 0) {
    FZ_RETURN_IF_ERROR(check_side("crop_height", spec.crop_height));
    FZ_RETURN_IF_ERROR(check_side("crop_width", spec.crop_width));
  }
  if (!spec.anyres_pinpoints.empty()) {
    if (spec.resize != ResizeMode::kExact || spec.height != spec.width || spec.pad_to_square ||
        spec.crop_height != 0 || spec.crop_width != 0) {
      return InvalidArgumentError(
          "preprocess anyres_pinpoints need an exact square resize (height = width, the tile "
          "side) without pad_to_square or crop");
    }
    if (spec.anyres_pinpoints.size() > kMaxAnyresPinpoints) {
      return InvalidArgumentError("preprocess anyres_pinpoints has {} entries; the limit is {}",
                                  spec.anyres_pinpoints.size(), kMaxAnyresPinpoints);
    }
    for (const auto& [h, w] : spec.anyres_pinpoints) {
      if (h < 1 || w < 1 || h > kMaxSide || w > kMaxSide || h % spec.height != 0 ||
          w % spec.height != 0) {
        return InvalidArgumentError(
            "preprocess anyres_pinpoints entry [{}, {}] is not a multiple of the tile side {} in "
            "[1, {}]",
            h, w, spec.height, kMaxSide);
      }
    }
  }
  if (!std::isfinite(spec.rescale_factor)) {
    return InvalidArgumentError("preprocess rescale_factor is not finite");
  }
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(spec.mean[c]) || !std::isfinite(spec.std[c]) || spec.std[c] == 0.0f) {
      return InvalidArgumentError(
          "preprocess mean/std[{}] = {}/{} is invalid (std must be non-zero)", c, spec.mean[c],
          spec.std[c]);
    }
  }
  return absl::OkStatus();
}

std::pair<int, int> PreprocessedSize(const PreprocessSpec& spec, int width, int height) {
  if (spec.pad_to_square) width = height = std::max(width, height);
  int h = height, w = width;
  switch (spec.resize) {
    case ResizeMode::kNone:
      break;
    case ResizeMode::kExact:
      h = spec.height;
      w = spec.width;
      break;
    case ResizeMode::kShortestEdge: {
      const auto [rw, rh] = ShortestEdgeSize(spec.shortest_edge, width, height);
      w = std::max(rw, 1);
      h = std::max(rh, 1);
      break;
    }
  }
  if (spec.crop_height > 0 && spec.crop_width > 0) return {spec.crop_height, spec.crop_width};
  return {h, w};
}

void PreprocessImage(const ImageView& rgb, const PreprocessSpec& spec, int out_height,
                     int out_width, float* out) {
  RgbImage padded;
  ImageView src = rgb;
  if (spec.pad_to_square && rgb.width != rgb.height) {
    padded = PadToSquare(rgb, spec.pad_rgb);
    src = padded.View();
  }

  // Size after resizing, before cropping.
  int rh = src.height, rw = src.width;
  const bool cropping = spec.crop_height > 0 && spec.crop_width > 0;
  const auto natural = PreprocessedSize(spec, rgb.width, rgb.height);
  if (natural.first != out_height || natural.second != out_width) {
    rh = out_height;  // mid-stream size change: squash to the batch's size, no crop
    rw = out_width;
  } else if (spec.resize == ResizeMode::kExact) {
    rh = spec.height;
    rw = spec.width;
  } else if (spec.resize == ResizeMode::kShortestEdge) {
    const auto [w, h] = ShortestEdgeSize(spec.shortest_edge, src.width, src.height);
    rw = std::max(w, 1);
    rh = std::max(h, 1);
  }
  RgbImage resized;
  if (rh != src.height || rw != src.width) {
    resized = ResizeRgb(src, rw, rh, spec.interpolation, spec.resampler);
    src = resized.View();
  }

  // Center crop (floor offsets, as transformers' center_crop); a crop larger than the image pads
  // with zeros around it, which the offsets below express as negative starts.
  int top = 0, left = 0;
  if (cropping && (natural.first == out_height && natural.second == out_width)) {
    top = (src.height - out_height) / 2;
    left = (src.width - out_width) / 2;
    if (src.height < out_height) top = -((out_height - src.height) / 2);
    if (src.width < out_width) left = -((out_width - src.width) / 2);
  }

  const size_t plane = static_cast<size_t>(out_height) * out_width;
  const float rescale = static_cast<float>(spec.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    const int src_c = spec.channel_order == ChannelOrder::kRgb ? c : 2 - c;
    const float mean = spec.mean[src_c];
    const float inv_std = 1.0f / spec.std[src_c];
    float* dst = out + plane * c;
    for (int y = 0; y < out_height; ++y) {
      const int sy = y + top;
      for (int x = 0; x < out_width; ++x) {
        const int sx = x + left;
        uint8_t v = 0;
        if (sy >= 0 && sy < src.height && sx >= 0 && sx < src.width)
          v = src.Row(sy)[sx * 3 + src_c];
        dst[static_cast<size_t>(y) * out_width + x] = (v * rescale - mean) * inv_std;
      }
    }
  }
}

}  // namespace framezip::media
