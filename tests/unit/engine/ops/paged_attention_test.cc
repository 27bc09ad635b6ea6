// PagedDecodeAttention on every device present against f64 attention over what the pages hold
// (tests/unit/engine/ops/device_cases.h): every page format (f32, f16, KIVI int4/int2 written by
// the CPU quantiser) and mixed page tables, ragged sequences, partly filled and empty spans, an
// empty sequence, GQA with up to 16 query heads per KV head, head_dim 64 and 128, and a long
// sequence (many split-K work items on a GPU). The reference reads the stored values (f16 and the
// dequantised codes exactly as kv_quant.h reconstructs them), so only f32 compute is left: the
// devices differ from it in summation order, the folding of key scales into the query and exp
// ulps: 2e-5 abs + 1e-4 rel on outputs of order 1.
// (The GPU's kernel variants called directly, tensor cores included: paged_attention_cuda_test.cc;
// the CPU op over SequenceKv's pages: tests/unit/engine/llm/paged_attention_test.cc.)
#include "engine/ops/paged_attention.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "tests/unit/engine/ops/device_cases.h"
#include "tests/unit/engine/ops/kv_span_arena.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kDecode{2e-5, 1e-4};

// out[b, h] = softmax(q[b, h] · K_bᵀ / sqrt(d)) V_b over sequence b's spans, in f64 (zeros for a
// sequence without tokens); lse (when given) [b, h] = ln Σ_t e^(q·k_t / sqrt(d)) (−inf without
// tokens).
std::vector<double> Reference(const PagedCase& c, const std::vector<double>& q,
                              const SpanArena& arena, const std::vector<int32_t>& offsets,
                              std::vector<double>* lse = nullptr) {
  const int64_t H = c.heads, G = c.kv_heads, d = c.d;
  const int64_t batch = static_cast<int64_t>(c.seq_spans.size());
  std::vector<double> out(static_cast<size_t>(batch * H * d), 0.0);
  if (lse != nullptr) lse->assign(static_cast<size_t>(batch * H), -INFINITY);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      std::vector<double> scores;
      std::vector<const double*> value_rows;
      for (int32_t s = offsets[b]; s < offsets[b + 1]; ++s) {
        const auto& keys = arena.keys(static_cast<size_t>(s));
        const auto& values = arena.values(static_cast<size_t>(s));
        for (size_t t = 0; t < keys.size() / static_cast<size_t>(G * d); ++t) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += q[(b * H + h) * d + e] * keys[(t * G + g) * d + e];
          }
          scores.push_back(dot / std::sqrt(static_cast<double>(d)));
          value_rows.push_back(values.data() + (t * G + g) * d);
        }
      }
      if (scores.empty()) continue;
      double mx = -INFINITY, sum = 0;
      for (double x : scores) mx = std::max(mx, x);
      for (double& x : scores) sum += (x = std::exp(x - mx));
      if (lse != nullptr) (*lse)[static_cast<size_t>(b * H + h)] = mx + std::log(sum);
      for (size_t j = 0; j < scores.size(); ++j) {
        for (int64_t e = 0; e < d; ++e)
          out[(b * H + h) * d + e] += scores[j] / sum * value_rows[j][e];
      }
    }
  }
  return out;
}

