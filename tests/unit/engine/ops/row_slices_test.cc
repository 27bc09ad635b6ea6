// CopyRowSlices (the row moves around sparse prefill: a head range of chosen rows gathered, past
// keys copied in front, the output scattered back) on every device present
// (tests/unit/engine/ops/device_cases.h): element for element what row_slices.h defines, every
// other element of the destination untouched, bad arguments named with nothing written.
#include "engine/ops/row_slices.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

// dst as a host vector after dst(i, c) = src(i, c) per row_slices.h.
std::vector<double> Moved(std::vector<double> dst, const std::vector<double>& src, int64_t count,
                          int64_t width, int64_t src_stride, int64_t src_col0,
                          std::span<const int32_t> src_rows, int64_t dst_stride, int64_t dst_col0,
                          std::span<const int32_t> dst_rows) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t from = src_rows.empty() ? i : src_rows[i];
    const int64_t to = dst_rows.empty() ? i : dst_rows[i];
    for (int64_t c = 0; c < width; ++c) {
      dst[to * dst_stride + dst_col0 + c] = src[from * src_stride + src_col0 + c];
    }
  }
  return dst;
}

float* Floats(Tensor& t) { return static_cast<float*>(t.raw_data()); }
const float* Floats(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }

TEST_CASE("CopyRowSlices gathers and scatters head ranges of chosen rows on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  // A head range [2, 5) (8 floats a head) of 13 chosen rows of a [40, 48] matrix, gathered into a
  // compact block, then scattered into another matrix's heads [1, 4); and the identity rows (the
  // past keys' prefix copy).
  const int64_t n = 40, stride = 48, width = 24;
  const auto src = MakeRandom({n, stride}, DType::kF32, rng);
  std::vector<int32_t> shuffled(static_cast<size_t>(n));
  std::iota(shuffled.begin(), shuffled.end(), 0);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  std::vector<int32_t> rows(shuffled.begin(), shuffled.begin() + 13);
  const auto base = MakeRandom({n, stride}, DType::kF32, rng);
  for (const bool identity : {false, true}) {
    CAPTURE(identity);
    const std::span<const int32_t> picked = identity ? std::span<const int32_t>() : rows;
    const int64_t m = static_cast<int64_t>(rows.size());
    const auto gathered = Moved(std::vector<double>(static_cast<size_t>(m * width), 0.0),
                                src.values, m, width, stride, 16, picked, width, 0, {});
    const auto scattered = Moved(base.values, gathered, m, width, width, 0, {}, stride, 8, picked);
    ForEachDevice([&](const Device& device) {
      const Tensor device_src = On(src.tensor, device);
      Tensor block = On(MakeEmpty({m, width}), device);
      REQUIRE(ops::CopyRowSlices(
                  device, m, width,
                  {.data = Floats(device_src), .stride = stride, .col0 = 16, .rows = picked},
                  {.data = Floats(block), .stride = width})
                  .ok());
      CheckCloseTo(block, gathered, {0.0, 0.0});
      Tensor target = On(base.tensor, device);
      REQUIRE(
          ops::CopyRowSlices(device, m, width, {.data = Floats(block), .stride = width},
                             {.data = Floats(target), .stride = stride, .col0 = 8, .rows = picked})
              .ok());
      CheckCloseTo(target, scattered, {0.0, 0.0});  // the rest of each row kept its value
    });
  }
}

TEST_CASE("CopyRowSlices names bad arguments and writes nothing, on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto src = MakeRandom({6, 10}, DType::kF32, rng);
  const auto dst = MakeRandom({3, 8}, DType::kF32, rng);
  const std::vector<int32_t> short_list = {1}, negative = {0, -2, 1};
  ForEachDevice([&](const Device& device) {
    const Tensor s = On(src.tensor, device);
    Tensor d = On(dst.tensor, device);
    CHECK(ops::CopyRowSlices(device, 3, 4, {.data = Floats(s), .stride = 10, .rows = short_list},
                             {.data = Floats(d), .stride = 8})
              .code() == absl::StatusCode::kInvalidArgument);
    CHECK(ops::CopyRowSlices(device, 3, 4, {.data = Floats(s), .stride = 10},
                             {.data = Floats(d), .stride = 8, .rows = negative})
              .code() == absl::StatusCode::kInvalidArgument);
    const Status overrun =
        ops::CopyRowSlices(device, 1, 4, {.data = Floats(s), .stride = 10, .col0 = 7},
                           {.data = Floats(d), .stride = 8});
    CHECK(overrun.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(overrun), Catch::Contains("source columns [7, 11)"));
    CheckCloseTo(d, dst.values, {0.0, 0.0});
  });
}

}  // namespace
}  // namespace framezip::engine::test
