// [cuda]: ZipVL's GPU-only entry points, on fresh random inputs: the sparse prefill kernel called
// with a device index tensor (ops::SparsePrefillCuda) and the fused step
// (ops::ZipvlSparsePrefillCuda: probe scores, top-p and sparse prefill without leaving the GPU).
// Neither has a CPU version, so they are not device cases; each is checked against the CPU op
// ops::SparsePrefillAttention (RestRows::kZero), which runs on every device against an f64
// reference (tests/unit/engine/ops/sparse_attention_test.cc): abs 2e-5 + rel 1e-4 as dense
// attention. The fused step is checked over the important set that the GPU's steps, run one by one,
// chose. (The steps that have a CPU version run on every device: the probe scores in
// tests/unit/engine/compress/probe_scoring_test.cc, the top-p split in top_p_test.cc.)
#include "engine/ops/zipvl_cuda.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/ops/attention_sparse.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

std::vector<int32_t> RandomSortedSubset(int64_t n, int64_t m, std::mt19937_64& rng) {
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(std::min(n, m)));
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<int32_t> HostI32(const Tensor& t) {
  auto h = t.To(Device::Cpu());
  FZ_CHECK(h.ok());
  return std::vector<int32_t>(h->data<int32_t>(), h->data<int32_t>() + h->numel());
}

TEST_CASE("Sparse prefill on the GPU matches the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = 210, heads = 14, g = 2, d = GENERATE(64, 128);
  const auto q = MakeRandom({t, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({t, g, d}, DType::kF32, rng);
  const auto v = MakeRandom({t, g, d}, DType::kF32, rng);
  const std::vector<std::vector<int32_t>> important = {RandomSortedSubset(t, 77, rng)};
  Tensor want = MakeEmpty({t, heads, d});
  REQUIRE(ops::SparsePrefillAttention(q.tensor, k.tensor, v.tensor, {}, important, ops::RestRows{},
                                      want)
              .ok());
  const Tensor idx = OnGpu(MakeI32(important[0]));
  Tensor got = PoisonedGpu({t, heads, d});
  const auto st = ops::SparsePrefillCuda(OnGpu(q.tensor), OnGpu(k.tensor), OnGpu(v.tensor), idx,
                                         static_cast<int64_t>(important[0].size()), got);
  INFO(st.ToString());
  REQUIRE(st.ok());
  CheckClose(got, want, testing::Tolerance{2e-5, 1e-4});
}

TEST_CASE("ZipVL sparse prefill pipeline on the GPU wires its steps together", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = 400, heads = 14, g = 2, d = 64;
  const auto q = MakeRandom({t, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({t, g, d}, DType::kF32, rng);
  const auto v = MakeRandom({t, g, d}, DType::kF32, rng);
  auto probes = RandomSortedSubset(t - 64, 64, rng);
  for (int64_t i = t - 64; i < t; ++i) probes.push_back(static_cast<int32_t>(i));
  const Tensor gq = OnGpu(q.tensor), gk = OnGpu(k.tensor), gv = OnGpu(v.tensor);
  // The steps one by one, to learn the important set.
  Tensor a = OnGpu(MakeEmpty({1, t})), an = OnGpu(MakeEmpty({1, t}));
  Tensor counts = OnGpu(MakeEmpty({t}, DType::kI32)), idx = OnGpu(MakeEmpty({t}, DType::kI32));
  REQUIRE(ops::ProbeScoresCuda(gq, gk, probes, false, a, an, counts).ok());
  const auto p =
      ops::TopPCuda(Tensor::View(a.raw_data(), {t}, DType::kF32, a.device()),
                    Tensor::View(an.raw_data(), {t}, DType::kF32, an.device()), 0.975, idx);
  REQUIRE(p.ok());
  REQUIRE(*p > 0);
  REQUIRE(*p <= t);
  auto important = HostI32(idx);
  important.resize(static_cast<size_t>(*p));
  REQUIRE(std::is_sorted(important.begin(), important.end()));
  Tensor want = MakeEmpty({t, heads, d});
  REQUIRE(ops::SparsePrefillAttention(q.tensor, k.tensor, v.tensor, {},
                                      std::vector<std::vector<int32_t>>{important}, ops::RestRows{},
                                      want)
              .ok());
  Tensor got = PoisonedGpu({t, heads, d});
  const auto kept = ops::ZipvlSparsePrefillCuda(gq, gk, gv, probes, 0.975, got);
  INFO(kept.status().ToString());
  REQUIRE(kept.ok());
  CHECK(*kept == *p);
  CheckClose(got, want, testing::Tolerance{2e-5, 1e-4});
}

}  // namespace
}  // namespace framezip::engine::test
