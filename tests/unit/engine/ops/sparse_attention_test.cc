// Sparse prefill attention (docs/methods.md §5.3 item 3) on every device present
// (tests/unit/engine/ops/device_cases.h): with T = every token it equals dense causal attention;
// with a random T it equals an f64 dense reference masked to T (rows outside T get 0, or attend to
// the T tokens before them, or to a sliding window of all tokens plus sinks), head-shared and per
// KV head, with and without past tokens from earlier chunks. Every device computes in f32 over
// the same keys: 2e-5 absolute on outputs of order 1, as dense attention.
// (The GPU-only entry points of ZipVL's prefill: zipvl_cuda_test.cc.)
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/ops/attention.h"
#include "engine/ops/attention_sparse.h"
#include "tests/unit/engine/ops/device_cases.h"
#include "tests/unit/engine/ops/kv_span_arena.h"

namespace framezip::engine::test {
namespace {

using ops::LocalWindow;
using ops::RestRows;
using Mode = RestRows::Mode;

// f64 reference: query row i, head h sees every past key and the chunk keys j of its group's
// list with j <= i (i in the list) or j < i (i not in it, kImportant); kZero rows outside the
// list are 0; kLocal rows outside it see the first `sinks` keys of past + chunk and the `window`
// keys ending at their own, all of them.
std::vector<double> Reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& pk,
                              const std::vector<float>& pv, int64_t past, int64_t t, int heads,
                              int g, int d, const std::vector<std::vector<int32_t>>& important,
                              const RestRows& rest) {
  std::vector<double> out(static_cast<size_t>(t * heads * d), 0.0);
  const int rep = heads / g;
  for (int h = 0; h < heads; ++h) {
    const int kvh = h / rep;
    const auto& imp = important.size() == 1 ? important[0] : important[kvh];
    std::vector<char> in_t(static_cast<size_t>(t), 0);
    for (int32_t i : imp) in_t[i] = 1;
    for (int64_t i = 0; i < t; ++i) {
      if (!in_t[i] && rest.mode == Mode::kZero) continue;
      std::vector<std::pair<const float*, const float*>> keys;  // (k row, v row)
      auto full_key = [&](int64_t j) {                          // index into past + chunk
        return j < past
                   ? std::make_pair(&pk[(j * g + kvh) * d], &pv[(j * g + kvh) * d])
                   : std::make_pair(&k[((j - past) * g + kvh) * d], &v[((j - past) * g + kvh) * d]);
      };
      if (!in_t[i] && rest.mode == Mode::kLocal) {
        const int64_t p = past + i;
        for (int64_t j = 0; j <= p; ++j) {
          if (j < rest.local.sinks || j > p - rest.local.window) keys.push_back(full_key(j));
        }
      } else {
        for (int64_t j = 0; j < past; ++j) keys.push_back(full_key(j));
        for (int32_t j : imp) {
          if (j < i || (j == i && in_t[i])) keys.push_back(full_key(past + j));
        }
      }
      if (keys.empty()) continue;
      std::vector<double> s(keys.size());
      double mx = -1e300;
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(q[(i * heads + h) * d + e]) * keys[j].first[e];
        s[j] = dot / std::sqrt(double(d));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < keys.size(); ++j) {
        for (int e = 0; e < d; ++e) out[(i * heads + h) * d + e] += s[j] / sum * keys[j].second[e];
      }
    }
  }
  return out;
}

std::vector<int32_t> RandomSubset(int64_t t, double keep, std::mt19937_64& rng) {
  std::vector<int32_t> s;
  std::bernoulli_distribution coin(keep);
  for (int64_t i = 0; i < t; ++i) {
    if (coin(rng)) s.push_back(static_cast<int32_t>(i));
  }
  return s;
}

