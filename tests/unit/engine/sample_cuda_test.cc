// [cuda]: SampleTokens on the GPU against the CPU op (which llm::Sampler runs) on fresh random
// logits, for greedy rows, temperature, top-k, top-p, both, and the repetition penalty, over a
// small and the Qwen2 vocabulary. Same draw, same token: the only differences are the order of
// the f64 sums, which moves a boundary of the distribution by ~1e-16 (never hit by a random
// draw in practice). The in-place result (penalty, temperature, −inf where top-k/top-p removed)
// must match too.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/ops/sample.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine::test {
namespace {

TEST_CASE("SampleTokens on the GPU picks the CPU's tokens for the same draws", "[cuda][sampler]") {
  if (SkipWithoutGpu()) return;
  const int64_t v = GENERATE(448, 151936);
  CAPTURE(v);
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t b = 12;
  auto host = Tensor::Empty({b, v}, DType::kF32);
  REQUIRE(host.ok());
  std::normal_distribution<float> normal(0.f, 4.f);
  for (int64_t i = 0; i < b * v; ++i) host->data<float>()[i] = normal(rng);
  // Two rows with a tie for the maximum: greedy must take the first index.
  host->data<float>()[0 * v + 7] = 100.f;
  host->data<float>()[0 * v + 9] = 100.f;
  Tensor gpu = OnGpu(*host);

  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(v - 1));
  std::vector<ops::RowSampling> rows(b);
  for (int64_t i = 0; i < b; ++i) {
    ops::RowSampling& r = rows[i];
    r.greedy = i < 2;
    r.temperature = i % 3 == 0 ? 1.0f : 0.6f;
    r.top_k = (i == 3 || i == 5 || i == 8) ? 40 : 0;
    r.top_p = (i == 4 || i == 5 || i == 9) ? 0.9f : 1.0f;
    r.repetition_penalty = (i == 1 || i == 6 || i == 10) ? 1.5f : 1.0f;
    for (int k = 0; k < 30; ++k) r.penalized.push_back(id(rng));
    std::sort(r.penalized.begin(), r.penalized.end());
    r.penalized.erase(std::unique(r.penalized.begin(), r.penalized.end()), r.penalized.end());
    r.uniform = uniform(rng);
  }
  rows[11].top_k = 1;  // a single candidate: every draw gives the argmax

  std::vector<int32_t> want(b), got(b);
  REQUIRE(ops::SampleTokens(*host, rows, want).ok());
  auto st = ops::SampleTokens(gpu, rows, got);
  INFO((st.ok() ? "" : MessageOf(st)));
  REQUIRE(st.ok());
  CHECK(want[0] == 7);
  for (int64_t i = 0; i < b; ++i) {
    INFO("row " << i);
    CHECK(got[i] == want[i]);
  }
  // The logits as both left them: the same values (one division or multiplication each) and the
  // same −inf masks.
  const std::vector<float> left_gpu = testing::ToFloatVector(gpu);
  const std::vector<float> left_cpu = testing::ToFloatVector(*host);
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < left_cpu.size(); ++i) {
    const float g = left_gpu[i], c = left_cpu[i];
    const bool same = (std::isinf(c) && g == c) ||
                      (std::isfinite(c) && std::abs(g - c) <= 1e-6f * (1.f + std::abs(c)));
    if (!same && mismatches++ == 0) first = static_cast<int64_t>(i);
  }
  INFO("first differing logit at flat index " << first);
  CHECK(mismatches == 0);
}

}  // namespace
}  // namespace framezip::engine::test
