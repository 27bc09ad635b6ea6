// Attention on every device present against naive f64 attention
// (tests/unit/engine/ops/device_cases.h): causal prefill (whole and as a later chunk), one query,
// bidirectional (ViT), GQA and MHA, per-query key prefixes, head dims 8 to 128. Every device runs
// an f32 online softmax over key blocks; they differ from f64 in exp ulps and summation order.
// Outputs are convex combinations of v (|out| of order 1): 2e-5 abs + 1e-4 rel.
// (The GPU's opt-in bf16 tensor-core kernel is GPU-only: attention_cuda_test.cc.)
#include "engine/ops/attention.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kAttention{2e-5, 1e-4};

struct Case {
  const char* name;
  int64_t batch, tq, tk, heads, kv_heads, d;
  bool causal;
  bool key_limit;
};

// q [B, Tq, H, d], k/v [B, Tk, G, d]. Query i sees key j when j < limit[i] (a prefix mask), else
// when causal and j <= i + Tk − Tq, else always.
std::vector<double> NaiveAttention(const Case& c, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<int32_t>* limit) {
  const int64_t B = c.batch, tq = c.tq, tk = c.tk, H = c.heads, G = c.kv_heads, d = c.d;
  std::vector<double> out(static_cast<size_t>(B * tq * H * d), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> s(static_cast<size_t>(tk), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < tk; ++j) {
          const bool visible = limit ? j < (*limit)[i] : !c.causal || j <= i + tk - tq;
          if (!visible) continue;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += q[((b * tq + i) * H + h) * d + e] * k[((b * tk + j) * G + g) * d + e];
          }
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < tk; ++j) sum += std::isinf(s[j]) ? 0 : std::exp(s[j] - mx);
        for (int64_t j = 0; j < tk; ++j) {
          if (std::isinf(s[j])) continue;
          const double p = std::exp(s[j] - mx) / sum;
          for (int64_t e = 0; e < d; ++e) {
            out[((b * tq + i) * H + h) * d + e] += p * v[((b * tk + j) * G + g) * d + e];
          }
        }
      }
    }
  }
  return out;
}

TEST_CASE("Attention matches naive f64 attention on every device", "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const Case c =
      GENERATE(Case{"causal prefill, several blocks, GQA 4/2", 1, 150, 150, 4, 2, 32, true, false},
               Case{"causal chunk after 230 keys", 1, 70, 300, 6, 2, 64, true, false},
               Case{"causal GQA 14/2 (Qwen2-0.5B heads)", 1, 77, 77, 14, 2, 64, true, false},
               Case{"causal chunk, d128, two sequences", 2, 19, 70, 4, 2, 128, true, false},
               Case{"one query", 2, 1, 17, 2, 1, 16, true, false},
               Case{"bidirectional ViT, MHA, d72", 2, 200, 200, 3, 3, 72, false, false},
               Case{"bidirectional, d8", 1, 5, 260, 4, 4, 8, false, false},
               Case{"key prefixes", 1, 40, 90, 4, 1, 64, false, true});
  CAPTURE(c.name);
  const auto q = MakeRandom({c.batch, c.tq, c.heads, c.d}, DType::kF32, rng);
  const auto k = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kF32, rng);
  const auto v = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kF32, rng);
  std::vector<int32_t> limits(static_cast<size_t>(c.tq));
  ops::AttentionParams params{.causal = c.causal, .q_offset = c.causal ? c.tk - c.tq : 0};
  if (c.key_limit) {
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(c.tk) + 5);
    for (auto& x : limits) x = dist(rng);
    limits[0] = 0;  // a query that sees no key: zeros
    params.key_limit = limits.data();
  }
  const auto want =
      NaiveAttention(c, q.values, k.values, v.values, c.key_limit ? &limits : nullptr);
  ForEachDevice([&](const Device& device) {
    Tensor out = PoisonedOn(q.tensor.shape(), device);
    const Status st = ops::Attention(On(q.tensor, device), On(k.tensor, device),
                                     On(v.tensor, device), params, out);
    INFO(st.ToString());
    REQUIRE(st.ok());
    CheckCloseTo(out, want, kAttention);
  });
}

TEST_CASE("Attention refuses head counts that do not group, on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    const Tensor q = PoisonedOn({1, 4, 6, 8}, device), k = PoisonedOn({1, 4, 4, 8}, device);
    Tensor out = PoisonedOn({1, 4, 6, 8}, device);
    CHECK(ops::BidirectionalAttention(q, k, k, out).code() == absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace framezip::engine::test