// With the log-sum-exp too (what a caller merges the pages' share with: AttentionPack's blocks):
// scores are of order |q||k|/sqrt(d) ~ a few units, so f32's exp and log leave ~1e-6; a sequence
// without tokens gets −inf, checked exactly.
TEST_CASE("Paged decode attention matches f64 over every page format on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  for (const PagedCase& c : PagedDecodeCases()) {
    DYNAMIC_SECTION(c.name) {
      SpanArena arena;
      const std::vector<int32_t> offsets = FillArena(c, arena, rng);
      const int64_t batch = static_cast<int64_t>(c.seq_spans.size());
      const auto q = MakeRandom({batch, c.heads, c.d}, DType::kF32, rng);
      std::vector<double> want_lse;
      const auto want = Reference(c, q.values, arena, offsets, &want_lse);
      ForEachDevice([&](const Device& device) {
        const std::vector<ops::KvSpan> spans = arena.Spans(device);
        const ops::PagedKv kv{spans, offsets, static_cast<int>(c.kv_heads), static_cast<int>(c.d)};
        for (const bool with_lse : {false, true}) {
          INFO((with_lse ? "with" : "without") << " the log-sum-exp");
          Tensor out = PoisonedOn({batch, c.heads, c.d}, device);
          Tensor lse = PoisonedOn({batch, c.heads}, device);
          const Status st = ops::PagedDecodeAttention(On(q.tensor, device), kv, out, 0,
                                                      with_lse ? &lse : nullptr);
          INFO(st.ToString());
          REQUIRE(st.ok());
          CheckCloseTo(out, want, kDecode);
          if (!with_lse) continue;
          const Tensor host_lse = lse.To(Device::Cpu()).value();
          for (size_t i = 0; i < want_lse.size(); ++i) {
            const double got = host_lse.data<float>()[i];
            INFO("row " << i << ": lse " << got << ", want " << want_lse[i]);
            if (std::isinf(want_lse[i])) {
              CHECK(got == want_lse[i]);
            } else {
              CHECK(std::abs(got - want_lse[i]) <= 2e-5 + 1e-5 * std::abs(want_lse[i]));
            }
          }
        }
      });
    }
  }
}

TEST_CASE("Paged decode attention refuses a log-sum-exp of the wrong shape",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const PagedCase c = PagedDecodeCases().front();
  SpanArena arena;
  const std::vector<int32_t> offsets = FillArena(c, arena, rng);
  const int64_t batch = static_cast<int64_t>(c.seq_spans.size());
  const auto q = MakeRandom({batch, c.heads, c.d}, DType::kF32, rng);
  Tensor out = MakeEmpty({batch, c.heads, c.d});
  Tensor lse = MakeEmpty({batch, c.heads + 1});
  const std::vector<ops::KvSpan> spans = arena.Spans(Device::Cpu());
  const ops::PagedKv kv{spans, offsets, static_cast<int>(c.kv_heads), static_cast<int>(c.d)};
  const Status st = ops::PagedDecodeAttention(q.tensor, kv, out, 0, &lse);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("lse"));
}

// The same cases through a plan (what a step plan does for every layer): the descriptors built
// into a host arena, the arena copied to the device as one block, the attention read from it.
TEST_CASE("Planned paged decode attention matches f64 over every page format on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  for (const PagedCase& c : PagedDecodeCases()) {
    DYNAMIC_SECTION(c.name) {
      SpanArena arena;
      const std::vector<int32_t> offsets = FillArena(c, arena, rng);
      const int64_t batch = static_cast<int64_t>(c.seq_spans.size());
      const auto q = MakeRandom({batch, c.heads, c.d}, DType::kF32, rng);
      const auto want = Reference(c, q.values, arena, offsets);
      ForEachDevice([&](const Device& device) {
        const std::vector<ops::KvSpan> spans = arena.Spans(device);
        const ops::PagedKv kv{spans, offsets, static_cast<int>(c.kv_heads), static_cast<int>(c.d)};
        // Something before the plan in the arena, as a step plan's positions and ids are.
        std::vector<std::byte> host(40, std::byte{0x5a});
        const StatusOr<ops::PagedDecodePlan> plan = ops::PlanPagedDecode(device, kv, c.heads, host);
        INFO(plan.status().ToString());
        REQUIRE(plan.ok());
        CHECK(plan->offset % 256 == 0);
        // The workspace after the arena, as a step plan lays them out.
        const size_t workspace_at = (host.size() + 255) / 256 * 256;
        const Tensor on_device = *Tensor::Empty(
            {static_cast<int64_t>(workspace_at + plan->workspace_floats * sizeof(float))},
            DType::kU8, device);
        REQUIRE(CopyBytes(on_device.raw_data(), device, host.data(), Device::Cpu(), host.size())
                    .ok());
        auto* base = static_cast<std::byte*>(on_device.raw_data());
        float* workspace = plan->workspace_floats > 0
                               ? reinterpret_cast<float*>(base + workspace_at)
                               : nullptr;
        Tensor out = PoisonedOn({batch, c.heads, c.d}, device);
        const Status st =
            ops::PagedDecodeAttentionPlanned(On(q.tensor, device), *plan, base, workspace, out);
        INFO(st.ToString());
        REQUIRE(st.ok());
        CheckCloseTo(out, want, kDecode);
      });
    }
  }
}

}  // namespace
}  // namespace framezip::engine::test
