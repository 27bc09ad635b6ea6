#include "engine/llm/sampler.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/tensor.h"
#include "engine/ops/sample.h"
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

TEST_CASE("SampleTokens on the CPU gives llm::Sampler's token for the draw the Sampler takes",
          "[unit][engine][sampler]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t v = 300, b = 24;
  auto logits = Tensor::Empty({b, v}, DType::kF32);
  REQUIRE(logits.ok());
  std::vector<float> original(static_cast<size_t>(b * v));
  std::normal_distribution<float> normal(0.f, 3.f);
  for (float& x : original) x = normal(rng);
  std::copy(original.begin(), original.end(), logits->data<float>());
  std::vector<ops::RowSampling> rows(b);
  std::vector<int32_t> want(b);
  const std::vector<int32_t> history = {5, 7, 7, 299, 5, 12};
  for (int64_t i = 0; i < b; ++i) {
    SamplingParams p;
    p.do_sample = i % 6 != 0;
    p.temperature = i % 3 == 0 ? 1.0f : 0.7f;
    p.top_k = i % 4 == 1 ? 20 : 0;
    p.top_p = i % 5 >= 2 ? 0.8f : 1.0f;
    p.repetition_penalty = i % 2 == 0 ? 1.3f : 1.0f;
    p.seed = rng();
    std::vector<float> row(original.begin() + i * v, original.begin() + (i + 1) * v);
    Sampler sampler(p);
    want[i] = sampler.Sample(row, history);
    ops::RowSampling& r = rows[i];
    r.greedy = !p.do_sample;
    r.temperature = p.temperature;
    r.top_k = p.top_k;
    r.top_p = p.top_p;
    r.repetition_penalty = p.repetition_penalty;
    r.penalized = {5, 7, 299, 12};
    std::mt19937_64 same(p.seed);
    if (p.do_sample) r.uniform = std::generate_canonical<double, 53>(same);
  }
  std::vector<int32_t> got(b);
  REQUIRE(ops::SampleTokens(*logits, rows, got).ok());
  CHECK(got == want);

  SECTION("a bad parameter is named with its row") {
    rows[3].greedy = false;
    rows[3].top_p = 0;
    auto st = ops::SampleTokens(*logits, rows, got);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(st.message()), Catch::Contains("row 3: top_p"));
  }
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
  // Streaming holds back the longest suffix that starts a stop string, never a whole one.
  CHECK(stop.HeldBackBytes("hello") == 0);
  CHECK(stop.HeldBackBytes("hello\n") == 1);
  CHECK(stop.HeldBackBytes("hello\nUse") == 4);
  CHECK(stop.HeldBackBytes("hello\nUsx") == 0);
  CHECK(stop.HeldBackBytes("\nUser:") == 0);
  SamplingParams bad;
  bad.do_sample = true;
  bad.temperature = 0;
  CHECK(ValidateSamplingParams(bad).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::llm
