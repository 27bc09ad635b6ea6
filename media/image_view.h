// A borrowed 8-bit RGB image, rows of `width` * 3 bytes `stride` bytes apart (HWC, R first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace framezip::media {

struct ImageView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  size_t stride = 0;  // bytes between rows, >= width * 3

  const uint8_t* Row(int y) const { return data + stride * static_cast<size_t>(y); }
};

// An owned RGB image with tightly packed rows.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3

  ImageView View() const { return {pixels.data(), width, height, static_cast<size_t>(width) * 3}; }
};

}  // namespace framezip::media
