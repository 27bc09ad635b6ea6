// [cuda]: the tensor-core prefill attention (kernels/cuda/attention_mma.cuh) against the CPU
// Attention op on the same bf16-rounded inputs: causal prefill with GQA, a causal chunk after
// earlier keys, bidirectional, head dims 64 and 128, lengths that leave partial tiles. The GPU
// rounds P to f16 (relative 2^-11) and accumulates in f32: abs 1e-3 + rel 4e-3 on outputs of
// order 1, plus a relative L2 error under 2e-3; the pipelined variant (cp.async, ldmatrix, bf16
// P) gets four times that.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/kernels/cuda/attention_mma.cuh"
#include "engine/ops/attention.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

struct Case {
  const char* name;
  int64_t batch, tq, tk, heads, kv_heads, d;
  bool causal;
};

// The bf16 tensor's values as an f32 tensor (what the CPU reference computes on).
Tensor AsF32(const RandomTensor& r) {
  Tensor t = MakeEmpty(r.tensor.shape());
  for (size_t i = 0; i < r.values.size(); ++i) t.data<float>()[i] = static_cast<float>(r.values[i]);
  return t;
}

TEST_CASE("Tensor-core prefill attention matches the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const Case cases[] = {
      {"causal prefill GQA 14/2 d64, 300 tokens", 1, 300, 300, 14, 2, 64, true},
      {"causal chunk of 70 after 130 keys d128", 2, 70, 200, 4, 2, 128, true},
      {"bidirectional 4/4 d128, 130 tokens", 1, 130, 130, 4, 4, 128, false},
      {"causal 8/1 d64, 33 tokens", 1, 33, 33, 8, 1, 64, true},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto q = MakeRandom({c.batch, c.tq, c.heads, c.d}, DType::kBF16, rng);
      const auto k = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kBF16, rng);
      const auto v = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kBF16, rng);
      ops::AttentionParams params;
      params.causal = c.causal;
      params.q_offset = c.causal ? c.tk - c.tq : 0;
      Tensor want = MakeEmpty({c.batch, c.tq, c.heads, c.d});
      REQUIRE(ops::Attention(AsF32(q), AsF32(k), AsF32(v), params, want).ok());

      const Tensor gq = OnGpu(q.tensor), gk = OnGpu(k.tensor), gv = OnGpu(v.tensor);
      for (const bool pipelined : {false, true}) {
        INFO((pipelined ? "pipelined variant (bf16 P)" : "default variant (f16 P)"));
        Tensor got = PoisonedGpu({c.batch, c.tq, c.heads, c.d});
        cuda::AttentionMmaParams p;
        p.q = gq.raw_data();
        p.k = gk.raw_data();
        p.v = gv.raw_data();
        p.out = static_cast<float*>(got.raw_data());
        p.batch = c.batch;
        p.tq = c.tq;
        p.tk = c.tk;
        p.heads = static_cast<int>(c.heads);
        p.kv_heads = static_cast<int>(c.kv_heads);
        p.head_dim = static_cast<int>(c.d);
        p.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
        p.causal = c.causal;
        p.q_offset = params.q_offset;
        p.pipelined = pipelined;
        REQUIRE(cuda::LaunchAttentionMma(p, nullptr) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        // bf16 P rounds at 2^-9 relative, f16 P at 2^-11: four times the tolerance.
        const double loose = pipelined ? 4.0 : 1.0;
        CheckClose(got, want, testing::Tolerance{1e-3 * loose, 4e-3 * loose});
        const double rel = RelativeL2(testing::ToFloatVector(got), testing::ToFloatVector(want));
        INFO("relative L2 error " << rel);
        CHECK(rel < 2e-3 * loose);
      }
    }
  }
}

}  // namespace
}  // namespace framezip::engine::test
