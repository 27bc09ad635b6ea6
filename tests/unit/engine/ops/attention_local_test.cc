// LocalWindowAttention (sliding window + attention sinks over selected chunk rows, ZipVL's
// u_rows=local) on every device present against naive f64 attention over the keys
// engine/ops/attention_local.h says a row sees (tests/unit/engine/ops/device_cases.h): with and
// without earlier chunks' keys, a window longer than the sequence, no sinks, sinks reaching into
// the window (and from the past into the chunk), GQA with a head-group selection, sparse row
// subsets, head dims 64 to 256. Every device runs f32 over at most sinks + window keys, differing
// from f64 in summation order and exp ulps; outputs are convex combinations of v, so
// 2e-5 abs + 1e-4 rel, as for dense attention. `out` starts as a sentinel: every element outside
// the selected rows' heads must still hold it exactly.
// (The GPU's refusal of mixed devices and too wide heads: attention_local_cuda_test.cc.)
#include "engine/ops/attention_local.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tests/unit/engine/ops/device_cases.h"
#include "tests/unit/engine/ops/kv_span_arena.h"

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

// The whole expected `out` [t, H, d]: the sentinel, and for the chosen rows' heads [h0, h0 + nh)
// f64 attention over key positions j <= p with j < sinks or j > p − window (p = past + row),
// keys being past_k then k.
std::vector<double> Reference(const Case& c, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& past_k, const std::vector<double>& past_v,
                              const std::vector<int32_t>& rows) {
  const int64_t H = c.heads, G = c.kv_heads, d = c.d;
  std::vector<double> out(static_cast<size_t>(c.t * H * d), kSentinel);
  const auto key = [&](int64_t j, int64_t g, int64_t e) {
    return j < c.past ? past_k[(j * G + g) * d + e] : k[((j - c.past) * G + g) * d + e];
  };
  const auto value = [&](int64_t j, int64_t g, int64_t e) {
    return j < c.past ? past_v[(j * G + g) * d + e] : v[((j - c.past) * G + g) * d + e];
  };
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  for (int32_t i : rows) {
    const int64_t p = c.past + i;
    std::vector<int64_t> keys;
    for (int64_t j = 0; j <= p; ++j) {
      if (j < c.window.sinks || j > p - c.window.window) keys.push_back(j);
    }
    for (int64_t h = c.h0; h < c.h0 + c.nh; ++h) {
      const int64_t g = h / (H / G);
      std::vector<double> s;
      double mx = -INFINITY;
      for (int64_t j : keys) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += q[(i * H + h) * d + e] * key(j, g, e);
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0;
        for (size_t n = 0; n < keys.size(); ++n)
          acc += std::exp(s[n] - mx) / sum * value(keys[n], g, e);
        out[(i * H + h) * d + e] = acc;
      }
    }
  }
  return out;
}

TEST_CASE("LocalWindowAttention matches f64 over its window and sinks on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const Case c = GENERATE(
      // name, t, H, G, d, past, {window, sinks}, h0, nh, every
      Case{"no past, GQA 4/2, every row and head", 40, 4, 2, 64, 0, {8, 2}, 0, 4, 1},
      Case{"past, sparse rows, second head group", 37, 4, 2, 128, 23, {16, 4}, 2, 2, 3},
      Case{"window longer than the sequence", 20, 4, 2, 72, 5, {100, 3}, 0, 4, 2},
      Case{"no sinks", 50, 4, 2, 64, 10, {7, 0}, 0, 2, 4},
      Case{"sinks overlap the window, no past", 30, 4, 2, 64, 0, {8, 10}, 0, 4, 1},
      Case{"sinks span past and chunk, overlap the window", 25, 4, 2, 72, 3, {5, 6}, 2, 2, 2},
      Case{"window 1, one head of MQA", 16, 3, 1, 128, 9, {1, 2}, 1, 1, 2},
      Case{"head_dim 256", 12, 2, 1, 256, 4, {4, 1}, 0, 2, 1});
  CAPTURE(c.name);
  const auto q = MakeRandom({c.t, c.heads, c.d}, DType::kF32, rng);
  const auto k = MakeRandom({c.t, c.kv_heads, c.d}, DType::kF32, rng);
  const auto v = MakeRandom({c.t, c.kv_heads, c.d}, DType::kF32, rng);
  // The past as pages: f16 and f32, and the quantised formats where d allows them.
  std::vector<kv::KvFormat> formats = {kv::KvFormat::kF16, kv::KvFormat::kF32};
  if (c.d % 32 == 0) formats = {kv::KvFormat::kInt4, kv::KvFormat::kF16, kv::KvFormat::kInt2};
  PagedPast past(c.past, c.kv_heads, c.d, formats, rng);
  const std::vector<int32_t> rows = PickRows(c.t, c.every, rng);
  const auto want = Reference(c, q.values, k.values, v.values, past.keys(), past.values(), rows);
  ForEachDevice([&](const Device& device) {
    Tensor out = On(
        [&] {
          Tensor t = MakeEmpty({c.t, c.heads, c.d});
          std::fill_n(t.data<float>(), t.numel(), kSentinel);
          return t;
        }(),
        device);
    const Status st =
        ops::LocalWindowAttention(On(q.tensor, device), On(k.tensor, device), On(v.tensor, device),
                                  past.View(device), rows, c.h0, c.nh, c.window, out);
    INFO(st.ToString());
    REQUIRE(st.ok());
    CheckCloseTo(out, want, kLocalAttention);
    // What the op must not write still holds the sentinel, bit for bit.
    const std::vector<float> got = testing::ToFloatVector(out);
    int64_t changed = 0;
    for (size_t i = 0; i < want.size(); ++i) changed += want[i] == kSentinel && got[i] != kSentinel;
    CHECK(changed == 0);
  });
}

}  // namespace
}  // namespace framezip::engine::test
