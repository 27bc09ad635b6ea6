// SampleTokens on every device present against an f64 reference of the rule engine/ops/sample.h
// states (tests/unit/engine/ops/device_cases.h): repetition penalty, then greedy argmax or
// temperature, top-k, top-p and a draw in token order from the caller's uniform number. Same draw,
// same token: the devices differ from f64 only in the order and precision of the sums, which moves
// a boundary of the distribution by ~1e-7 relative at most, never hit by these random draws
// (a draw that lands within 1e-6 of a boundary is reported, not counted). The logits the op leaves
// (penalised, divided by the temperature, −inf where top-k/top-p removed) are checked too.
// (llm::Sampler's agreement with the CPU op: tests/unit/engine/llm/sampler_test.cc.)
#include "engine/ops/sample.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

struct Expected {
  int32_t token = -1;
  bool near_boundary = false;  // the draw is within 1e-6 of a cumulative boundary
  std::vector<float> left;     // the logits as the op must leave them
};

// The rule of engine/ops/sample.h for one row, in f64 where it sums.
Expected ReferenceRow(std::vector<float> s, const ops::RowSampling& row) {
  const int64_t v = static_cast<int64_t>(s.size());
  for (int32_t id : row.penalized) {
    if (id < 0 || id >= v) continue;
    s[id] = s[id] < 0 ? s[id] * row.repetition_penalty : s[id] / row.repetition_penalty;
  }
  Expected e;
  if (row.greedy) {
    e.token = static_cast<int32_t>(std::max_element(s.begin(), s.end()) - s.begin());
    e.left = s;
    return e;
  }
  for (float& x : s) x /= row.temperature;
  constexpr float kRemoved = -std::numeric_limits<float>::infinity();
  if (row.top_k > 0 && row.top_k < v) {
    std::vector<float> sorted = s;
    std::nth_element(sorted.begin(), sorted.begin() + (row.top_k - 1), sorted.end(),
                     std::greater<>());
    const float kth = sorted[row.top_k - 1];
    for (float& x : s) {
      if (x < kth) x = kRemoved;
    }
  }
  const double max = *std::max_element(s.begin(), s.end());
  if (row.top_p < 1.0f) {
    // The smallest kept logit t with P(logit <= t) > 1 − top_p; keep logits >= t.
    std::vector<float> kept;
    double total = 0;
    for (float x : s) {
      if (x != kRemoved) {
        kept.push_back(x);
        total += std::exp(x - max);
      }
    }
    std::sort(kept.begin(), kept.end());
    double below = 0;
    float threshold = kept.back();
    for (size_t i = 0; i < kept.size(); ++i) {
      below += std::exp(kept[i] - max) / total;
      if (below > 1.0 - row.top_p) {
        threshold = kept[i];
        break;
      }
    }
    for (float& x : s) {
      if (x < threshold) x = kRemoved;
    }
  }
  double total = 0;
  for (float x : s) total += x == kRemoved ? 0 : std::exp(x - max);
  const double r = row.uniform * total;
  double cumulative = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (s[i] == kRemoved) continue;
    cumulative += std::exp(s[i] - max);
    e.token = static_cast<int32_t>(i);
    if (std::fabs(cumulative - r) <= 1e-6 * total) e.near_boundary = true;
    if (cumulative > r) break;
  }
  e.left = s;
  return e;
}

TEST_CASE("SampleTokens follows the f64 rule on every device, for the same draws",
          "[unit][engine][ops][devices]") {
  const int64_t v = GENERATE(448, 151936);  // framezip-tiny-video's and Qwen2's vocabulary
  CAPTURE(v);
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t b = 12;
  const auto logits = MakeRandom({b, v}, DType::kF32, rng, 4.f);
  // A tie for the maximum in a greedy row: the first index wins.
  logits.tensor.data<float>()[7] = 100.f;
  logits.tensor.data<float>()[9] = 100.f;
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
    r.penalized.push_back(static_cast<int32_t>(v) + 3);  // outside the vocabulary: ignored
    std::sort(r.penalized.begin(), r.penalized.end());
    r.penalized.erase(std::unique(r.penalized.begin(), r.penalized.end()), r.penalized.end());
    r.uniform = uniform(rng);
  }
  rows[11].top_k = 1;  // a single candidate: every draw gives the argmax

  std::vector<Expected> want;
  for (int64_t i = 0; i < b; ++i) {
    const float* row = logits.tensor.data<float>() + i * v;
    want.push_back(ReferenceRow(std::vector<float>(row, row + v), rows[i]));
  }
  REQUIRE(want[0].token == 7);
  ForEachDevice([&](const Device& device) {
    Tensor x = On(logits.tensor, device);
    std::vector<int32_t> got(b, -1);
    const Status st = ops::SampleTokens(x, rows, got);
    INFO(st.ToString());
    REQUIRE(st.ok());
    const std::vector<float> left = testing::ToFloatVector(x);
    for (int64_t i = 0; i < b; ++i) {
      INFO("row " << i);
      if (want[i].near_boundary) {
        std::cout << "row " << i << ": the draw is within 1e-6 of a boundary; token not compared"
                  << std::endl;
      } else {
        CHECK(got[i] == want[i].token);
      }
      int64_t mismatches = 0, first = -1;
      for (int64_t j = 0; j < v; ++j) {
        const float g = left[i * v + j], w = want[i].left[j];
        const bool same = (std::isinf(w) && g == w) ||
                          (std::isfinite(w) && std::fabs(g - w) <= 1e-6f * (1.f + std::fabs(w)));
        if (!same && mismatches++ == 0) first = j;
      }
      INFO("first differing logit at " << first);
      CHECK(mismatches == 0);
    }
  });
}

TEST_CASE("SampleTokens names a bad parameter with its row on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto logits = MakeRandom({4, 50}, DType::kF32, rng);
  std::vector<ops::RowSampling> rows(4);
  rows[3].greedy = false;
  rows[3].top_p = 0;
  ForEachDevice([&](const Device& device) {
    Tensor x = On(logits.tensor, device);
    std::vector<int32_t> got(4);
    const Status st = ops::SampleTokens(x, rows, got);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(st), Catch::Contains("row 3: top_p"));
  });
}

}  // namespace
}  // namespace framezip::engine::test
