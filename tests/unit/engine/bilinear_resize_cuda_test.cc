// [cuda]: BilinearResize (the vision tower's position-embedding resize and LLaVA-OneVision's video
// pooling) on the GPU against the CPU op, bit for bit: both compute the same f32 weights and sums
// in the same order. (The other ops' tests run on every device: tests/unit/engine/ops/.)
#include <catch2/catch.hpp>

#include "engine/ops/bilinear_resize.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

TEST_CASE("BilinearResize on the GPU matches the CPU op bit for bit", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  // 27x27 -> 14x14: LLaVA-OneVision's 2x2 video pooling; 4x4 -> 2x2: framezip-tiny-video's;
  // 5x7 -> 9x3: an upscale on one axis and a downscale on the other.
  struct Sizes {
    int64_t h_in, w_in, h_out, w_out;
  };
  for (const Sizes z : {Sizes{27, 27, 14, 14}, Sizes{4, 4, 2, 2}, Sizes{5, 7, 9, 3}}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (ops::ImageLayout layout :
           {ops::ImageLayout::kChannelsFirst, ops::ImageLayout::kChannelsLast}) {
        const bool first = layout == ops::ImageLayout::kChannelsFirst;
        DYNAMIC_SECTION(z.h_in << "x" << z.w_in << " -> " << z.h_out << "x" << z.w_out << " "
                               << DTypeName(dt) << (first ? " NCHW" : " NHWC")) {
          const int64_t n = 3, c = 5;
          const Shape in_shape = first ? Shape{n, c, z.h_in, z.w_in} : Shape{n, z.h_in, z.w_in, c};
          const Shape out_shape =
              first ? Shape{n, c, z.h_out, z.w_out} : Shape{n, z.h_out, z.w_out, c};
          const auto x = MakeRandom(in_shape, dt, rng, 2.f);
          Tensor want = MakeEmpty(out_shape, dt);
          REQUIRE(ops::BilinearResize(x.tensor, want, layout).ok());
          auto host_nan = Tensor::Empty(out_shape, dt);
          REQUIRE(host_nan.ok());
          std::memset(host_nan->raw_data(), 0xff, host_nan->nbytes());  // NaN in every float kind
          Tensor got = OnGpu(*host_nan);
          REQUIRE(ops::BilinearResize(OnGpu(x.tensor), got, layout).ok());
          // Same taps, same uncontracted multiply-adds, same rounding: exactly equal.
          CheckClose(got, want, testing::Tolerance{0.0, 0.0});
        }
      }
    }
  }
}

}  // namespace
}  // namespace framezip::engine::test
