#include "media/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace framezip::media {
namespace {

double CubicFilter(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

double TriangleFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Per output index: the first input index and the normalized weights of its taps.
struct Taps {
  int out_size = 0;
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<double> weights;  // out_size * ksize
};

// Pillow's precompute_coeffs, which torch's antialiased kernels also follow (same center,
// support, bounds and normalization).
Taps ComputeTaps(int in_size, int out_size, Interpolation interpolation) {
  const double filter_support = interpolation == Interpolation::kBicubic ? 2.0 : 1.0;
  const auto filter = interpolation == Interpolation::kBicubic ? CubicFilter : TriangleFilter;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support * filterscale;
  Taps t;
  t.out_size = out_size;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size) * t.ksize, 0.0);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    xmax = std::min(xmax, t.ksize);
    double* k = &t.weights[static_cast<size_t>(xx) * t.ksize];
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = filter((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    if (ww != 0.0) {
      for (int x = 0; x < xmax; ++x) k[x] /= ww;
    }
    t.first[xx] = xmin;
    t.count[xx] = std::max(xmax, 0);
  }
  return t;
}

// ---- Fixed point with a uint8 image between the passes ----
//
// Pillow uses 22 fractional bits for every pass. torch's native uint8 kernel (what torchvision
// runs for uint8 images on CPU) stores weights as int16 and picks, per pass, the largest
// precision (< 22 bits) at which twice the largest weight still fits in 15 bits. Everything
// else (taps, bounds, rounding, clipping, pass order) is the same.

constexpr int kPilPrecisionBits = 32 - 8 - 2;

int TorchPrecisionBits(const Taps& t) {
  double max_weight = 0.0;
  for (const double w : t.weights) max_weight = std::max(max_weight, w);
  int bits = 0;
  for (bits = 0; bits < 22; ++bits) {
    const int next = static_cast<int>(0.5 + max_weight * (1 << (bits + 1)));
    if (next >= (1 << 15)) break;
  }
  return bits;
}

std::vector<int32_t> FixedPoint(const Taps& t, int bits) {
  std::vector<int32_t> k(t.weights.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const double w = t.weights[i] * (1 << bits);
    k[i] = static_cast<int32_t>(w < 0 ? w - 0.5 : w + 0.5);
  }
  return k;
}

uint8_t Clip8(int64_t v, int bits) {
  v >>= bits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

RgbImage FixedPointResample(const ImageView& in, int out_w, int out_h, Interpolation interpolation,
                            Resampler resampler) {
  RgbImage cur;
  ImageView src = in;
  if (out_w != in.width) {
    const Taps t = ComputeTaps(in.width, out_w, interpolation);
    const int bits = resampler == Resampler::kPil ? kPilPrecisionBits : TorchPrecisionBits(t);
    const std::vector<int32_t> k = FixedPoint(t, bits);
    cur.width = out_w;
    cur.height = in.height;
    cur.pixels.resize(static_cast<size_t>(out_w) * in.height * 3);
    for (int y = 0; y < in.height; ++y) {
      const uint8_t* row = in.Row(y);
      uint8_t* out = &cur.pixels[static_cast<size_t>(y) * out_w * 3];
      for (int xx = 0; xx < out_w; ++xx) {
        const int32_t* kk = &k[static_cast<size_t>(xx) * t.ksize];
        const int xmin = t.first[xx];
        int64_t s0 = int64_t{1} << (bits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < t.count[xx]; ++x) {
          const uint8_t* p = row + (xmin + x) * 3;
          s0 += int64_t{p[0]} * kk[x];
          s1 += int64_t{p[1]} * kk[x];
          s2 += int64_t{p[2]} * kk[x];
        }
        out[xx * 3 + 0] = Clip8(s0, bits);
        out[xx * 3 + 1] = Clip8(s1, bits);
        out[xx * 3 + 2] = Clip8(s2, bits);
      }
    }
    src = cur.View();
  }
  if (out_h != in.height) {
    const Taps t = ComputeTaps(in.height, out_h, interpolation);
    const int bits = resampler == Resampler::kPil ? kPilPrecisionBits : TorchPrecisionBits(t);
    const std::vector<int32_t> k = FixedPoint(t, bits);
    RgbImage out;
    out.width = src.width;
    out.height = out_h;
    out.pixels.resize(static_cast<size_t>(src.width) * out_h * 3);
    const int row_values = src.width * 3;
    for (int yy = 0; yy < out_h; ++yy) {
      const int32_t* kk = &k[static_cast<size_t>(yy) * t.ksize];
      const int ymin = t.first[yy];
      uint8_t* dst = &out.pixels[static_cast<size_t>(yy) * row_values];
      for (int v = 0; v < row_values; ++v) {
        int64_t s = int64_t{1} << (bits - 1);
        for (int y = 0; y < t.count[yy]; ++y) s += int64_t{src.Row(ymin + y)[v]} * kk[y];
        dst[v] = Clip8(s, bits);
      }
    }
    return out;
  }
  if (out_w != in.width) return cur;
  RgbImage copy;
  copy.width = in.width;  // same size: both libraries return the input unchanged
  copy.height = in.height;
  copy.pixels.resize(static_cast<size_t>(in.width) * in.height * 3);
  for (int y = 0; y < in.height; ++y) {
    std::memcpy(&copy.pixels[static_cast<size_t>(y) * in.width * 3], in.Row(y),
                static_cast<size_t>(in.width) * 3);
  }
  return copy;
}

// ---- torch float path (GPU tensors, float inputs): float accumulation, one rounding ----

RgbImage FloatResample(const ImageView& in, int out_w, int out_h, Interpolation interpolation) {
  // Horizontal pass into floats.
  const int mid_w = out_w;
  std::vector<float> mid(static_cast<size_t>(mid_w) * in.height * 3);
  const Taps th = ComputeTaps(in.width, out_w, interpolation);
  std::vector<float> kh(th.weights.begin(), th.weights.end());
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* row = in.Row(y);
    float* out = &mid[static_cast<size_t>(y) * mid_w * 3];
    for (int xx = 0; xx < out_w; ++xx) {
      const float* kk = &kh[static_cast<size_t>(xx) * th.ksize];
      const int xmin = th.first[xx];
      float s0 = 0, s1 = 0, s2 = 0;
      for (int x = 0; x < th.count[xx]; ++x) {
        const uint8_t* p = row + (xmin + x) * 3;
        s0 += p[0] * kk[x];
        s1 += p[1] * kk[x];
        s2 += p[2] * kk[x];
      }
      out[xx * 3 + 0] = s0;
      out[xx * 3 + 1] = s1;
      out[xx * 3 + 2] = s2;
    }
  }
  // Vertical pass, then clamp and round half to even (std::nearbyint in the default mode).
  const Taps tv = ComputeTaps(in.height, out_h, interpolation);
  std::vector<float> kv(tv.weights.begin(), tv.weights.end());
  RgbImage out;
  out.width = out_w;
  out.height = out_h;
  out.pixels.resize(static_cast<size_t>(out_w) * out_h * 3);
  const int row_values = out_w * 3;
  std::vector<float> acc(row_values);
  for (int yy = 0; yy < out_h; ++yy) {
    const float* kk = &kv[static_cast<size_t>(yy) * tv.ksize];
    const int ymin = tv.first[yy];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int y = 0; y < tv.count[yy]; ++y) {
      const float* src = &mid[static_cast<size_t>(ymin + y) * row_values];
      const float w = kk[y];
      for (int v = 0; v < row_values; ++v) acc[v] += src[v] * w;
    }
    uint8_t* dst = &out.pixels[static_cast<size_t>(yy) * row_values];
    for (int v = 0; v < row_values; ++v) {
      dst[v] = static_cast<uint8_t>(std::nearbyint(std::clamp(acc[v], 0.0f, 255.0f)));
    }
  }
  return out;
}

