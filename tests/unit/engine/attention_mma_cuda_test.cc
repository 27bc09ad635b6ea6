// [cuda]: the tensor-core prefill attention (kernels/cuda/attention_mma.cuh), launched directly,
// against the CPU Attention op (itself checked against naive f64 attention on every device:
// tests/unit/engine/ops/attention_test.cc) on the same bf16-rounded inputs. Not a device case: the
// kernel and its two variants exist only on the GPU. The cases: causal prefill with GQA, a causal
// chunk after earlier keys, bidirectional, head dims 64, 80 and 128, lengths that leave partial
// tiles, and values beyond f16's range (bf16 activations reach them). Both variants (the pipelined
// one adds cp.async and ldmatrix) round P to bf16 for P·V, as FlashAttention-2 does for bf16
// inputs, and accumulate in f32. That rounding is at most 2^-8 relative per weight; with one
// dominant key the output inherits it whole (3.9e-3 · |v|), otherwise it averages out. Tolerance,
// in units of the values' scale: abs 4e-3 + rel 1.6e-2, and a relative L2 error under 8e-3 (about
// 3x the RMS rounding error u/sqrt(3) of a single dominant key).
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
  float v_scale = 1.f;  // the values' standard deviation
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
      // 80: SigLIP's 72 padded to the next k-step; an odd number of k-steps (5).
      {"bidirectional ViT 3/3 d80, 200 tokens", 2, 200, 200, 3, 3, 80, false},
      {"causal 8/2 d80, 97 tokens", 1, 97, 97, 8, 2, 80, true},
      {"causal 8/1 d64, 33 tokens", 1, 33, 33, 8, 1, 64, true},
      // 2^17: most |v| above f16's largest finite 65504, where an f16 copy of V would be inf.
      {"causal 4/2 d128, 100 tokens, values beyond f16's range", 1, 100, 100, 4, 2, 128, true,
       131072.f},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto q = MakeRandom({c.batch, c.tq, c.heads, c.d}, DType::kBF16, rng);
      const auto k = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kBF16, rng);
      const auto v = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kBF16, rng, c.v_scale);
      ops::AttentionParams params;
      params.causal = c.causal;
      params.q_offset = c.causal ? c.tk - c.tq : 0;
      Tensor want = MakeEmpty({c.batch, c.tq, c.heads, c.d});
      REQUIRE(ops::Attention(AsF32(q), AsF32(k), AsF32(v), params, want).ok());

      const Tensor gq = OnGpu(q.tensor), gk = OnGpu(k.tensor), gv = OnGpu(v.tensor);
      for (const bool pipelined : {false, true}) {
        INFO((pipelined ? "pipelined variant" : "default variant"));
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
        CheckClose(got, want, testing::Tolerance{4e-3 * c.v_scale, 1.6e-2});
        const double rel = RelativeL2(testing::ToFloatVector(got), testing::ToFloatVector(want));
        INFO("relative L2 error " << rel);
        CHECK(rel < 8e-3);
      }
    }
  }
}

}  // namespace
}  // namespace framezip::engine::test
