// BilinearResize on every device present (tests/unit/engine/ops/device_cases.h) against an f64
// transcription of PyTorch's align_corners=False rule, on fresh random inputs, for the sizes
// LLaVA-OneVision uses (27 -> 14), framezip-tiny-video's (4 -> 2) and odd/even up/down scales, in
// both layouts and every float dtype. Every device computes the same taps and the same
// uncontracted multiply-adds in f32, so a GPU's result must also equal the CPU's bit for bit.
#include "engine/ops/bilinear_resize.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "engine/core/half.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

using ops::ImageLayout;

// PyTorch upsample_bilinear2d (align_corners=False, explicit size), channels-first, in f64.
std::vector<double> ReferenceNchw(const std::vector<float>& x, int64_t N, int64_t C, int64_t H,
                                  int64_t W, int64_t Ho, int64_t Wo) {
  // The source coordinate is float arithmetic in PyTorch (scale = float(in) / out), and that is
  // part of the rule: near 27 one float ulp is 2e-6, which would move the result by up to ~1e-5
  // for N(0,1) inputs. So the taps follow the float rule; the blend is done in f64.
  auto taps = [](int64_t in, int64_t out, int64_t d, int64_t& i0, int64_t& i1, double& w1) {
    const float scale = static_cast<float>(in) / static_cast<float>(out);
    const double src = std::max(scale * (static_cast<float>(d) + 0.5f) - 0.5f, 0.0f);
    i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    i1 = i0 < in - 1 ? i0 + 1 : i0;
    w1 = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
  };
  std::vector<double> y(static_cast<size_t>(N * C * Ho * Wo));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const float* p = x.data() + (n * C + c) * H * W;
      for (int64_t oy = 0; oy < Ho; ++oy) {
        int64_t y0, y1;
        double wy;
        taps(H, Ho, oy, y0, y1, wy);
        for (int64_t ox = 0; ox < Wo; ++ox) {
          int64_t x0, x1;
          double wx;
          taps(W, Wo, ox, x0, x1, wx);
          y[((n * C + c) * Ho + oy) * Wo + ox] =
              (1 - wy) * ((1 - wx) * p[y0 * W + x0] + wx * p[y0 * W + x1]) +
              wy * ((1 - wx) * p[y1 * W + x0] + wx * p[y1 * W + x1]);
        }
      }
    }
  }
  return y;
}

Tensor FromVector(const std::vector<float>& v, Shape shape) {
  auto t = Tensor::Empty(std::move(shape), DType::kF32);
  FZ_CHECK(t.ok());
  std::copy(v.begin(), v.end(), t->data<float>());
  return *t;
}

// NCHW -> NHWC permutation of a host vector.
std::vector<float> ToNhwc(const std::vector<float>& x, int64_t N, int64_t C, int64_t H, int64_t W) {
  std::vector<float> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) y[(n * H * W + i) * C + c] = x[(n * C + c) * H * W + i];
  return y;
}
std::vector<double> ToNhwc(const std::vector<double>& x, int64_t N, int64_t C, int64_t H,
                           int64_t W) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) y[(n * H * W + i) * C + c] = x[(n * C + c) * H * W + i];
  return y;
}

TEST_CASE("BilinearResize matches the f64 align_corners=False rule on every device",
          "[unit][engine][ops][devices]") {
  struct Case {
    int64_t N, C, H, W, Ho, Wo;
  };
  // 27 -> 14 is the video pooling, 4 -> 2 framezip-tiny-video's; the rest cover odd/even halving
  // with ceil, non-square, the anyres shrink (arbitrary ratio), identity, 1-pixel edges and
  // upscaling on one or both axes.
  const Case cases[] = {{2, 5, 27, 27, 14, 14}, {1, 3, 13, 9, 7, 5}, {3, 2, 8, 6, 4, 3},
                        {1, 4, 71, 81, 63, 72}, {1, 2, 5, 5, 5, 5},  {2, 3, 1, 7, 1, 4},
                        {1, 2, 3, 4, 7, 9},     {1, 1, 2, 2, 1, 1},  {3, 5, 4, 4, 2, 2},
                        {3, 5, 5, 7, 9, 3}};
  std::mt19937_64 rng(testing::TestSeed());
  for (const Case& k : cases) {
    const auto x = testing::RandomNormal(static_cast<size_t>(k.N * k.C * k.H * k.W), rng);
    const auto want = ReferenceNchw(x, k.N, k.C, k.H, k.W, k.Ho, k.Wo);
    INFO("case N=" << k.N << " C=" << k.C << " " << k.H << "x" << k.W << " -> " << k.Ho << "x"
                   << k.Wo);
    for (const ImageLayout layout : {ImageLayout::kChannelsFirst, ImageLayout::kChannelsLast}) {
      const bool first = layout == ImageLayout::kChannelsFirst;
      INFO((first ? "NCHW" : "NHWC"));
      const Tensor in = first ? FromVector(x, {k.N, k.C, k.H, k.W})
                              : FromVector(ToNhwc(x, k.N, k.C, k.H, k.W), {k.N, k.H, k.W, k.C});
      const Shape out_shape = first ? Shape{k.N, k.C, k.Ho, k.Wo} : Shape{k.N, k.Ho, k.Wo, k.C};
      Tensor on_cpu;
      ForEachDevice([&](const Device& device) {
        Tensor out = PoisonedOn(out_shape, device);
        REQUIRE(ops::BilinearResize(On(in, device), out, layout).ok());
        CheckCloseTo(out, first ? want : ToNhwc(want, k.N, k.C, k.Ho, k.Wo), {1e-6, 1e-6});
        if (device.is_cpu()) {
          on_cpu = out;
        } else {
          const std::vector<float> cpu_values = testing::ToFloatVector(on_cpu);
          CheckCloseTo(out, std::vector<double>(cpu_values.begin(), cpu_values.end()), {0.0, 0.0});
        }
      });
    }
  }
}

