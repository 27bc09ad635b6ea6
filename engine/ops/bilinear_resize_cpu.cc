#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/half.h"
#include "engine/ops/bilinear_resize_backends.h"

namespace framezip::engine::ops {
namespace {

// One output coordinate's two taps along an axis (PyTorch's compute_source_index_and_lambda).
struct Tap {
  int64_t i0, i1;
  float w0, w1;
};

std::vector<Tap> AxisTaps(int64_t in, int64_t out) {
  // scale = in / out in float (PyTorch's area_pixel_compute_scale when the size is explicit);
  // the source index is computed in float too, so the taps match the reference bit for bit.
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<Tap> taps(static_cast<size_t>(out));
  for (int64_t d = 0; d < out; ++d) {
    const float src = std::max(scale * (static_cast<float>(d) + 0.5f) - 0.5f, 0.0f);
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    const float w1 = std::clamp(src - static_cast<float>(i0), 0.0f, 1.0f);
    taps[d] = {i0, i0 < in - 1 ? i0 + 1 : i0, 1.0f - w1, w1};
  }
  return taps;
}

float Load(const float* p, int64_t i) { return p[i]; }
float Load(const BFloat16* p, int64_t i) { return BF16ToF32(p[i]); }
float Load(const Float16* p, int64_t i) { return F16ToF32(p[i]); }
void Store(float* p, int64_t i, float v) { p[i] = v; }
void Store(BFloat16* p, int64_t i, float v) { p[i] = F32ToBF16(v); }
void Store(Float16* p, int64_t i, float v) { p[i] = F32ToF16(v); }

// Element (n, c, y, x) lives at n * n_stride + c * c_stride + y * y_stride + x * x_stride.
struct Strides {
  int64_t n, c, y, x;
};

Strides StridesOf(int64_t C, int64_t H, int64_t W, ImageLayout layout) {
  if (layout == ImageLayout::kChannelsFirst) return {C * H * W, H * W, W, 1};
  return {H * W * C, 1, W * C, C};
}

template <typename T>
void Resize(const T* in, T* out, int64_t N, int64_t C, int64_t H_in, int64_t W_in, int64_t H_out,
            int64_t W_out, ImageLayout layout) {
  const std::vector<Tap> ty = AxisTaps(H_in, H_out);
  const std::vector<Tap> tx = AxisTaps(W_in, W_out);
  const Strides si = StridesOf(C, H_in, W_in, layout);
  const Strides so = StridesOf(C, H_out, W_out, layout);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t y = 0; y < H_out; ++y) {
      const Tap& a = ty[y];
      for (int64_t x = 0; x < W_out; ++x) {
        const Tap& b = tx[x];
        const int64_t base = n * si.n;
        const int64_t p00 = base + a.i0 * si.y + b.i0 * si.x;
        const int64_t p01 = base + a.i0 * si.y + b.i1 * si.x;
        const int64_t p10 = base + a.i1 * si.y + b.i0 * si.x;
        const int64_t p11 = base + a.i1 * si.y + b.i1 * si.x;
        const int64_t q = n * so.n + y * so.y + x * so.x;
        // Channels are the inner loop: contiguous in the channels-last layout the vision path uses.
        for (int64_t c = 0; c < C; ++c) {
          const int64_t o = c * si.c;
          const float top = b.w0 * Load(in, p00 + o) + b.w1 * Load(in, p01 + o);
          const float bottom = b.w0 * Load(in, p10 + o) + b.w1 * Load(in, p11 + o);
          Store(out, q + c * so.c, a.w0 * top + a.w1 * bottom);
        }
      }
    }
  }
}

}  // namespace

Status BilinearResizeCpu(const Tensor& in, Tensor& out, ImageLayout layout) {
  const bool first = layout == ImageLayout::kChannelsFirst;
  const int64_t N = in.dim(0);
  const int64_t C = in.dim(first ? 1 : 3);
  const int64_t H_in = in.dim(first ? 2 : 1), W_in = in.dim(first ? 3 : 2);
  const int64_t H_out = out.dim(first ? 2 : 1), W_out = out.dim(first ? 3 : 2);
  switch (in.dtype()) {
    case DType::kF32:
      Resize(in.data<float>(), out.data<float>(), N, C, H_in, W_in, H_out, W_out, layout);
      return absl::OkStatus();
    case DType::kBF16:
      Resize(in.data<BFloat16>(), out.data<BFloat16>(), N, C, H_in, W_in, H_out, W_out, layout);
      return absl::OkStatus();
    case DType::kF16:
      Resize(in.data<Float16>(), out.data<Float16>(), N, C, H_in, W_in, H_out, W_out, layout);
      return absl::OkStatus();
    default:
      return InternalError("BilinearResize: dtype {} passed the checks", DTypeName(in.dtype()));
  }
}

}  // namespace framezip::engine::ops
