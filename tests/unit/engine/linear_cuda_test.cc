// [cuda]: Linear and MatMul through cuBLAS against the CPU ops, on fresh random inputs.
//
// Tolerances, relative to the output's RMS (outputs are sums over K, so their scale is set by
// the data, not by 1):
//   f32 weights:  full-f32 GEMM (no TF32), only summation order differs: 1e-4 · RMS per element,
//                 3e-5 in L2 (rounding alone gives ~1e-6; a TF32 GEMM would give ~1e-3).
//   bf16 weights: x is rounded to bf16 on the GPU (≤ 2^-9 relative per product, the CPU keeps
//                 f32 x), an error of ~1e-3 · RMS per output: 2e-2 · RMS per element, 5e-3 in L2.
//   f16 weights:  the same with 2^-11: 5e-3 · RMS per element, 1.5e-3 in L2.
#include <catch2/catch.hpp>

#include "engine/ops/linear.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

RmsTolerance ForWeights(DType t) {
  switch (t) {
    case DType::kBF16:
      return {2e-2, 5e-3};
    case DType::kF16:
      return {5e-3, 1.5e-3};
    default:
      return {1e-4, 3e-5};
  }
}

void CheckGemm(const Tensor& got_gpu, const Tensor& want, DType weight_dtype) {
  CheckWithinRms(got_gpu, want, ForWeights(weight_dtype));
}

TEST_CASE("Linear on the GPU matches the CPU op for f32 bf16 and f16 weights", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t k = 320, n = 200;
  // Decode-sized (1, 3 rows), prefill-sized (74 rows, batched leading dims) and one K not a
  // multiple of 8 (odd leading dimensions for cuBLAS).
  const std::vector<Shape> x_shapes = {{1, k}, {3, k}, {2, 37, k}};
  for (DType wt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& xs : x_shapes) {
      for (bool with_bias : {false, true}) {
        DYNAMIC_SECTION(DTypeName(wt) << " x" << ShapeString(xs) << (with_bias ? " +bias" : "")) {
          const auto x = MakeRandom(xs, DType::kF32, rng);
          const auto w = MakeRandom({n, k}, wt, rng, 0.05f);
          const Tensor bias = with_bias ? MakeRandom({n}, wt, rng).tensor : Tensor();
          Shape ys = xs;
          ys.back() = n;
          Tensor want = MakeEmpty(ys);
          REQUIRE(ops::Linear(x.tensor, w.tensor, bias, want).ok());
          Tensor got = PoisonedGpu(ys);
          const auto st = ops::Linear(OnGpu(x.tensor), OnGpu(w.tensor),
                                      with_bias ? OnGpu(bias) : Tensor(), got);
          INFO(st.ToString());
          REQUIRE(st.ok());
          CheckGemm(got, want, wt);
        }
      }
    }
  }
}

TEST_CASE("Linear on the GPU handles an odd K and a single output", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 1);
  for (DType wt : {DType::kF32, DType::kBF16}) {
    const auto x = MakeRandom({5, 37}, DType::kF32, rng);
    const auto w = MakeRandom({1, 37}, wt, rng, 0.2f);
    Tensor want = MakeEmpty({5, 1});
    REQUIRE(ops::Linear(x.tensor, w.tensor, Tensor(), want).ok());
    Tensor got = PoisonedGpu({5, 1});
    REQUIRE(ops::Linear(OnGpu(x.tensor), OnGpu(w.tensor), Tensor(), got).ok());
    CheckGemm(got, want, wt);
  }
}

TEST_CASE("MatMul on the GPU matches the CPU op with and without transposed b", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 2);
  const int64_t m = 45, k = 130, n = 67;
  for (bool transpose_b : {false, true}) {
    const auto a = MakeRandom({m, k}, DType::kF32, rng);
    const auto b = MakeRandom(transpose_b ? Shape{n, k} : Shape{k, n}, DType::kF32, rng);
    Tensor want = MakeEmpty({m, n});
    REQUIRE(ops::MatMul(a.tensor, b.tensor, transpose_b, want).ok());
    Tensor got = PoisonedGpu({m, n});
    REQUIRE(ops::MatMul(OnGpu(a.tensor), OnGpu(b.tensor), transpose_b, got).ok());
    CheckGemm(got, want, DType::kF32);
  }
}

TEST_CASE("Batched MatMul on the GPU matches the CPU op for f32 and 16-bit operands",
          "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 4);
  const int64_t batch = 5, m = 33, k = 70, n = 41;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool transpose_b : {false, true}) {
      for (bool shared_b : {false, true}) {
        DYNAMIC_SECTION(DTypeName(dtype)
                        << (transpose_b ? " bT" : " b") << (shared_b ? " shared" : " batched")) {
          const auto a = MakeRandom({batch, m, k}, dtype, rng);
          const Shape mat = transpose_b ? Shape{n, k} : Shape{k, n};
          const auto b = MakeRandom(shared_b ? mat : Shape{batch, mat[0], mat[1]}, dtype, rng);
          Tensor want = MakeEmpty({batch, m, n});
          REQUIRE(ops::MatMul(a.tensor, b.tensor, transpose_b, want).ok());
          Tensor got = PoisonedGpu({batch, m, n});
          REQUIRE(ops::MatMul(OnGpu(a.tensor), OnGpu(b.tensor), transpose_b, got).ok());
          // 16-bit operands: exact products on both sides and f32 sums in another order; the
          // tensor cores' internal accumulation is not specified to be IEEE f32, so 16-bit
          // operands get Linear's 16-bit tolerance rather than the f32 one.
          CheckGemm(got, want, dtype);
        }
      }
    }
  }
}

TEST_CASE("Linear refuses tensors split between the CPU and the GPU", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 3);
  const auto x = MakeRandom({2, 8}, DType::kF32, rng);
  const auto w = MakeRandom({4, 8}, DType::kF32, rng);
  Tensor y = PoisonedGpu({2, 4});
  const auto st = ops::Linear(x.tensor, OnGpu(w.tensor), Tensor(), y);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::test
