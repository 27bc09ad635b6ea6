// [cuda]: Attention on the GPU with bf16 tensor cores allowed
// (AttentionParams::allow_bf16_tensor_cores) against the CPU op to bf16 level. Not a device case:
// the CPU has no bf16 tensor-core kernel (it ignores the option and runs f32), so only the GPU
// has anything to check here. The CPU op it is compared with runs on every device against naive
// f64 attention, as does the f32 kernel: tests/unit/engine/ops/attention_test.cc.
#include <catch2/catch.hpp>
#include <utility>

#include "engine/ops/attention.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

// Below one tensor-core block the f32 kernel runs: its tolerance (ops/attention_test.cc).
constexpr testing::Tolerance kF32Kernel{2e-5, 1e-4};

struct TensorCoreCase {
  const char* name;
  int64_t batch, tq, tk, heads, kv_heads, d;
  bool causal;
};

// The op on the CPU (first) and on the GPU (second) for fresh random q, k, v of case `c`; causal
// cases put the queries at the end of the keys.
std::pair<Tensor, Tensor> RunOnBoth(const TensorCoreCase& c, ops::AttentionParams params,
                                    std::mt19937_64& rng) {
  const auto q = MakeRandom({c.batch, c.tq, c.heads, c.d}, DType::kF32, rng);
  const auto k = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kF32, rng);
  const auto v = MakeRandom({c.batch, c.tk, c.kv_heads, c.d}, DType::kF32, rng);
  params.causal = c.causal;
  params.q_offset = c.causal ? c.tk - c.tq : 0;
  Tensor want = MakeEmpty(q.tensor.shape());
  REQUIRE(ops::Attention(q.tensor, k.tensor, v.tensor, params, want).ok());
  Tensor got = PoisonedGpu(q.tensor.shape());
  const auto st = ops::Attention(OnGpu(q.tensor), OnGpu(k.tensor), OnGpu(v.tensor), params, got);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return {std::move(want), std::move(got)};
}

TEST_CASE("Attention on the GPU with bf16 tensor cores allowed matches the CPU op to bf16 level",
          "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 1);
  // q, k, v rounded to bf16 (2^-8 relative each) move each score by ~5e-3 for unit-variance
  // inputs; P and V rounded to bf16 add 2^-8 each. The first causal rows see 1-3 keys, so their
  // output is about v itself (|v| up to ~4) with v's rounding, while most rows average many keys
  // and the RMS is ~0.26: a numpy emulation of these roundings put the worst element at 0.02-0.05
  // of the RMS and the relative L2 at ~3e-3. Tolerance: 1e-1 of the RMS per element (as the
  // whole-decoder test), 1.5e-2 in relative L2. A wrong row, head, mask or offset errs by the RMS
  // itself. The cases cover both head dims, zero-padded ones (SigLIP's 72), GQA, a chunk after
  // earlier keys, bidirectional, partial tiles, and one with fewer queries than a tensor-core block
  // (the f32 kernel, so f32 tolerance).
  const TensorCoreCase cases[] = {
      {"causal prefill GQA 14/2 d64", 1, 200, 200, 14, 2, 64, true},
      {"causal chunk of 70 after 130 keys d128", 2, 70, 200, 4, 2, 128, true},
      {"bidirectional 4/4 d128", 1, 130, 130, 4, 4, 128, false},
      {"bidirectional ViT d72 (zero-padded to 128)", 2, 100, 100, 3, 3, 72, false},
      {"causal d40 (zero-padded to 64)", 1, 90, 90, 4, 2, 40, true},
      {"19 queries: below one block, f32 kernel", 1, 19, 70, 4, 2, 64, true},
  };
  for (const TensorCoreCase& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto [want, got] = RunOnBoth(c, {.allow_bf16_tensor_cores = true}, rng);
      if (c.tq < ops::kTensorCoreMinQueries) {
        CheckClose(got, want, kF32Kernel);
      } else {
        CheckWithinRms(got, want, {1e-1, 1.5e-2});
      }
    }
  }
}

}  // namespace
}  // namespace framezip::engine::test
