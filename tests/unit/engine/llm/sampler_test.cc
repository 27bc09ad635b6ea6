#include "engine/llm/sampler.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "tests/testing/random.h"

namespace framezip::engine::llm {
namespace {

TEST_CASE("Greedy takes the first maximum and repetition penalty works as in HF",
          "[unit][engine][sampler]") {
  Sampler greedy(SamplingParams{});
  std::vector<float> l = {1, 3, 3, -2};
  CHECK(greedy.Sample(l, {}) == 1);

  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler pen(p);
  std::vector<float> l2 = {1.0f, 3.0f, 2.0f, -2.0f};
  // Tokens 1 and 3 seen (1 twice): 3 -> 1.5, -2 -> -4; token 2 (2.0) now wins.
  CHECK(pen.Sample(l2, std::vector<int32_t>{1, 1, 3}) == 2);
  CHECK(l2[1] == 1.5f);
  CHECK(l2[3] == -4.0f);
}

TEST_CASE("Sampling follows softmax of logits over T and is reproducible by seed",
          "[unit][engine][sampler]") {
  SamplingParams p;
  p.do_sample = true;
  p.temperature = 0.5f;
  p.seed = testing::TestSeed();
  Sampler s(p), s2(p);
  // probs ∝ exp(log(w) / 0.5) = w²: weights 0.5, 0.3, 0.2 -> 0.25, 0.09, 0.04 (sum 0.38).
  const std::vector<float> base = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::vector<int> counts(3);
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    auto l = base, l2 = base;
    const int32_t t = s.Sample(l, {});
    CHECK(t == s2.Sample(l2, {}));
    ++counts[t];
  }
  CHECK(std::fabs(counts[0] / double(n) - 0.25 / 0.38) < 0.015);
  CHECK(std::fabs(counts[1] / double(n) - 0.09 / 0.38) < 0.015);
  CHECK(std::fabs(counts[2] / double(n) - 0.04 / 0.38) < 0.015);
}

TEST_CASE("top_k and top_p restrict the candidates", "[unit][engine][sampler]") {
  SamplingParams p;
  p.do_sample = true;
  p.seed = testing::TestSeed();
  p.top_k = 2;
  Sampler k2(p);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l = {0.0f, 2.0f, 1.9f, 1.0f};
    const int32_t t = k2.Sample(l, {});
    REQUIRE((t == 1 || t == 2));
  }
  p.top_k = 0;
  p.top_p = 0.6f;  // probs 0.5, 0.3, 0.2: ascending cum 0.2, 0.5 <= 0.4? no -> keep {0.5, 0.3}
  Sampler tp(p);
  std::vector<int> counts(3);
  for (int i = 0; i < 20000; ++i) {
    std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    ++counts[tp.Sample(l, {})];
  }
  CHECK(counts[2] == 0);
  CHECK(std::fabs(counts[0] / 20000.0 - 0.625) < 0.02);
}

TEST_CASE("StopCondition stops on stop ids, stop strings and max tokens",
          "[unit][engine][sampler]") {
  SamplingParams p;
  p.stop_token_ids = {7};
  p.stop_strings = {"\nUser:"};
  p.max_new_tokens = 5;
  StopCondition stop(p);
  size_t end = 0;
  CHECK(stop.Check(7, 1, "a", &end) == StopReason::kStopToken);
  CHECK(stop.Check(3, 2, "hello\nUser: x", &end) == StopReason::kStopString);
  CHECK(end == 5);
  CHECK(stop.Check(3, 5, "abc", &end) == StopReason::kMaxTokens);
  CHECK(stop.Check(3, 4, "abc", &end) == StopReason::kNone);
  SamplingParams bad;
  bad.do_sample = true;
  bad.temperature = 0;
  CHECK(ValidateSamplingParams(bad).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::llm