TEST_CASE("BilinearResize 27->14 uses PyTorch's taps", "[unit][engine][ops]") {
  // A ramp along W makes each output column equal to its source coordinate w0*i0 + w1*i1; the
  // expected values are the table of docs/models.md §1.8.
  std::vector<float> ramp(27 * 27);
  for (int r = 0; r < 27; ++r)
    for (int c = 0; c < 27; ++c) ramp[r * 27 + c] = static_cast<float>(c);
  Tensor in = FromVector(ramp, {1, 1, 27, 27});
  auto out = Tensor::Empty({1, 1, 14, 14}, DType::kF32);
  REQUIRE(out.ok());
  REQUIRE(ops::BilinearResize(in, *out, ImageLayout::kChannelsFirst).ok());
  const double src[14] = {0.4642857, 2.3928571, 4.3214288, 6.25,  8.1785717, 10.107143, 12.035714,
                          13.964286, 15.892857, 17.821428, 19.75, 21.678572, 23.607143, 25.535715};
  for (int c = 0; c < 14; ++c) CHECK(out->data<float>()[5 * 14 + c] == Approx(src[c]).margin(2e-6));
}

TEST_CASE("BilinearResize on 16-bit images is within their rounding of f64 on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed() + 1);
  const int64_t N = 2, H = 27, W = 27, C = 8;
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    INFO(DTypeName(dtype));
    const auto in = MakeRandom({N, H, W, C}, dtype, rng);  // NHWC, as the pooling reads it
    std::vector<float> nchw(in.values.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < H * W; ++i)
          nchw[(n * C + c) * H * W + i] = static_cast<float>(in.values[(n * H * W + i) * C + c]);
    const auto want = ToNhwc(ReferenceNchw(nchw, N, C, H, W, 14, 14), N, C, 14, 14);
    // One rounding of the f32 result: half an ulp, 2^-8 (bf16) or 2^-11 (f16) relative.
    const double rel = dtype == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
    ForEachDevice([&](const Device& device) {
      Tensor out = PoisonedOn({N, 14, 14, C}, device, dtype);
      REQUIRE(ops::BilinearResize(On(in.tensor, device), out, ImageLayout::kChannelsLast).ok());
      CheckCloseTo(out, want, {1e-6, rel});
    });
  }
}

TEST_CASE("BilinearResize rejects bad shapes, dtypes and sizes on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    const Tensor a = PoisonedOn({1, 3, 4, 4}, device);
    Tensor other_channels = PoisonedOn({1, 2, 2, 2}, device);
    Tensor other_dtype = PoisonedOn({1, 3, 2, 2}, device, DType::kBF16);
    Tensor empty = PoisonedOn({1, 3, 0, 2}, device);
    const Tensor rank3 = PoisonedOn({3, 4, 4}, device);
    Tensor out = PoisonedOn({1, 3, 4, 4}, device);
    for (Tensor* bad : {&other_channels, &other_dtype, &empty}) {
      CHECK(ops::BilinearResize(a, *bad, ImageLayout::kChannelsFirst).code() ==
            absl::StatusCode::kInvalidArgument);
    }
    CHECK(ops::BilinearResize(rank3, out, ImageLayout::kChannelsFirst).code() ==
          absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace framezip::engine::test
