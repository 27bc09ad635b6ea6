// [cuda]: Linear with FP8 E4M3 weights (ops/linear.h, linear_fp8_cuda.cc) against the f64 product
// of the same quantised operands, and the serving decoder with --weight-format fp8 against the
// bf16 one. GPU-only, not a device case: the CPU has no FP8 GEMM (it refuses, which
// tests/unit/engine/llm/fp8_weights_test.cc checks). Where the GPU lacks cuBLASLt's per-channel
// FP8 scales (before sm_90), each case says so and returns.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "engine/core/float8.h"
#include "engine/core/half.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/llm/quantized_projections.h"
#include "engine/ops/linear.h"
#include "engine/ops/quantize_fp8.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

// SkipWithoutGpu, and the same for a GPU without FP8 GEMMs (CTest counts both as skipped).
bool SkipWithoutFp8Gpu() {
  if (SkipWithoutGpu()) return true;
  if (ops::Fp8LinearAvailable(Device::Cuda(0))) return false;
  std::cout << "SKIPPED: no usable GPU for FP8 GEMMs with per-channel scales (they need sm_90)"
            << std::endl;
  return true;
}

// What the device does to a row of x (cuda::LaunchQuantizeRowsFp8), step by step in f32.
void QuantizeRowReference(const float* x, int64_t k, std::vector<double>& codes, double& scale) {
  float amax = 0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax > 0 ? 448.f / amax : 0.f;
  scale = amax / 448.f;
  codes.resize(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    codes[static_cast<size_t>(i)] = F8E4M3ToF32(F32ToF8E4M3(x[i] * inv));
}

TEST_CASE("FP8 Linear on the GPU equals the f64 product of its quantised operands", "[cuda][ops]") {
  if (SkipWithoutFp8Gpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  struct Shape3 {
    int64_t m, n, k;
  };
  const Shape3 s =
      GENERATE(Shape3{1, 64, 128}, Shape3{5, 96, 64}, Shape3{33, 256, 512}, Shape3{300, 160, 896});
  const bool with_bias = GENERATE(false, true);
  CAPTURE(s.m, s.n, s.k, with_bias);
  const RandomTensor w = MakeRandom({s.n, s.k}, DType::kBF16, rng, 0.05f);
  RandomTensor x = MakeRandom({s.m, s.k}, DType::kF32, rng);
  // Rows of x of different magnitudes, so that each row's scale matters.
  std::uniform_real_distribution<float> spread(0.05f, 20.f);
  for (int64_t r = 0; r < s.m; ++r) {
    const float f = spread(rng);
    for (int64_t i = 0; i < s.k; ++i) {
      const size_t at = static_cast<size_t>(r * s.k + i);
      x.tensor.data<float>()[at] *= f;
      x.values[at] = x.tensor.data<float>()[at];
    }
  }
  const RandomTensor bias = MakeRandom({s.n}, DType::kBF16, rng);
  const auto q = ops::QuantizeWeightFp8(w.tensor);
  FZ_REQUIRE_OK(q);
  Tensor y = PoisonedGpu({s.m, s.n});
  FZ_REQUIRE_OK(ops::Linear(OnGpu(x.tensor), OnGpu(q->q), OnGpu(q->scale),
                            with_bias ? OnGpu(bias.tensor) : Tensor(), y));
  const auto got = testing::ToFloatVector(*y.To(Device::Cpu()));

  std::vector<double> xq;
  double worst = 0, err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < s.m; ++r) {
    double x_scale = 0;
    QuantizeRowReference(x.tensor.data<float>() + r * s.k, s.k, xq, x_scale);
    for (int64_t j = 0; j < s.n; ++j) {
      const double w_scale = q->scale.data<float>()[j];
      double sum = 0, magnitude = 0, exact = 0;
      for (int64_t i = 0; i < s.k; ++i) {
        const double wq = F8E4M3ToF32(q->q.data<Float8E4M3>()[j * s.k + i]);
        sum += xq[static_cast<size_t>(i)] * wq;
        magnitude += std::abs(xq[static_cast<size_t>(i)] * wq);
        exact +=
            x.values[static_cast<size_t>(r * s.k + i)] * w.values[static_cast<size_t>(j * s.k + i)];
      }
      const double b = with_bias ? bias.values[static_cast<size_t>(j)] : 0.0;
      const double want = sum * x_scale * w_scale + b;
      const double g = got[static_cast<size_t>(r * s.n + j)];
      // Hopper's FP8 MMA sums a k-block in fewer than f32's bits before cuBLASLt promotes the
      // partial sums to f32: 2e-4 of the scaled magnitude allows that; one wrong code or scale
      // moves an output by ~1/k of it, 4e-3 or more here.
      const double bound = 2e-4 * magnitude * x_scale * w_scale + 1e-6 * std::abs(b) + 1e-30;
      CAPTURE(r, j, g, want, bound);
      REQUIRE(std::abs(g - want) <= bound);
      worst = std::max(worst, std::abs(g - want) / bound);
      err2 += (g - (exact + b)) * (g - (exact + b));
      ref2 += (exact + b) * (exact + b);
    }
  }
  // And the quantisation itself: E4M3's 3 mantissa bits on both sides, about 4 % each per
  // element, averaging to a few % of the output.
  const double relative = std::sqrt(err2 / ref2);
  CAPTURE(worst, relative);
  CHECK(relative <= 0.08);
}

TEST_CASE("FP8 Linear on the GPU takes an empty inner dimension and refuses misaligned ones",
          "[cuda][ops]") {
  if (SkipWithoutFp8Gpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  // in = 0: y is the bias on every row.
  const auto empty = ops::QuantizeWeightFp8(MakeEmpty({8, 0}));
  FZ_REQUIRE_OK(empty);
  const RandomTensor bias = MakeRandom({8}, DType::kF32, rng);
  Tensor y = PoisonedGpu({3, 8});
  FZ_REQUIRE_OK(ops::Linear(OnGpu(MakeEmpty({3, 0})), OnGpu(empty->q), OnGpu(empty->scale),
                            OnGpu(bias.tensor), y));
  const auto got = testing::ToFloatVector(*y.To(Device::Cpu()));
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == static_cast<float>(bias.values[i % 8]));
  // in = 24: not a multiple of 16, named instead of handed to cuBLASLt.
  const auto odd = ops::QuantizeWeightFp8(MakeRandom({8, 24}, DType::kF32, rng).tensor);
  FZ_REQUIRE_OK(odd);
  Tensor y2 = PoisonedGpu({2, 8});
  const Status refused = ops::Linear(OnGpu(MakeRandom({2, 24}, DType::kF32, rng).tensor),
                                     OnGpu(odd->q), OnGpu(odd->scale), Tensor(), y2);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.message()), Catch::Contains("in % 16"));
}

