// Sparse prefill attention (docs/methods.md §5.3 item 3): with T = every token it equals dense causal
// attention; with a random T it equals an f64 dense reference masked to T (rows outside T get 0,
// or attend to the T tokens before them, or to a sliding window of all tokens plus sinks),
// head-shared and per KV head, with and without past tokens from earlier chunks.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "engine/ops/attention.h"
#include "engine/ops/attention_sparse.h"
#include "tests/testing/random.h"

namespace framezip::engine::ops {
namespace {

Tensor FromVector(const std::vector<float>& v, Shape shape) {
  Tensor t = *Tensor::Empty(std::move(shape), DType::kF32);
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

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
      auto full_key = [&](int64_t j) {  // index into past + chunk
        return j < past ? std::make_pair(&pk[(j * g + kvh) * d], &pv[(j * g + kvh) * d])
                        : std::make_pair(&k[((j - past) * g + kvh) * d],
                                         &v[((j - past) * g + kvh) * d]);
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

TEST_CASE("SparsePrefillAttention with every token equals dense causal attention",
          "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = GENERATE(1, 70, 300);
  const int heads = 4, g = 2, d = 16;
  const auto q = testing::RandomNormal(static_cast<size_t>(t * heads * d), rng);
  const auto k = testing::RandomNormal(static_cast<size_t>(t * g * d), rng);
  const auto v = testing::RandomNormal(static_cast<size_t>(t * g * d), rng);
  std::vector<int32_t> all(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) all[i] = static_cast<int32_t>(i);
  const std::vector<std::vector<int32_t>> important = {all};
  Tensor out = *Tensor::Empty({t, heads, d}, DType::kF32);
  REQUIRE(SparsePrefillAttention(FromVector(q, {t, heads, d}), FromVector(k, {t, g, d}),
                                 FromVector(v, {t, g, d}), nullptr, nullptr, 0, important, {},
                                 out)
              .ok());
  Tensor dense = *Tensor::Empty({1, t, heads, d}, DType::kF32);
  REQUIRE(CausalAttention(FromVector(q, {1, t, heads, d}), FromVector(k, {1, t, g, d}),
                          FromVector(v, {1, t, g, d}), dense)
              .ok());
  const auto want = Reference(q, k, v, {}, {}, 0, t, heads, g, d, important, {});
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(out.data<float>()[i] == Approx(dense.data<float>()[i]).margin(1e-6));
    max_err = std::max(max_err, std::abs(out.data<float>()[i] - want[i]));
    max_ref = std::max(max_ref, std::abs(want[i] - dense.data<float>()[i]));
  }
  CHECK(max_err < 2e-5);
  CHECK(max_ref < 2e-5);
}

TEST_CASE("SparsePrefillAttention with a random T equals the masked f64 reference",
          "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  const Mode mode = GENERATE(Mode::kZero, Mode::kImportant, Mode::kLocal);
  // Windows shorter than the chunk, longer than it (reaching into the past), and sink counts
  // inside and beyond the window.
  const int64_t window = GENERATE(1, 9, 300);
  const RestRows rest{mode, LocalWindow{window, window == 9 ? 3 : 0}};
  const bool per_kv_head = GENERATE(false, true);
  const int64_t past = GENERATE(0, 37);
  const int64_t t = 257;
  const int heads = 6, g = 2, d = 8;
  const auto q = testing::RandomNormal(static_cast<size_t>(t * heads * d), rng);
  const auto k = testing::RandomNormal(static_cast<size_t>(t * g * d), rng);
  const auto v = testing::RandomNormal(static_cast<size_t>(t * g * d), rng);
  const auto pk = testing::RandomNormal(static_cast<size_t>(past * g * d), rng);
  const auto pv = testing::RandomNormal(static_cast<size_t>(past * g * d), rng);
  std::vector<std::vector<int32_t>> important;
  for (int i = 0; i < (per_kv_head ? g : 1); ++i) important.push_back(RandomSubset(t, 0.3, rng));
  Tensor out = *Tensor::Empty({t, heads, d}, DType::kF32);
  REQUIRE(SparsePrefillAttention(FromVector(q, {t, heads, d}), FromVector(k, {t, g, d}),
                                 FromVector(v, {t, g, d}), past > 0 ? pk.data() : nullptr,
                                 past > 0 ? pv.data() : nullptr, past, important, rest, out)
              .ok());
  const auto want = Reference(q, k, v, pk, pv, past, t, heads, g, d, important, rest);
  double max_err = 0;
  int64_t nonzero = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, std::abs(out.data<float>()[i] - want[i]));
    nonzero += want[i] != 0 ? 1 : 0;
  }
  CHECK(max_err < 2e-5);
  CHECK(nonzero > 0);
}

TEST_CASE("SparsePrefillAttention rejects unsorted or out-of-range rows", "[unit][compress]") {
  Tensor q = *Tensor::Zeros({4, 2, 8}, DType::kF32);
  Tensor kv = *Tensor::Zeros({4, 1, 8}, DType::kF32);
  Tensor out = *Tensor::Empty({4, 2, 8}, DType::kF32);
  const std::vector<std::vector<int32_t>> unsorted = {{2, 1}}, outside = {{0, 4}}, ok = {{0, 3}};
  CHECK_FALSE(SparsePrefillAttention(q, kv, kv, nullptr, nullptr, 0, unsorted, {}, out).ok());
  CHECK_FALSE(SparsePrefillAttention(q, kv, kv, nullptr, nullptr, 0, outside, {}, out).ok());
  CHECK_FALSE(SparsePrefillAttention(q, kv, kv, nullptr, nullptr, 3, ok, {}, out).ok());
  const RestRows attend{Mode::kImportant, {}}, local{Mode::kLocal, LocalWindow{4, 1}},
      no_window{Mode::kLocal, LocalWindow{0, 1}};
  CHECK(SparsePrefillAttention(q, kv, kv, nullptr, nullptr, 0, ok, attend, out).ok());
  CHECK(SparsePrefillAttention(q, kv, kv, nullptr, nullptr, 0, ok, local, out).ok());
  CHECK_FALSE(SparsePrefillAttention(q, kv, kv, nullptr, nullptr, 0, ok, no_window, out).ok());
}

}  // namespace
}  // namespace framezip::engine::ops
