// UnfoldPatches on every device present (tests/unit/engine/ops/device_cases.h) against the
// convolution's own indexing, element by element: a copy, with at most one rounding to bf16 or
// f16 (to nearest even, as engine/core/half.h rounds), so bit for bit everywhere.
#include "engine/ops/patch_unfold.h"

#include <catch2/catch.hpp>

#include "engine/core/half.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

double Rounded(DType round_to, float x) {
  if (round_to == DType::kBF16) return BF16ToF32(F32ToBF16(x));
  if (round_to == DType::kF16) return F16ToF32(F32ToF16(x));
  return x;
}

TEST_CASE("UnfoldPatches lays out each patch as the conv weight's row on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const DType round_to = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  CAPTURE(DTypeName(round_to));
  // Three images of 3 channels, side 30 in patches of 14 (SigLIP's patch; 2 pixels past the last
  // whole patch, which the conv does not read) and of 4 (a 7-patch grid).
  const int64_t patch = GENERATE(14, 4), images = 3, channels = 3, side = 30;
  CAPTURE(patch);
  const int64_t g = side / patch, k = channels * patch * patch;
  const auto pixels = MakeRandom({images, channels, side, side}, DType::kF32, rng, 2.f);
  std::vector<double> want(static_cast<size_t>(images * g * g * k));
  for (int64_t b = 0; b < images; ++b) {
    for (int64_t gy = 0; gy < g; ++gy) {
      for (int64_t gx = 0; gx < g; ++gx) {
        for (int64_t ch = 0; ch < channels; ++ch) {
          for (int64_t ky = 0; ky < patch; ++ky) {
            for (int64_t kx = 0; kx < patch; ++kx) {
              // Conv2d(stride = kernel = patch): output (gy, gx) reads pixel
              // (gy·P + ky, gx·P + kx) of channel ch with weight [d, ch, ky, kx].
              const int64_t row = (b * g + gy) * g + gx, col = (ch * patch + ky) * patch + kx;
              const float v = pixels.tensor.data<
                  float>()[((b * channels + ch) * side + gy * patch + ky) * side + gx * patch + kx];
              want[static_cast<size_t>(row * k + col)] = Rounded(round_to, v);
            }
          }
        }
      }
    }
  }
  ForEachDevice([&](const Device& device) {
    Tensor cols = PoisonedOn({images * g * g, k}, device);
    REQUIRE(ops::UnfoldPatches(On(pixels.tensor, device), patch, round_to, cols).ok());
    CheckCloseTo(cols, want, {0.0, 0.0});
    // Cols of the wrong shape, and a patch larger than the images, are refused.
    Tensor wrong = PoisonedOn({images * g * g, k + 1}, device);
    const Status st = ops::UnfoldPatches(On(pixels.tensor, device), patch, round_to, wrong);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(st), Catch::Contains("cols"));
    CHECK(ops::UnfoldPatches(On(pixels.tensor, device), side + 1, round_to, cols).code() ==
          absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace framezip::engine::test