TEST_CASE("A decoder with FP8 projections on the GPU follows the bf16 decoder", "[cuda][llm]") {
  if (SkipWithoutFp8Gpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  // A small Qwen2-like shape whose every projection fits FP8 GEMMs (in % 16, out % 4).
  llm::DecoderShape shape;
  shape.hidden = 64;
  shape.layers = 3;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 16;
  shape.intermediate = 96;
  shape.vocab = 128;
  shape.qkv_bias = true;
  shape.rope.head_dim = 16;
  shape.rope.theta = 1e4;
  auto random = llm::MakeRandomDecoderWeights(
      shape, {.dtype = DType::kBF16, .seed = rng(), .stddev = 0.05f, .tied_lm_head = true});
  FZ_REQUIRE_OK(random);
  llm::DecoderWeights fp8 = random->weights;
  const auto kept = llm::QuantizeProjectionsFp8(fp8);
  FZ_REQUIRE_OK(kept);
  REQUIRE(kept->empty());
  auto bf16_dec = llm::Decoder::Create(shape, random->weights, Device::Cuda(0));
  auto fp8_dec = llm::Decoder::Create(shape, fp8, Device::Cuda(0));
  FZ_REQUIRE_OK(bf16_dec);
  FZ_REQUIRE_OK(fp8_dec);
  // Fused on the GPU, with the scales concatenated as the rows are.
  const llm::LayerWeights& L = (*fp8_dec)->weights().layers[0];
  REQUIRE(L.qkv_proj.dtype() == DType::kF8E4M3);
  REQUIRE(L.qkv_scale.shape() == Shape{L.qkv_proj.dim(0)});
  REQUIRE(L.gate_up_proj.dtype() == DType::kF8E4M3);
  REQUIRE((*fp8_dec)->weights().lm_head.dtype() == DType::kF8E4M3);

  std::vector<int32_t> ids(29);
  std::uniform_int_distribution<int32_t> token(0, 127);
  for (int32_t& id : ids) id = token(rng);
  std::vector<std::vector<float>> logits;
  for (auto* dec : {&*bf16_dec, &*fp8_dec}) {
    llm::Decoder& d = **dec;
    const kv::KvFormat format = kv::KvFormat::kF16;
    auto pools = kv::KvPools::Create(d.KvLayout(format, 8), {&format, 1}, int64_t{64} << 20,
                                     Device::Cuda(0));
    FZ_REQUIRE_OK(pools);
    auto seq = d.NewSequence(**pools, format, "none");
    FZ_REQUIRE_OK(seq);
    auto out = d.Prefill(**seq, *d.Embed(ids), llm::PrefillOptions{.all_logits = true});
    FZ_REQUIRE_OK(out);
    logits.push_back(testing::ToFloatVector(*out->To(Device::Cpu())));
    // Decode steps run the few-row GEMMs.
    llm::Sequence* one[] = {seq->get()};
    for (int step = 0; step < 3; ++step) {
      const int32_t next[] = {ids[static_cast<size_t>(step)]};
      auto row = d.DecodeStep(one, next);
      FZ_REQUIRE_OK(row);
      const auto v = testing::ToFloatVector(*row->To(Device::Cpu()));
      logits.back().insert(logits.back().end(), v.begin(), v.end());
    }
  }
  // E4M3 rounds weights and activations to 3 mantissa bits (about 4 % per element); through three
  // layers the logits stay within a few % of bf16's. A wrong scale or layout gives O(1).
  const double relative = RelativeL2(logits[1], logits[0]);
  CAPTURE(relative);
  CHECK(relative <= 0.15);
  CHECK(relative > 0);  // the FP8 path ran: its rounding shows
}

}  // namespace
}  // namespace framezip::engine::test
