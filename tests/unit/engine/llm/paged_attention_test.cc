// Paged decode attention over ragged pages (f32 and f16) against dense f64 attention.
#include "engine/ops/paged_attention.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "engine/kv/sequence_kv.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine {
namespace {

TEST_CASE("Paged decode attention equals dense attention over the same tokens",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const kv::KvFormat format = GENERATE(kv::KvFormat::kF32, kv::KvFormat::kF16);
  // d = 24 takes the AVX2 build even where the kernels run AVX-512 (it needs d % 16 == 0).
  const int d = GENERATE(32, 24, 64);
  const int64_t heads = 6, groups = 2;
  CAPTURE(d);
  const std::vector<int64_t> lengths = {1, 45, 64, 100};  // ragged, partial last pages
  auto pool = *kv::PagePool::Create(kv::PageLayout{16, groups, d, format}, 1000);
  std::vector<kv::SequenceKv> seqs;
  std::vector<std::vector<double>> keys, values;
  for (int64_t n : lengths) {
    seqs.emplace_back(pool.get(), 1);
    auto k = test::MakeRandom({n, groups, d}, DType::kF32, rng);
    auto v = test::MakeRandom({n, groups, d}, DType::kF32, rng);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
    // Append in two pieces to exercise filling a partial page.
    const int64_t half = n / 2;
    REQUIRE(seqs.back()
                .Append(0, k.tensor.data<float>(), v.tensor.data<float>(), pos.data(), half)
                .ok());
    REQUIRE(seqs.back()
                .Append(0, k.tensor.data<float>() + half * groups * d,
                        v.tensor.data<float>() + half * groups * d, pos.data() + half, n - half)
                .ok());
    REQUIRE(seqs.back().num_tokens(0) == n);
    keys.push_back(k.values);
    values.push_back(v.values);
  }
  const int64_t b = static_cast<int64_t>(lengths.size());
  auto q = test::MakeRandom({b, heads, d}, DType::kF32, rng);
  std::vector<ops::KvSpan> spans;
  std::vector<int32_t> offsets = {0};
  for (auto& s : seqs) {
    s.AppendSpans(0, spans);
    offsets.push_back(static_cast<int32_t>(spans.size()));
  }
  Tensor out = test::MakeEmpty({b, heads, d});
  REQUIRE(ops::PagedDecodeAttention(
              q.tensor, ops::PagedKv{spans, offsets, static_cast<int>(groups), static_cast<int>(d)},
              out)
              .ok());
  std::vector<double> want(static_cast<size_t>(b * heads * d), 0.0);
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / groups);
      std::vector<double> sc(lengths[s]);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < lengths[s]; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += q.values[(s * heads + h) * d + e] * keys[s][(j * groups + g) * d + e];
        sc[j] = dot / std::sqrt(double(d));
        mx = std::max(mx, sc[j]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < lengths[s]; ++j)
        for (int64_t e = 0; e < d; ++e)
          want[(s * heads + h) * d + e] += sc[j] / sum * values[s][(j * groups + g) * d + e];
    }
  }
  const double tol = format == kv::KvFormat::kF32 ? 2e-5 : 5e-3;
  test::RequireClose(out, want, tol, tol);
  // Pages: ceil(n/16) per sequence, all returned on destruction.
  CHECK(pool->pages_in_use() == 1 + 3 + 4 + 7);
  seqs.clear();
  CHECK(pool->pages_in_use() == 0);
}

}  // namespace
}  // namespace framezip::engine