RgbImage Nearest(const ImageView& in, int out_w, int out_h, Resampler resampler) {
  // torch 'nearest': src = floor(dst * in / out); Pillow: floor((dst + 0.5) * in / out).
  const double offset = resampler == Resampler::kPil ? 0.5 : 0.0;
  auto map = [offset](int o, int in_size, int out_size) {
    const int i = static_cast<int>(std::floor((o + offset) * in_size / out_size));
    return std::clamp(i, 0, in_size - 1);
  };
  RgbImage out;
  out.width = out_w;
  out.height = out_h;
  out.pixels.resize(static_cast<size_t>(out_w) * out_h * 3);
  for (int y = 0; y < out_h; ++y) {
    const uint8_t* row = in.Row(map(y, in.height, out_h));
    uint8_t* dst = &out.pixels[static_cast<size_t>(y) * out_w * 3];
    for (int x = 0; x < out_w; ++x) std::memcpy(dst + x * 3, row + map(x, in.width, out_w) * 3, 3);
  }
  return out;
}

}  // namespace

RgbImage ResizeRgb(const ImageView& in, int out_width, int out_height, Interpolation interpolation,
                   Resampler resampler) {
  if (interpolation == Interpolation::kNearest)
    return Nearest(in, out_width, out_height, resampler);
  if (resampler == Resampler::kTorchvisionFloat) {
    return FloatResample(in, out_width, out_height, interpolation);
  }
  return FixedPointResample(in, out_width, out_height, interpolation, resampler);
}

}  // namespace framezip::media
