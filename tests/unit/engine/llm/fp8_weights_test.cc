// FP8 E4M3 weights on the CPU side: the quantiser against its definition (ops/quantize_fp8.h),
// what the decoder's loader does with --weight-format fp8 (runtime/weight_format.h), and the
// refusals where FP8 cannot run (the CPU has no FP8 arithmetic). The GEMM itself runs on sm_90
// GPUs only and is checked there (tests/unit/engine/linear_fp8_cuda_test.cc).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/float8.h"
#include "engine/core/thread_pool.h"
#include "engine/llm/decoder.h"
#include "engine/llm/quantized_projections.h"
#include "engine/ops/linear.h"
#include "engine/ops/quantize_fp8.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/runtime/weight_format.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine {
namespace {

// The largest E4M3 step around |v| (v in code units, |v| ≤ 448): 2^(e-3) for a normal value in
// [2^e, 2^(e+1)), 2^-9 below the smallest normal 2^-6.
double E4M3Step(double v) {
  const double a = std::abs(v);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -9);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 3);
}

TEST_CASE("QuantizeWeightFp8 follows its definition", "[unit][engine][ops]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 19, k = GENERATE(1, 48, 200);
  CAPTURE(k);
  // Rows of different magnitudes, every seventh all zero.
  auto w = testing::RandomNormal(static_cast<size_t>(n * k), rng, 0.05f);
  std::uniform_real_distribution<float> spread(0.01f, 30.f);
  for (int64_t j = 0; j < n; ++j) {
    const float s = j % 7 == 3 ? 0.f : spread(rng);
    for (int64_t i = 0; i < k; ++i) w[static_cast<size_t>(j * k + i)] *= s;
  }
  const auto q = ops::QuantizeWeightFp8(test::MakeF32(w, {n, k}));
  REQUIRE(q.ok());
  REQUIRE(q->q.dtype() == DType::kF8E4M3);
  REQUIRE(q->q.shape() == Shape{n, k});
  REQUIRE(q->scale.shape() == Shape{n});
  for (int64_t j = 0; j < n; ++j) {
    const float* row = w.data() + j * k;
    double max = 0;
    for (int64_t i = 0; i < k; ++i) max = std::max(max, std::abs(double{row[i]}));
    const float scale = q->scale.data<float>()[j];
    CAPTURE(j, max, scale);
    REQUIRE(std::abs(scale - max / 448) <= 1e-6 * max / 448);
    bool hit_max = max == 0;
    for (int64_t i = 0; i < k; ++i) {
      const Float8E4M3 code = q->q.data<Float8E4M3>()[j * k + i];
      const double v = F8E4M3ToF32(code);
      CAPTURE(i, row[i], int{code.bits}, v);
      REQUIRE((code.bits & 0x7f) != 0x7f);  // never NaN
      if (max == 0) {
        REQUIRE(v == 0);
        continue;
      }
      // Within half a step of the value in code units (and a hair for the f32 scaling).
      const double want = row[i] * 448.0 / max;
      REQUIRE(std::abs(v - want) <= 0.5 * E4M3Step(want) * (1 + 1e-5) + 1e-9);
      if (std::abs(v) == 448) hit_max = true;
    }
    CHECK(hit_max);  // the row's largest magnitude is the format's largest code
  }
}

TEST_CASE("FP8 weights are refused where they cannot run, naming why", "[unit][engine][ops]") {
  auto i32 = Tensor::Zeros({2, 3}, DType::kI32);
  REQUIRE(i32.ok());
  CHECK(ops::QuantizeWeightFp8(*i32).status().code() == absl::StatusCode::kInvalidArgument);
  auto rank1 = Tensor::Zeros({3}, DType::kF32);
  REQUIRE(rank1.ok());
  CHECK(ops::QuantizeWeightFp8(*rank1).status().code() == absl::StatusCode::kInvalidArgument);
  // An empty row is a zero row: scale 0.
  const auto empty = ops::QuantizeWeightFp8(test::MakeEmpty({3, 0}));
  REQUIRE(empty.ok());
  CHECK(empty->q.shape() == Shape{3, 0});
  for (int j = 0; j < 3; ++j) CHECK(empty->scale.data<float>()[j] == 0.f);

  std::mt19937_64 rng(testing::TestSeed());
  const auto w = ops::QuantizeWeightFp8(test::MakeF32(testing::RandomNormal(8 * 32, rng), {8, 32}));
  REQUIRE(w.ok());
  const Tensor x = test::MakeF32(testing::RandomNormal(2 * 32, rng), {2, 32});
  Tensor y = *Tensor::Empty({2, 8}, DType::kF32);
  const Status cpu = ops::Linear(x, w->q, w->scale, Tensor(), y);
  CHECK(cpu.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(cpu.message()), Catch::Contains("sm_90"));
  const Status no_scale = ops::Linear(x, w->q, Tensor(), y);
  CHECK(no_scale.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(no_scale.message()), Catch::Contains("scales"));
  CHECK_FALSE(ops::Fp8LinearAvailable(Device::Cpu()));

  const Status format = runtime::CheckWeightFormat(runtime::WeightFormat::kFp8, Device::Cpu());
  CHECK(format.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(format.message()), Catch::Contains("int8"));
  CHECK(runtime::CheckWeightFormat(runtime::WeightFormat::kFp8, Device::Cuda(0)).ok());
  CHECK(runtime::EffectiveWeightFormat(runtime::WeightFormat::kFp8, Device::Cpu()) ==
        runtime::WeightFormat::kBf16);
  CHECK(runtime::EffectiveWeightFormat(runtime::WeightFormat::kInt8, Device::Cpu()) ==
        runtime::WeightFormat::kInt8);
}

TEST_CASE("Weight format fp8 quantises the projections that fit FP8 GEMMs and keeps the rest",
          "[unit][engine][llm]") {
  const model::TextConfig config = testing::TinyDecoderConfig(true);  // vocabulary 97
  auto random = runtime::MakeRandomDecoderWeights(config, DType::kBF16, 3);
  REQUIRE(random.ok());
  llm::DecoderWeights w = random->weights;
  const auto kept = llm::QuantizeProjectionsFp8(w);
  REQUIRE(kept.ok());
  // The head's 97 output rows are not a multiple of 4: it stays 16-bit, named.
  REQUIRE(kept->size() == 1);
  CHECK_THAT(kept->front(), Catch::Contains("lm_head [97, 64]"));
  CHECK(w.lm_head.dtype() == DType::kBF16);
  CHECK_FALSE(w.lm_head_scale.defined());
  CHECK(w.embed_tokens.dtype() == DType::kBF16);
  for (const llm::LayerWeights& L : w.layers) {
    for (const auto& proj : llm::LayerProjections(L)) {
      CHECK(proj.weight->dtype() == DType::kF8E4M3);
      REQUIRE(proj.scale->defined());
      CHECK(proj.scale->shape() == Shape{proj.weight->dim(0)});
    }
  }
  // Not on the CPU: the decoder says where FP8 runs.
  const auto cpu = runtime::CreateDecoder(config, w);
  CHECK(cpu.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(cpu.status().message()), Catch::Contains("sm_90"));
}

}  // namespace
}  // namespace framezip::engine
