// [cuda]: LocalWindowAttention refuses what the GPU cannot take: tensors split between devices
// and heads wider than 256. Not a device case: a split between devices needs a second device,
// and the width limit is the GPU kernel's (the CPU takes any width). (Its values on every
// device: tests/unit/engine/ops/attention_local_test.cc.)
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "engine/ops/attention_local.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

constexpr float kSentinel = -777.25f;

Tensor Sentinel(Shape shape) {
  Tensor t = MakeEmpty(shape);
  std::fill_n(t.data<float>(), t.numel(), kSentinel);
  return t;
}

TEST_CASE("LocalWindowAttention on the GPU refuses mixed devices and too wide heads",
          "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const std::vector<int32_t> rows = {0, 2};
  {
    const auto q = MakeRandom({4, 2, 64}, DType::kF32, rng);
    const auto k = MakeRandom({4, 1, 64}, DType::kF32, rng);
    Tensor out = OnGpu(Sentinel({4, 2, 64}));
    const auto st = ops::LocalWindowAttention(OnGpu(q.tensor), k.tensor, OnGpu(k.tensor), {}, rows,
                                              0, 2, {}, out);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  }
  {
    const auto q = MakeRandom({4, 2, 288}, DType::kF32, rng);
    const auto k = MakeRandom({4, 1, 288}, DType::kF32, rng);
    Tensor out = OnGpu(Sentinel({4, 2, 288}));
    const auto st = ops::LocalWindowAttention(OnGpu(q.tensor), OnGpu(k.tensor), OnGpu(k.tensor), {},
                                              rows, 0, 2, {}, out);
    CHECK(st.code() == absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace framezip::engine::test
