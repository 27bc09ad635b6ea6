// [cuda]: ops refuse tensors split between the CPU and the GPU, naming the mismatch, instead of
// reading host memory as device memory. Not a device case: a split between devices needs two
// devices, so it runs only where a GPU is. (Each op's values are checked on every device by
// tests/unit/engine/ops/.)
#include <catch2/catch.hpp>

#include "engine/ops/attention.h"
#include "engine/ops/linear.h"
#include "engine/ops/rms_norm.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

TEST_CASE("Ops refuse tensors split between the CPU and the GPU", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const auto x = MakeRandom({2, 8}, DType::kF32, rng);
  const auto w = MakeRandom({4, 8}, DType::kF32, rng);
  Tensor y = PoisonedGpu({2, 4});
  CHECK(ops::Linear(x.tensor, OnGpu(w.tensor), Tensor(), y).code() ==
        absl::StatusCode::kInvalidArgument);
  Tensor norm_out = PoisonedGpu({2, 8});
  CHECK(ops::RmsNorm(OnGpu(x.tensor), MakeRandom({8}, DType::kF32, rng).tensor, 1e-6f, norm_out)
            .code() == absl::StatusCode::kInvalidArgument);
  const auto q = MakeRandom({1, 3, 2, 8}, DType::kF32, rng);
  Tensor out = PoisonedGpu({1, 3, 2, 8});
  CHECK(ops::BidirectionalAttention(OnGpu(q.tensor), q.tensor, OnGpu(q.tensor), out).code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::test
