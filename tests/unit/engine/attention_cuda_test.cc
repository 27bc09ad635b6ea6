// [cuda]: Attention on the GPU with bf16 tensor cores allowed
// (AttentionParams::allow_bf16_tensor_cores), by the kernel the op picks and by each of the two
// tensor-core kernels by name (the project's and FlashInfer's), against the CPU op to bf16 level.
// Not a device case:
// the CPU has no bf16 tensor-core kernel (it ignores the option and runs f32), so only the GPU
// has anything to check here. The CPU op it is compared with runs on every device against naive
// f64 attention, as does the f32 kernel: tests/unit/engine/ops/attention_test.cc.
#include <catch2/catch.hpp>
#include <utility>

#include "engine/kernels/cuda/flashinfer_prefill.cuh"
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

// q, k, v rounded to bf16 (2^-8 relative each) move each score by ~5e-3 for unit-variance inputs;
// P and V rounded to bf16 add 2^-8 each (FlashInfer's bf16 output another 2^-9). The first causal
// rows see 1-3 keys, so their output is about v itself (|v| up to ~4) with v's rounding, while
// most rows average many keys and the RMS is ~0.26: a numpy emulation of these roundings put the
// worst element at 0.02-0.05 of the RMS and the relative L2 at ~3e-3. Tolerance: 1e-1 of the RMS
// per element (as the whole-decoder test), 1.5e-2 in relative L2. A wrong row, head, mask or
// offset errs by the RMS itself.
constexpr RmsTolerance kBf16Kernels{1e-1, 1.5e-2};

// Both head dims, zero-padded ones (SigLIP's 72), GQA (Qwen2's group of 7 too), a chunk after
// earlier keys, bidirectional, partial tiles, and one with fewer queries than a tensor-core block
// (the f32 kernel where the choice is automatic, so f32 tolerance).
constexpr TensorCoreCase kCases[] = {
    {"causal prefill GQA 14/2 d64", 1, 200, 200, 14, 2, 64, true},
    {"causal chunk of 70 after 130 keys d128", 2, 70, 200, 4, 2, 128, true},
    {"causal GQA 28/4 d128", 1, 150, 150, 28, 4, 128, true},
    {"bidirectional 4/4 d128", 1, 130, 130, 4, 4, 128, false},
    {"bidirectional ViT d72 (zero-padded to 80)", 2, 100, 100, 3, 3, 72, false},
    {"causal d40 (zero-padded to 64)", 1, 90, 90, 4, 2, 40, true},
    {"19 queries: below one block", 1, 19, 70, 4, 2, 64, true},
};

TEST_CASE("Attention on the GPU with bf16 tensor cores allowed matches the CPU op to bf16 level",
          "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 1);
  for (const TensorCoreCase& c : kCases) {
    DYNAMIC_SECTION(c.name) {
      const auto [want, got] = RunOnBoth(c, {.allow_bf16_tensor_cores = true}, rng);
      if (c.tq < ops::kTensorCoreMinQueries) {
        CheckClose(got, want, kF32Kernel);
      } else {
        CheckWithinRms(got, want, kBf16Kernels);
      }
    }
  }
}

TEST_CASE("Attention on the GPU: the framezip and FlashInfer tensor-core kernels match the CPU op",
          "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 2);
  for (const ops::TensorCoreKernel kernel :
       {ops::TensorCoreKernel::kFramezip, ops::TensorCoreKernel::kFlashInfer}) {
    const bool flashinfer = kernel == ops::TensorCoreKernel::kFlashInfer;
    if (flashinfer && !cuda::FlashInferBuilt()) {
      WARN("SKIPPED the FlashInfer half: this build has no FlashInfer (FRAMEZIP_FLASHINFER)");
      continue;
    }
    for (const TensorCoreCase& c : kCases) {
      // FlashInfer takes head sizes 64 and 128 only: the others are refused, not padded.
      if (flashinfer && c.d != 64 && c.d != 128) continue;
      // Asked for by name, a tensor-core kernel runs below one block too (FlashInfer does; the
      // project's kernel leaves such calls to the f32 one).
      const bool f32 = !flashinfer && c.tq < ops::kTensorCoreMinQueries;
      DYNAMIC_SECTION((flashinfer ? "FlashInfer: " : "framezip: ") << c.name) {
        const auto [want, got] =
            RunOnBoth(c, {.allow_bf16_tensor_cores = true, .tensor_core_kernel = kernel}, rng);
        if (f32) {
          CheckClose(got, want, kF32Kernel);
        } else {
          CheckWithinRms(got, want, kBf16Kernels);
        }
      }
    }
  }
}

TEST_CASE("Attention on the GPU: FlashInfer where it does not apply is refused saying why",
          "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 3);
  const ops::AttentionParams flashinfer{.allow_bf16_tensor_cores = true,
                                        .tensor_core_kernel = ops::TensorCoreKernel::kFlashInfer};
  auto refusal = [&](int64_t tq, int64_t tk, int64_t d, ops::AttentionParams params) {
    const auto q = MakeRandom({1, tq, 4, d}, DType::kF32, rng);
    const auto k = MakeRandom({1, tk, 2, d}, DType::kF32, rng);
    Tensor out = PoisonedGpu(q.tensor.shape());
    const Tensor gk = OnGpu(k.tensor);
    return ops::Attention(OnGpu(q.tensor), gk, gk, params, out);
  };
  if (!cuda::FlashInferBuilt()) {
    const Status st = refusal(64, 64, 64, flashinfer);
    CHECK(st.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(st.ToString(), Catch::Contains("built without FlashInfer"));
    return;
  }
  const Status head = refusal(64, 64, 72, flashinfer);
  CHECK(head.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(head.ToString(), Catch::Contains("head_dim 64 or 128, not 72"));
  ops::AttentionParams shifted = flashinfer;
  shifted.causal = true;
  shifted.q_offset = 10;  // not Tk - Tq = 36
  const Status offset = refusal(64, 100, 64, shifted);
  CHECK(offset.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(offset.ToString(), Catch::Contains("not at q_offset 10"));
}

}  // namespace
}  // namespace framezip::engine::test
