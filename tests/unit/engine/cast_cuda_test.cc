// [cuda]: registered only in CUDA builds and run only where a GPU is present.
#include <catch2/catch.hpp>

#include "engine/ops/cast.h"
#include "tests/testing/compare.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine {
namespace {

TEST_CASE("Cast on the GPU equals Cast on the CPU bit for bit", "[cuda][ops]") {
  if (test::SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const auto values = testing::RandomNormal(100003, rng, 10.f);
  auto host = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kF32);
  REQUIRE(host.ok());
  std::copy(values.begin(), values.end(), host->data<float>());
  auto device_in = host->To(Device::Cuda(0));
  REQUIRE(device_in.ok());
  for (DType to : {DType::kBF16, DType::kF16}) {
    auto want = Tensor::Empty(host->shape(), to);
    auto got = Tensor::Empty(host->shape(), to, Device::Cuda(0));
    REQUIRE((want.ok() && got.ok()));
    REQUIRE(ops::Cast(*host, *want).ok());
    REQUIRE(ops::Cast(*device_in, *got).ok());
    const auto r = testing::CompareTensors(*got, *want, {0.0, 0.0});
    INFO(r.message);
    CHECK(r.ok);
  }
}

}  // namespace
}  // namespace framezip::engine
