// [cuda]: LocalWindowAttention (sliding window + attention sinks over selected chunk rows) on the
// GPU against the CPU op, on fresh random inputs: with and without earlier chunks' keys, a window
// longer than the sequence, no sinks, sinks reaching into the window (and from the past into the
// chunk), GQA with a head-group selection, sparse row subsets, head dims 64, 72, 128 and 256.
// Both sides are f32 over the same at most sinks + window keys; they differ only in summation
// order (lane-split dot products, online vs two-pass softmax) and exp ulps. Outputs are convex
// combinations of v (|out| of order 1), so abs 2e-5 + rel 1e-4, as for dense attention.
// `out` starts as a sentinel on both sides: every element outside the selected rows' heads must
// still hold it exactly.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "engine/ops/attention_local.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kLocalAttention{2e-5, 1e-4};
constexpr float kSentinel = -777.25f;

struct Case {
  const char* name;
  int64_t t, heads, kv_heads, d, past;
  ops::LocalWindow window;
  int64_t h0, nh;
  int64_t every;  // rows: a random subset of about t / every rows (1: every row)
};

std::vector<int32_t> PickRows(int64_t t, int64_t every, std::mt19937_64& rng) {
  std::vector<int32_t> rows(static_cast<size_t>(t));
  std::iota(rows.begin(), rows.end(), 0);
  if (every == 1) return rows;
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(static_cast<size_t>(std::max<int64_t>(1, t / every)));
  std::sort(rows.begin(), rows.end());
  return rows;
}

Tensor Sentinel(Shape shape) {
  Tensor t = MakeEmpty(shape);
  std::fill_n(t.data<float>(), t.numel(), kSentinel);
  return t;
}

// Every element of `got` [t, heads, d] outside the rows' heads [h0, h0 + nh) still holds the
// sentinel, bit for bit.
void CheckUntouched(const Tensor& got, const std::vector<int32_t>& rows, int64_t h0, int64_t nh) {
  const auto v = testing::ToFloatVector(got);
  const int64_t t = got.dim(0), heads = got.dim(1), d = got.dim(2);
  std::vector<bool> written(static_cast<size_t>(t), false);
  for (int32_t r : rows) written[static_cast<size_t>(r)] = true;
  int64_t changed = 0;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      if (written[static_cast<size_t>(i)] && h >= h0 && h < h0 + nh) continue;
      for (int64_t e = 0; e < d; ++e) {
        changed += v[static_cast<size_t>((i * heads + h) * d + e)] != kSentinel;
      }
    }
  }
  CHECK(changed == 0);
}

TEST_CASE("LocalWindowAttention on the GPU matches the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const Case cases[] = {
      // name, t, H, G, d, past, {window, sinks}, h0, nh, every
      {"no past, GQA 4/2, every row and head", 40, 4, 2, 64, 0, {8, 2}, 0, 4, 1},
      {"past, sparse rows, second head group", 37, 4, 2, 128, 23, {16, 4}, 2, 2, 3},
      {"window longer than the sequence", 20, 4, 2, 72, 5, {100, 3}, 0, 4, 2},
      {"no sinks", 50, 4, 2, 64, 10, {7, 0}, 0, 2, 4},
      {"sinks overlap the window, no past", 30, 4, 2, 64, 0, {8, 10}, 0, 4, 1},
      {"sinks span past and chunk, overlap the window", 25, 4, 2, 72, 3, {5, 6}, 2, 2, 2},
      {"window 1, one head of MQA", 16, 3, 1, 128, 9, {1, 2}, 1, 1, 2},
      {"head_dim 256", 12, 2, 1, 256, 4, {4, 1}, 0, 2, 1},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto q = MakeRandom({c.t, c.heads, c.d}, DType::kF32, rng);
      const auto k = MakeRandom({c.t, c.kv_heads, c.d}, DType::kF32, rng);
      const auto v = MakeRandom({c.t, c.kv_heads, c.d}, DType::kF32, rng);
      const int64_t past_rows = std::max<int64_t>(c.past, 1);  // no zero-sized tensors
      const auto past_k = MakeRandom({past_rows, c.kv_heads, c.d}, DType::kF32, rng);
      const auto past_v = MakeRandom({past_rows, c.kv_heads, c.d}, DType::kF32, rng);
      const std::vector<int32_t> rows = PickRows(c.t, c.every, rng);
      const bool has_past = c.past > 0;

      Tensor want = Sentinel({c.t, c.heads, c.d});
      REQUIRE(ops::LocalWindowAttention(q.tensor, k.tensor, v.tensor,
                                        has_past ? past_k.tensor.data<float>() : nullptr,
                                        has_past ? past_v.tensor.data<float>() : nullptr, c.past,
                                        rows, c.h0, c.nh, c.window, want)
                  .ok());

      const Tensor gpu_past_k = OnGpu(past_k.tensor), gpu_past_v = OnGpu(past_v.tensor);
      Tensor got = OnGpu(Sentinel({c.t, c.heads, c.d}));
      const auto st = ops::LocalWindowAttention(
          OnGpu(q.tensor), OnGpu(k.tensor), OnGpu(v.tensor),
          has_past ? static_cast<const float*>(gpu_past_k.raw_data()) : nullptr,
          has_past ? static_cast<const float*>(gpu_past_v.raw_data()) : nullptr, c.past, rows, c.h0,
          c.nh, c.window, got);
      INFO(st.ToString());
      REQUIRE(st.ok());
      CheckClose(got, want, kLocalAttention);
      CheckUntouched(got, rows, c.h0, c.nh);
    }
  }
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
    const auto st = ops::LocalWindowAttention(OnGpu(q.tensor), k.tensor, OnGpu(k.tensor), nullptr,
                                              nullptr, 0, rows, 0, 2, {}, out);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  }
  {
    const auto q = MakeRandom({4, 2, 288}, DType::kF32, rng);
    const auto k = MakeRandom({4, 1, 288}, DType::kF32, rng);
    Tensor out = OnGpu(Sentinel({4, 2, 288}));
    const auto st = ops::LocalWindowAttention(OnGpu(q.tensor), OnGpu(k.tensor), OnGpu(k.tensor),
                                              nullptr, nullptr, 0, rows, 0, 2, {}, out);
    CHECK(st.code() == absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace framezip::engine::test
