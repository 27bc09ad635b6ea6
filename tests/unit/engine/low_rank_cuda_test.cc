// [cuda]: what AttentionPack's GPU entry points (ops/low_rank_cuda.h) refuse, and how they name
// it. GPU-only, not device cases: these are the GPU functions' own argument checks (device
// tensors, shapes the kernel's shared memory cannot hold), which the CPU ops do not share; the
// CPU ops' refusals are tested in low_rank_test.cc. Their numeric behaviour (decode attention,
// the randomized SVD, packing factors) runs on every device in low_rank_device_test.cc.
#include "engine/ops/low_rank_cuda.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/ops/low_rank.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine::test {
namespace {

using ops::FactorView;
using ops::RopeParams;

Tensor BytesOnGpu(const void* data, size_t bytes) {
  auto host = Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kU8);
  FZ_CHECK(host.ok());
  std::memcpy(host->raw_data(), data, bytes);
  return OnGpu(*host);
}

TEST_CASE("RandomizedSvdCuda refuses bad input and names it", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  auto host = Tensor::Empty({4, 3}, DType::kF32);
  REQUIRE(host.ok());
  std::fill_n(host->data<float>(), 12, 1.f);
  host->data<float>()[5] = std::nanf("");
  const Status nan = ops::RandomizedSvdCuda(OnGpu(*host), {.rank = 2}).status();
  CHECK(nan.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(nan.message()), Catch::Contains("not finite"));
  CHECK(ops::RandomizedSvdCuda(OnGpu(*host), {.rank = 4}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ops::RandomizedSvdCuda(*host, {.rank = 2}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("LowRankBlockAttendCuda refuses what the kernel cannot take", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const std::vector<float> us_values = testing::RandomNormal(8 * 4, rng),
                           vt_values = testing::RandomNormal(4 * 64, rng);
  const Tensor us_gpu = BytesOnGpu(us_values.data(), us_values.size() * 4),
               vt_gpu = BytesOnGpu(vt_values.data(), vt_values.size() * 4);
  const FactorView us = FactorView::OfF32(static_cast<const float*>(us_gpu.raw_data()), 8, 4),
                   vt = FactorView::OfF32(static_cast<const float*>(vt_gpu.raw_data()), 4, 64);
  std::vector<int32_t> positions(8, 0);
  const Tensor positions_gpu = BytesOnGpu(positions.data(), positions.size() * 4);
  std::vector<uint16_t> ranks(8, 4);
  const Tensor ranks_gpu = BytesOnGpu(ranks.data(), ranks.size() * 2);
  const ops::LowRankBlockView block{
      .key_us = us,
      .key_vt = vt,
      .value_us = us,
      .value_vt = vt,
      .positions = {static_cast<const int32_t*>(positions_gpu.raw_data()), 8},
      .value_ranks = {static_cast<const uint16_t*>(ranks_gpu.raw_data()), 8}};
  Tensor q = PoisonedGpu({2, 32}), weights = PoisonedGpu({2, 8}), max = PoisonedGpu({2}),
         sum = PoisonedGpu({2}), out = PoisonedGpu({2, 32});
  const ops::LowRankAttentionShape shape{.num_heads = 2, .num_kv_heads = 2, .head_dim = 32};
  // weights of the wrong shape: named.
  Tensor short_weights = PoisonedGpu({2, 7});
  const Status bad = ops::LowRankBlockAttendCuda(q, block, shape, RopeParams{.head_dim = 32}, 0.f,
                                                 short_weights, max, sum, out);
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.message()), Catch::Contains("weights"));
  // A RoPE of another head size.
  CHECK(ops::LowRankBlockAttendCuda(q, block, shape, RopeParams{.head_dim = 64}, 0.f, weights, max,
                                    sum, out)
            .code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::test