TEST_CASE("SparsePrefillAttention with every token equals dense causal attention on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = GENERATE(1, 70, 300);
  const int heads = 4, g = 2, d = 64;
  const auto q = MakeRandom({t, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({t, g, d}, DType::kF32, rng);
  const auto v = MakeRandom({t, g, d}, DType::kF32, rng);
  std::vector<int32_t> all(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) all[i] = static_cast<int32_t>(i);
  const std::vector<std::vector<int32_t>> important = {all};
  const auto want =
      Reference(testing::ToFloatVector(q.tensor), testing::ToFloatVector(k.tensor),
                testing::ToFloatVector(v.tensor), {}, {}, 0, t, heads, g, d, important, {});
  ForEachDevice([&](const Device& device) {
    Tensor out = PoisonedOn({t, heads, d}, device);
    REQUIRE(ops::SparsePrefillAttention(On(q.tensor, device), On(k.tensor, device),
                                        On(v.tensor, device), {}, important, {}, out)
                .ok());
    CheckCloseTo(out, want, {2e-5, 0.0});
    // And the dense causal op on the same device, to the same values.
    Tensor dense = PoisonedOn({1, t, heads, d}, device);
    REQUIRE(ops::CausalAttention(On(*q.tensor.Reshape({1, t, heads, d}), device),
                                 On(*k.tensor.Reshape({1, t, g, d}), device),
                                 On(*v.tensor.Reshape({1, t, g, d}), device), dense)
                .ok());
    CheckCloseTo(dense, want, {2e-5, 0.0});
  });
}

TEST_CASE("SparsePrefillAttention with a random T equals the masked f64 reference on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const Mode mode = GENERATE(Mode::kZero, Mode::kImportant, Mode::kLocal);
  // Windows shorter than the chunk, longer than it (reaching into the past), and sink counts
  // inside and beyond the window.
  const int64_t window = GENERATE(1, 9, 300);
  const RestRows rest{mode, LocalWindow{window, window == 9 ? 3 : 0}};
  const bool per_kv_head = GENERATE(false, true);
  const int64_t past = GENERATE(0, 37);
  const int64_t t = 257;
  const int heads = 6, g = 2, d = 64;
  CAPTURE(static_cast<int>(mode), window, per_kv_head, past);
  const auto q = MakeRandom({t, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({t, g, d}, DType::kF32, rng);
  const auto v = MakeRandom({t, g, d}, DType::kF32, rng);
  // The past as pages of every format: the op reads what they hold once stored.
  PagedPast paged(
      past, g, d,
      {kv::KvFormat::kF16, kv::KvFormat::kInt4, kv::KvFormat::kF32, kv::KvFormat::kInt2}, rng);
  const std::vector<float> pk(paged.keys().begin(), paged.keys().end());
  const std::vector<float> pv(paged.values().begin(), paged.values().end());
  std::vector<std::vector<int32_t>> important;
  for (int i = 0; i < (per_kv_head ? g : 1); ++i) important.push_back(RandomSubset(t, 0.3, rng));
  const auto want =
      Reference(testing::ToFloatVector(q.tensor), testing::ToFloatVector(k.tensor),
                testing::ToFloatVector(v.tensor), pk, pv, past, t, heads, g, d, important, rest);
  int64_t nonzero = 0;
  for (double w : want) nonzero += w != 0 ? 1 : 0;
  CHECK(nonzero > 0);
  ForEachDevice([&](const Device& device) {
    Tensor out = PoisonedOn({t, heads, d}, device);
    const Status st =
        ops::SparsePrefillAttention(On(q.tensor, device), On(k.tensor, device),
                                    On(v.tensor, device), paged.View(device), important, rest, out);
    INFO(st.ToString());
    REQUIRE(st.ok());
    CheckCloseTo(out, want, {2e-5, 0.0});
  });
}

TEST_CASE("SparsePrefillAttention rejects unsorted or out-of-range rows on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    const Tensor q = On(*Tensor::Zeros({4, 2, 64}, DType::kF32), device);
    const Tensor kv = On(*Tensor::Zeros({4, 1, 64}, DType::kF32), device);
    Tensor out = PoisonedOn({4, 2, 64}, device);
    const std::vector<std::vector<int32_t>> unsorted = {{2, 1}}, outside = {{0, 4}}, ok = {{0, 3}};
    CHECK_FALSE(ops::SparsePrefillAttention(q, kv, kv, {}, unsorted, {}, out).ok());
    CHECK_FALSE(ops::SparsePrefillAttention(q, kv, kv, {}, outside, {}, out).ok());
    // A past whose span claims tokens without pages, and a past of another head size.
    const ops::KvSpan hollow{nullptr, nullptr, 3};
    const int32_t one[] = {0, 1};
    const Status no_pages =
        ops::SparsePrefillAttention(q, kv, kv, ops::PagedKv{{&hollow, 1}, one, 1, 64}, ok, {}, out);
    CHECK(no_pages.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(no_pages), Catch::Contains("span 0"));
    const ops::KvSpan rows{kv.raw_data(), kv.raw_data(), 2};
    const Status other_heads =
        ops::SparsePrefillAttention(q, kv, kv, ops::PagedKv{{&rows, 1}, one, 2, 32}, ok, {}, out);
    CHECK(other_heads.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(other_heads), Catch::Contains("2 KV heads × 32 dims"));
    const RestRows attend{Mode::kImportant, {}}, local{Mode::kLocal, LocalWindow{4, 1}},
        no_window{Mode::kLocal, LocalWindow{0, 1}};
    CHECK(ops::SparsePrefillAttention(q, kv, kv, {}, ok, attend, out).ok());
    CHECK(ops::SparsePrefillAttention(q, kv, kv, {}, ok, local, out).ok());
    CHECK_FALSE(ops::SparsePrefillAttention(q, kv, kv, {}, ok, no_window, out).ok());
  });
}

}  // namespace
}  // namespace framezip::engine::test
