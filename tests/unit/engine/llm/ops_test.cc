// The CPU-only parts of the ops: the AMX weight cache, RoPE's shared angle table and host-checked
// positions. Each op's values on every device are tested in
// tests/unit/engine/ops/ (one definition per op, run on the CPU and, where present, the GPU).
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>

#include "engine/core/thread_pool.h"
#include "engine/ops/amx_weight_cache.h"
#include "engine/ops/gemm_amx.h"
#include "engine/ops/linear.h"
#include "engine/ops/rope.h"
#include "engine/ops/rope_table.h"
#include "fmt/format.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine {
namespace {

using test::MakeEmpty;
using test::MakeRandom;
using test::RequireClose;

TEST_CASE("Linear's AMX path packs a weight once, and anew when its memory changes hands",
          "[unit][engine][ops]") {
  if (!ops::cpu::AmxGemmEnabled()) {
    std::cout << "SKIPPED: no AMX on this CPU/OS (the packed-weight cache serves the AMX path)"
              << std::endl;
    return;
  }
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t m = 40, n = 300, k = 133;  // a partial last strip of 128 columns
  auto x = MakeRandom({m, k}, DType::kF32, rng);
  std::vector<float> w_values = testing::RandomNormal(static_cast<size_t>(n * k), rng, 0.2f);
  std::vector<uint16_t> storage(static_cast<size_t>(n * k));
  const auto fill = [&] {
    for (size_t i = 0; i < storage.size(); ++i) storage[i] = F32ToBF16(w_values[i]).bits;
  };
  fill();
  // An owning buffer over `storage` (its own ownership, so the cache can see it go), and a view
  // of the same memory, which Linear packs on every call: the reference layout.
  const auto owning = [&] {
    Buffer b = Buffer::Adopt(std::shared_ptr<void>(storage.data(), [](void*) {}),
                             storage.size() * sizeof(uint16_t), Device::Cpu());
    auto t = Tensor::FromBuffer(std::move(b), 0, {n, k}, DType::kBF16);
    REQUIRE(t.ok());
    return *t;
  };
  const Tensor view = Tensor::View(storage.data(), {n, k}, DType::kBF16);
  const auto run = [&](const Tensor& w) {
    Tensor y = MakeEmpty({m, n});
    REQUIRE(ops::Linear(x.tensor, w, Tensor(), y).ok());
    return std::vector<float>(y.data<float>(), y.data<float>() + m * n);
  };
  {
    const Tensor w = owning();
    const size_t before = ops::cpu::PackedAmxWeightBytes();
    const std::vector<float> first = run(w);
    const size_t cached = ops::cpu::PackedAmxWeightBytes();
    CHECK(cached > before);
    CHECK(run(w) == first);  // from the cache
    CHECK(ops::cpu::PackedAmxWeightBytes() == cached);
    CHECK(run(view) == first);  // packed per call: the same layout, the same bits
  }
  // The weight's buffer is gone; new contents at the same address under a new owner, prepared
  // ahead of its first call as an engine does at load.
  for (float& v : w_values) v = -v;
  fill();
  const Tensor w2 = owning();
  ops::PrepareLinearWeight(w2);
  const size_t prepared = ops::cpu::PackedAmxWeightBytes();
  const std::vector<float> second = run(w2);
  CHECK(ops::cpu::PackedAmxWeightBytes() == prepared);  // the call packed nothing more
  CHECK(second == run(view));
  CHECK(second[0] != 0.f);
}

// Not a check: prints Linear's time for a short chunk (a follow-up question) at a Qwen2-0.5B MLP
// shape, with the weight packed per call (a view) and from the packed-weight cache.
TEST_CASE("Linear timing at few rows, packed per call and cached", "[.][bench]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 4864, k = 896;
  auto w = MakeRandom({n, k}, DType::kBF16, rng, 0.05f);
  const Tensor view = Tensor::View(w.tensor.raw_data(), {n, k}, DType::kBF16);
  for (int64_t m : {17, 32, 128, 512}) {
    auto x = MakeRandom({m, k}, DType::kF32, rng);
    Tensor y = MakeEmpty({m, n});
    for (const bool cached : {false, true}) {
      double best = 1e30;
      for (int round = 0; round < 20; ++round) {
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(ops::Linear(x.tensor, cached ? w.tensor : view, Tensor(), y).ok());
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::cout << fmt::format("Linear m={} n={} k={} bf16 {} ({}): {:.3f} ms\n", m, n, k,
                               cached ? "cached" : "packed per call", ops::cpu::Bf16GemmPath(),
                               best * 1e3);
    }
  }
}

TEST_CASE("RoPE's shared angle table holds ApplyRope's f32 angles exactly, grows, and has a cap",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const ops::RopeParams p{.head_dim = 48, .theta = 5e5};
  const std::vector<float> inv = ops::RopeInverseFrequencies(p);
  auto small = ops::RopeTable::For(p, 100);
  REQUIRE(small != nullptr);
  CHECK(small->positions() >= 100);
  auto big = ops::RopeTable::For(p, small->positions() + 1);  // grows
  REQUIRE(big != nullptr);
  CHECK(big->positions() > small->positions());
  CHECK(ops::RopeTable::For(p, 50) == big);  // the largest is shared
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(big->positions() - 1));
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t pos = dist(rng);
    for (size_t i = 0; i < inv.size(); ++i) {
      const float f = static_cast<float>(pos) * inv[i];
      REQUIRE(big->cos(pos)[i] == static_cast<float>(std::cos(static_cast<double>(f))));
      REQUIRE(big->sin(pos)[i] == static_cast<float>(std::sin(static_cast<double>(f))));
    }
  }
  // Past the cap the caller computes its own angles: the same rotation either way.
  CHECK(ops::RopeTable::For(p, int64_t{1} << 40) == nullptr);
  // RoPE parameters from a damaged checkpoint or segment neither fail nor pile up tables.
  CHECK(ops::RopeTable::For({.head_dim = 48, .theta = std::nan("")}, 10) == nullptr);
  for (size_t i = 0; i <= ops::RopeTable::kMaxRopes; ++i) {
    (void)ops::RopeTable::For({.head_dim = 48, .theta = 1e3 + static_cast<double>(i)}, 10);
  }
  CHECK(ops::RopeTable::For({.head_dim = 48, .theta = 7.5e3}, 10) == nullptr);
  const int64_t t = 3, h = 2, d = 48;
  auto x = MakeRandom({t, h, d}, DType::kF32, rng);
  const std::vector<int32_t> far = {5 + (1 << 26), 77 + (1 << 26), 1000 + (1 << 26)};
  REQUIRE(ops::ApplyRope(x.tensor, test::MakeI32(far), p).ok());  // beyond any table
  std::vector<double> want(x.values.size());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h; ++j)
      for (int64_t e = 0; e < d / 2; ++e) {
        const double ang = static_cast<float>(far[i]) * inv[e];
        const double a = x.values[(i * h + j) * d + e], b = x.values[(i * h + j) * d + e + d / 2];
        want[(i * h + j) * d + e] = a * std::cos(ang) - b * std::sin(ang);
        want[(i * h + j) * d + e + d / 2] = b * std::cos(ang) + a * std::sin(ang);
      }
  RequireClose(x.tensor, want, 1e-5);
}

TEST_CASE("RoPE with host-checked positions rotates the same and checks the host copy",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const ops::RopeParams p{.head_dim = 32, .theta = 1e4};
  auto x = MakeRandom({5, 2, 32}, DType::kF32, rng);
  Tensor plain = *x.tensor.To(Device::Cpu());
  const std::vector<int32_t> pos = {0, 3, 17, 400, 9};
  const Tensor positions = test::MakeI32(pos);
  REQUIRE(ops::ApplyRope(plain, positions, p).ok());
  REQUIRE(ops::ApplyRope(x.tensor, positions, p, pos).ok());
  RequireClose(x.tensor, std::vector<double>(plain.data<float>(), plain.data<float>() + 320), 0);

  const std::vector<int32_t> short_copy = {0, 3};
  auto st = ops::ApplyRope(x.tensor, positions, p, short_copy);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("2 host positions for 5 tokens"));
  const std::vector<int32_t> negative = {0, 3, -1, 400, 9};
  st = ops::ApplyRope(x.tensor, positions, p, negative);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("position -1 of token 2"));
}

}  // namespace
}  // namespace framezip::engine
