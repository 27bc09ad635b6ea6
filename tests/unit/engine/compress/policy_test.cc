// Policy specs ("name:key=value,...") and the plans zipvl and fastv hand to the decoder.
#include "engine/compress/policy.h"

#include <catch2/catch.hpp>
#include <cstring>

#include "engine/compress/fastv.h"
#include "engine/compress/zipvl.h"
#include "tests/testing/random.h"

namespace framezip::engine::compress {
namespace {

Tensor Random(Shape shape, std::mt19937_64& rng) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  const auto v = testing::RandomNormal(static_cast<size_t>(t.numel()), rng, 2.f);
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

TEST_CASE("CreatePolicy parses name:key=value specs and names a bad key", "[unit][compress]") {
  CHECK((*CreatePolicy(""))->name() == "none");
  CHECK((*CreatePolicy("zipvl"))->name() == "zipvl");
  CHECK((*CreatePolicy("fastv:k=3,r=0.75"))->name() == "fastv");
  auto z = CreatePolicy(
      "zipvl:tau=0.97, probes_recent=32,probes_random=16,per_head=1,"
      "u_rows=attend,low_bits=evict");
  REQUIRE(z.ok());
  const auto& zo = static_cast<ZipVlPolicy&>(**z).options();
  CHECK(zo.tau == 0.97);
  CHECK(zo.probes_recent == 32);
  CHECK(zo.probes_random == 16);
  CHECK(zo.per_head);
  CHECK(zo.u_rows == URows::kAttendImportant);
  CHECK(zo.low_bits == 0);
  const auto defaults = static_cast<ZipVlPolicy&>(**CreatePolicy("zipvl")).options();
  CHECK(defaults.u_rows == URows::kLocal);
  CHECK(defaults.u_window == 64);
  CHECK(defaults.u_sinks == 4);
  const auto local =
      static_cast<ZipVlPolicy&>(**CreatePolicy("zipvl:u_rows=skip,u_window=9,u_sinks=0")).options();
  CHECK(local.u_rows == URows::kSkip);
  CHECK(local.u_window == 9);
  CHECK(local.u_sinks == 0);
  CHECK_FALSE(CreatePolicy("zipvl:u_window=0").ok());
  const kv::KvPrecision p = (*CreatePolicy("zipvl"))->Precision(kv::KvFormat::kF16);
  CHECK(p.important == kv::KvFormat::kInt4);
  CHECK(p.rest == kv::KvFormat::kInt2);
  CHECK(p.full == kv::KvFormat::kF16);

  auto bad_key = CreatePolicy("zipvl:tua=0.9");
  REQUIRE_FALSE(bad_key.ok());
  CHECK(absl::IsInvalidArgument(bad_key.status()));
  CHECK_THAT(MessageOf(bad_key.status()), Catch::Contains("tua"));
  auto bad_value = CreatePolicy("zipvl:tau=1.5");
  REQUIRE_FALSE(bad_value.ok());
  CHECK_THAT(MessageOf(bad_value.status()), Catch::Contains("tau"));
  CHECK_FALSE(CreatePolicy("zipvl:u_rows=sometimes").ok());
  CHECK_FALSE(CreatePolicy("zipvl:tau").ok());
  CHECK_FALSE(CreatePolicy("none:x=1").ok());
  auto unknown = CreatePolicy("zipvll");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(MessageOf(unknown.status()), Catch::Contains("zipvl"));  // lists the known names
}

TEST_CASE("ZipVL plans a sparse layer: T important, U rest or dropped", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 400;
  Tensor q = Random({n, 4, 16}, rng), k = Random({n, 2, 16}, rng), v = Random({n, 2, 16}, rng);
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  const bool evict = GENERATE(false, true);
  const bool per_head = GENERATE(false, true);
  auto policy = *CreatePolicy(fmt::format("zipvl:tau=0.9,per_head={},low_bits={}", per_head ? 1 : 0,
                                          evict ? "evict" : "2"));
  PrefillLayerPlan plan;
  plan.classes.assign(n, kv::kFull);
  REQUIRE(policy->PlanPrefillLayer(PrefillLayerInputs{0, &q, &k, &v, pos.data(), 0}, plan).ok());
  REQUIRE(plan.sparse);
  REQUIRE(plan.classes.size() == static_cast<size_t>(n));
  std::vector<uint8_t> in_union(n, 0);
  if (per_head) {
    REQUIRE(plan.important_per_kv_head.size() == 2);
    for (const auto& t : plan.important_per_kv_head) {
      CHECK(std::is_sorted(t.begin(), t.end()));
      CHECK(!t.empty());
      CHECK(t.size() < static_cast<size_t>(n));
      for (int32_t i : t) in_union[i] = 1;
    }
  } else {
    CHECK(std::is_sorted(plan.important.begin(), plan.important.end()));
    CHECK(!plan.important.empty());
    CHECK(plan.important.size() < static_cast<size_t>(n));  // random scores are not flat
    for (int32_t i : plan.important) in_union[i] = 1;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t want = in_union[i] ? kv::kImportant : evict ? kv::kDrop : kv::kRest;
    CHECK(plan.classes[i] == want);
  }
}

TEST_CASE("ZipVL dense_layers attends densely in the first layers and classifies as before",
          "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 300;
  Tensor q = Random({n, 4, 16}, rng), k = Random({n, 2, 16}, rng), v = Random({n, 2, 16}, rng);
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  auto sparse_everywhere = *CreatePolicy("zipvl:tau=0.9");
  auto dense_first_two = *CreatePolicy("zipvl:tau=0.9,dense_layers=2");
  CHECK_FALSE(CreatePolicy("zipvl:dense_layers=-1").ok());
  for (int layer = 0; layer < 4; ++layer) {
    INFO("layer " << layer);
    PrefillLayerPlan want, got;
    want.classes.assign(n, kv::kFull);
    got.classes.assign(n, kv::kFull);
    const PrefillLayerInputs in{layer, &q, &k, &v, pos.data(), 0};
    REQUIRE(sparse_everywhere->PlanPrefillLayer(in, want).ok());
    REQUIRE(dense_first_two->PlanPrefillLayer(in, got).ok());
    CHECK(got.sparse == (layer >= 2));
    CHECK(got.classes == want.classes);  // the KV cache is compressed the same way
    CHECK(got.important == want.important);
  }
}

TEST_CASE("ZipVL decode window classification keeps the attention mass", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  ZipVlPolicy policy(ZipVlOptions{.tau = 0.8});
  CHECK(policy.ResidualWindow() == 100);
  const int64_t heads = 4, g = 2, d = 8, n = 100;
  const Tensor q = Random({1, heads, d}, rng), k = Random({n, g, d}, rng);
  std::vector<uint8_t> classes;
  REQUIRE(policy.ClassifyResidual(0, q, k, classes).ok());
  REQUIRE(classes.size() == static_cast<size_t>(n));
  // f64 reference: a_j = Σ_h softmax_h(q_h · k_j / √d)_j, total mass = heads. The important
  // tokens are the fewest largest a_j holding τ of it: they reach τ, and without the smallest
  // of them they would not.
  std::vector<double> a(static_cast<size_t>(n), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> e(static_cast<size_t>(n));
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) {
        s +=
            double(q.data<float>()[h * d + c]) * k.data<float>()[(j * g + h / (heads / g)) * d + c];
      }
      e[static_cast<size_t>(j)] = s / std::sqrt(double(d));
      mx = std::max(mx, e[static_cast<size_t>(j)]);
    }
    for (double& x : e) sum += (x = std::exp(x - mx));
    for (int64_t j = 0; j < n; ++j) a[static_cast<size_t>(j)] += e[static_cast<size_t>(j)] / sum;
  }
  double kept = 0, smallest = 1e300;
  int64_t important = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (classes[static_cast<size_t>(j)] != kv::kImportant) {
      CHECK(classes[static_cast<size_t>(j)] == kv::kRest);
      continue;
    }
    ++important;
    kept += a[static_cast<size_t>(j)];
    smallest = std::min(smallest, a[static_cast<size_t>(j)]);
  }
  CHECK(important >= 1);
  CHECK(important < n);
  CHECK(kept >= 0.8 * heads - 1e-4);
  CHECK(kept - smallest < 0.8 * heads + 1e-4);
  // Every token left out weighs no more than the lightest one kept.
  for (int64_t j = 0; j < n; ++j) {
    if (classes[static_cast<size_t>(j)] == kv::kRest)
      CHECK(a[static_cast<size_t>(j)] <= smallest + 1e-6);
  }
  const Tensor wrong = Random({n, g, d + 1}, rng);
  CHECK(policy.ClassifyResidual(0, q, wrong, classes).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("FastV prunes R of the visual tokens from layer K on", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 120;
  Tensor q = Random({n, 4, 16}, rng), k = Random({n, 2, 16}, rng), v = Random({n, 2, 16}, rng);
  std::vector<int32_t> pos(n);
  std::vector<uint8_t> visual(n, 0);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  for (int64_t i = 10; i < 110; ++i) visual[i] = 1;  // 100 visual tokens between text
  auto policy = *CreatePolicy("fastv:k=2,r=0.25");
  for (int layer = 0; layer < 4; ++layer) {
    PrefillLayerPlan plan;
    plan.classes.assign(n, kv::kFull);
    REQUIRE(policy
                ->PlanPrefillLayer(
                    PrefillLayerInputs{layer, &q, &k, &v, pos.data(), 0, visual.data(), 4}, plan)
                .ok());
    const auto dropped = std::count(plan.classes.begin(), plan.classes.end(), kv::kDrop);
    if (layer < 2) {
      CHECK_FALSE(plan.sparse);
      CHECK(dropped == 0);
      continue;
    }
    REQUIRE(plan.sparse);
    CHECK(dropped == 25);
    CHECK(plan.important.size() == static_cast<size_t>(n - 25));
    for (int64_t i = 0; i < n; ++i) {
      if (!visual[i]) CHECK(plan.classes[i] == kv::kFull);  // text is never pruned
    }
  }
}

}  // namespace
}  // namespace framezip::engine::compress
