// ops::PagedKv, the paged layout every attention op reads (engine/ops/paged_kv.h): its checks, and
// GatherPagedKv on every device present against what the pages hold once stored (f16 values, and
// the int4/int2 codes as kv_quant.h reconstructs them). A gather converts and copies and sums
// nothing, so every device must return those values exactly.
#include "engine/ops/paged_kv.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "tests/unit/engine/ops/device_cases.h"
#include "tests/unit/engine/ops/kv_span_arena.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kExact{0.0, 0.0};

TEST_CASE("GatherPagedKv reads pages of every format to the values they hold, on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t g = 2, d = 64, tokens = 200;  // 6 full pages of 32 slots and one of 8
  PagedPast past(tokens, g, d,
                 {kv::KvFormat::kF16, kv::KvFormat::kInt4, kv::KvFormat::kF32, kv::KvFormat::kInt2},
                 rng);
  ForEachDevice([&](const Device& device) {
    const ops::PagedKv kv = past.View(device);
    REQUIRE(kv.tokens(0) == tokens);
    REQUIRE(ops::CheckPagedKv("test", kv, 1).ok());
    Tensor k = PoisonedOn({tokens, g, d}, device);
    Tensor v = PoisonedOn({tokens, g, d}, device);
    REQUIRE(ops::GatherPagedKv(kv, 0, device, k.data<float>(), v.data<float>()).ok());
    CheckCloseTo(k, past.keys(), kExact);
    CheckCloseTo(v, past.values(), kExact);
    // One half alone: the keys, as the residual window's classification reads them.
    Tensor keys_only = PoisonedOn({tokens, g, d}, device);
    REQUIRE(ops::GatherPagedKv(kv, 0, device, keys_only.data<float>(), nullptr).ok());
    CheckCloseTo(keys_only, past.keys(), kExact);
    // The tensor form, as the prefill ops gather a past.
    const auto gathered = ops::GatherPagedKv(kv, 0, device);
    REQUIRE(gathered.ok());
    CHECK(gathered->tokens == tokens);
    CheckCloseTo(gathered->v, past.values(), kExact);
  });
}

TEST_CASE("GatherPagedKv reads the sequence it is asked for from a batch", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  SpanArena arena;
  arena.Add(kv::KvFormat::kF32, 5, 32, 1, 32, rng);
  arena.Add(kv::KvFormat::kInt4, 9, 32, 1, 32, rng);
  arena.Add(kv::KvFormat::kF16, 3, 32, 1, 32, rng);
  const std::vector<ops::KvSpan> spans = arena.Spans(Device::Cpu());
  const int32_t offsets[] = {0, 1, 3};  // sequence 0: span 0; sequence 1: spans 1 and 2
  const ops::PagedKv kv{spans, offsets, 1, 32};
  REQUIRE(ops::CheckPagedKv("test", kv, 2).ok());
  CHECK(kv.tokens(0) == 5);
  CHECK(kv.tokens(1) == 12);
  const auto second = ops::GatherPagedKv(kv, 1, Device::Cpu());
  REQUIRE(second.ok());
  std::vector<double> want = arena.keys(1);
  want.insert(want.end(), arena.keys(2).begin(), arena.keys(2).end());
  CheckCloseTo(second->k, want, kExact);
  CHECK(ops::GatherPagedKv(kv, 2, Device::Cpu()).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ops::GatherPagedKv(kv, -1, Device::Cpu()).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Offsets that point past the spans, or run backwards, are refused before any span is read.
  const int32_t past_the_end[] = {0, 1, 7}, backwards[] = {0, 3, 1, 3};
  const ops::PagedKv overrun{spans, past_the_end, 1, 32};
  CHECK(ops::GatherPagedKv(overrun, 1, Device::Cpu()).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const ops::PagedKv reversed{spans, backwards, 1, 32};
  CHECK(ops::GatherPagedKv(reversed, 1, Device::Cpu()).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CheckPagedKv names what is wrong with a paged layout", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  SpanArena arena;
  arena.Add(kv::KvFormat::kInt4, 4, 32, 1, 32, rng);
  std::vector<ops::KvSpan> spans = arena.Spans(Device::Cpu());
  const int32_t one[] = {0, 1}, backwards[] = {0, 1, 0, 1};
  auto message = [](const Status& s) { return MessageOf(s); };
  CHECK_THAT(message(ops::CheckPagedKv("op", ops::PagedKv{spans, one, 1, 32}, 2)),
             Catch::Contains("2 sequences"));
  CHECK_THAT(message(ops::CheckPagedKv("op", ops::PagedKv{spans, backwards, 1, 32}, 3)),
             Catch::Contains("offsets") || Catch::Contains("decrease"));
  CHECK_THAT(message(ops::CheckPagedKv("op", ops::PagedKv{spans, one, 2, 16}, 1)),
             Catch::Contains("head_dim 16"));
  spans[0].v_scale = nullptr;
  CHECK_THAT(message(ops::CheckPagedKv("op", ops::PagedKv{spans, one, 1, 32}, 1)),
             Catch::Contains("lacks its scales"));
  spans[0] = ops::KvSpan{};
  spans[0].format = kv::KvFormat::kLowRank;
  CHECK(ops::CheckPagedKv("op", ops::PagedKv{spans, one, 1, 32}, 1).code() ==
        absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace framezip::engine::test
