// Decode attention over f32, f16, int4 and int2 pages mixed in one call equals dense attention
// (f64) over the dequantised tokens (docs/methods.md §5.3 item 5): max abs err <= 1e-2, cosine >
// 0.999.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/sequence_kv.h"
#include "engine/ops/paged_attention.h"
#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

using kv::KvFormat;

TEST_CASE("Mixed-format paged decode attention equals dequantise-then-dense",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t heads = GENERATE(6, 2);
  const int64_t groups = 2, d = 64;
  const int64_t row = groups * d;
  CAPTURE(heads);
  auto pools = *kv::KvPools::Create(
      kv::PageLayout{32, static_cast<int>(groups), static_cast<int>(d), KvFormat::kF16},
      kv::StorableFormats(), int64_t{256} << 20);
  // Per batch element: one sequence storing classes as f32 / int4 / int2 and one all-f16, so
  // every format occurs; their spans are shuffled together.
  const std::vector<int64_t> lengths = {1, 70, 200, 333};
  const int64_t b = static_cast<int64_t>(lengths.size());
  std::vector<kv::SequenceKv> seqs;
  std::vector<ops::KvSpan> spans;
  std::vector<int32_t> offsets = {0};
  std::vector<std::vector<float>> keys(b), values(b);
  std::uniform_int_distribution<int> pick(1, 3);
  for (int64_t s = 0; s < b; ++s) {
    std::vector<ops::KvSpan> mine;
    for (const auto precision : {kv::KvPrecision{KvFormat::kF32, KvFormat::kInt4, KvFormat::kInt2},
                                 kv::KvPrecision{KvFormat::kF16, KvFormat::kF16, KvFormat::kF16}}) {
      seqs.push_back(*kv::SequenceKv::Create(*pools, 1, precision));
      const int64_t n = lengths[s];
      const auto k = testing::RandomNormal(static_cast<size_t>(n * row), rng);
      auto v = testing::RandomNormal(static_cast<size_t>(n * row), rng);
      for (int64_t i = 0; i < n; ++i) v[i * row + 7] *= 10.f;  // a loud value channel
      std::vector<int32_t> pos(n);
      std::vector<uint8_t> cls(n);
      for (int64_t i = 0; i < n; ++i) {
        pos[i] = static_cast<int32_t>(i);
        cls[i] = static_cast<uint8_t>(pick(rng));
      }
      REQUIRE(seqs.back().Append(0, k.data(), v.data(), pos.data(), n, cls.data()).ok());
      const int64_t stored = seqs.back().num_tokens(0);
      std::vector<float> dk(stored * row), dv(dk.size());
      REQUIRE(seqs.back().Gather(0, dk.data(), dv.data()).ok());
      keys[s].insert(keys[s].end(), dk.begin(), dk.end());
      values[s].insert(values[s].end(), dv.begin(), dv.end());
      seqs.back().AppendSpans(0, mine);
    }
    std::shuffle(mine.begin(), mine.end(), rng);
    spans.insert(spans.end(), mine.begin(), mine.end());
    offsets.push_back(static_cast<int32_t>(spans.size()));
  }
  // Every format is present.
  for (const KvFormat f : kv::StorableFormats()) {
    CHECK(std::any_of(spans.begin(), spans.end(),
                      [f](const ops::KvSpan& s) { return s.format == f; }));
  }
  Tensor q = *Tensor::Empty({b, heads, d}, DType::kF32);
  const auto qv = testing::RandomNormal(static_cast<size_t>(b * heads * d), rng, 0.5f);
  std::copy(qv.begin(), qv.end(), q.data<float>());
  Tensor out = *Tensor::Empty({b, heads, d}, DType::kF32);
  REQUIRE(ops::PagedDecodeAttention(
              q, ops::PagedKv{spans, offsets, static_cast<int>(groups), static_cast<int>(d)}, out)
              .ok());

  double max_err = 0, dot = 0, n_got = 0, n_want = 0;
  for (int64_t s = 0; s < b; ++s) {
    const int64_t n = static_cast<int64_t>(keys[s].size()) / row;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / groups);
      std::vector<double> sc(n);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t e = 0; e < d; ++e)
          acc += double(qv[(s * heads + h) * d + e]) * keys[s][(j * groups + g) * d + e];
        sc[j] = acc / std::sqrt(double(d));
        mx = std::max(mx, sc[j]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t e = 0; e < d; ++e) {
        double want = 0;
        for (int64_t j = 0; j < n; ++j) want += sc[j] / sum * values[s][(j * groups + g) * d + e];
        const double got = out.data<float>()[(s * heads + h) * d + e];
        max_err = std::max(max_err, std::fabs(got - want));
        dot += got * want;
        n_got += got * got;
        n_want += want * want;
      }
    }
  }
  const double cosine = dot / std::sqrt(n_got * n_want);
  CAPTURE(max_err, cosine);
  CHECK(max_err <= 1e-2);
  CHECK(cosine > 0.999);
  // Far tighter in practice: the kernel dequantises exactly as Gather does.
  CHECK(max_err <= 1e-4);
}

TEST_CASE("Paged decode attention rejects quantised spans it cannot read", "[unit][engine][kv]") {
  Tensor q = *Tensor::Empty({1, 2, 16}, DType::kF32);
  Tensor out = *Tensor::Empty({1, 2, 16}, DType::kF32);
  std::vector<uint8_t> bytes(4096);
  ops::KvSpan span;
  span.k = span.v = bytes.data();
  span.num_tokens = 1;
  span.format = KvFormat::kInt4;  // head_dim 16 is not a multiple of 32, and no scales
  std::vector<int32_t> offsets = {0, 1};
  CHECK(ops::PagedDecodeAttention(q, ops::PagedKv{{&span, 1}, offsets, 1, 16}, out).code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine
