// [cuda]: the decoder's and vision tower's element-wise and row ops (norms, RoPE, resize, SwiGLU,
// GELU, QuickGELU, softmax, embedding) on the GPU against the CPU ops, on fresh random inputs.
// All are f32 arithmetic on both sides, so tolerances are f32 rounding (STYLE.md §4.6: abs 1e-5),
// plus 1e-5 relative for outputs well above 1 (SwiGLU products, RoPE of large inputs);
// exp/erf/tanh differ by a few ulp between CUDA and glibc (and the CPU softmax's AVX2 exp).
#include <catch2/catch.hpp>
#include <cstring>

#include "engine/ops/activation.h"
#include "engine/ops/bilinear_resize.h"
#include "engine/ops/embedding.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/quick_gelu.h"
#include "engine/ops/rms_norm.h"
#include "engine/ops/rope.h"
#include "engine/ops/softmax.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kF32Ops{1e-5, 1e-5};

TEST_CASE("RmsNorm AddRmsNorm and LayerNorm on the GPU match the CPU ops", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  // 896: Qwen2-0.5B's hidden size; 1000: not a multiple of the block; 64: less than one block.
  for (int64_t d : {896, 1000, 64}) {
    for (DType wt : {DType::kF32, DType::kBF16, DType::kF16}) {
      DYNAMIC_SECTION("d=" << d << " weight " << DTypeName(wt)) {
        const auto x = MakeRandom({7, d}, DType::kF32, rng, 3.f);
        const auto w = MakeRandom({d}, wt, rng);
        const auto beta = MakeRandom({d}, wt, rng);
        Tensor want = MakeEmpty({7, d});
        REQUIRE(ops::RmsNorm(x.tensor, w.tensor, 1e-6f, want).ok());
        Tensor got = PoisonedGpu({7, d});
        REQUIRE(ops::RmsNorm(OnGpu(x.tensor), OnGpu(w.tensor), 1e-6f, got).ok());
        CheckClose(got, want, kF32Ops);

        // In place, as the decoder calls it.
        Tensor inplace = OnGpu(x.tensor);
        REQUIRE(ops::RmsNorm(inplace, OnGpu(w.tensor), 1e-6f, inplace).ok());
        CheckClose(inplace, want, kF32Ops);

        // Fused with the residual add, the output over the addend as llm::Decoder calls it.
        const auto add = MakeRandom({7, d}, DType::kF32, rng, 3.f);
        Tensor residual_want = *x.tensor.To(Device::Cpu());
        Tensor fused_want = MakeEmpty({7, d});
        REQUIRE(ops::AddRmsNorm(residual_want, add.tensor, w.tensor, 1e-6f, fused_want).ok());
        Tensor residual = OnGpu(x.tensor);
        Tensor fused = OnGpu(add.tensor);
        REQUIRE(ops::AddRmsNorm(residual, fused, OnGpu(w.tensor), 1e-6f, fused).ok());
        CheckClose(residual, residual_want, {0.0, 0.0});  // one f32 add on both sides
        CheckClose(fused, fused_want, kF32Ops);

        for (bool with_beta : {false, true}) {
          const Tensor b = with_beta ? beta.tensor : Tensor();
          REQUIRE(ops::LayerNorm(x.tensor, w.tensor, b, 1e-5f, want).ok());
          Tensor got_ln = PoisonedGpu({7, d});
          REQUIRE(ops::LayerNorm(OnGpu(x.tensor), OnGpu(w.tensor), with_beta ? OnGpu(b) : Tensor(),
                                 1e-5f, got_ln)
                      .ok());
          CheckClose(got_ln, want, kF32Ops);
        }
      }
    }
  }
}

TEST_CASE("ApplyRope on the GPU matches the CPU op (Qwen2 and llama3 frequencies)", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 1);
  std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
  for (int head_dim : {64, 128}) {
    for (bool llama3 : {false, true}) {
      DYNAMIC_SECTION("head_dim " << head_dim << (llama3 ? " llama3" : " default")) {
        ops::RopeParams params;
        params.head_dim = head_dim;
        params.theta = llama3 ? 500000 : 1000000;
        if (llama3) params.llama3_factor = 8;
        const int64_t tokens = 33, heads = 14;
        const auto x = MakeRandom({tokens, heads, head_dim}, DType::kF32, rng, 2.f);
        std::vector<int32_t> pos(tokens);
        for (auto& p : pos) p = pos_dist(rng);
        pos[0] = 0;
        const Tensor positions = MakeI32(pos);
        Tensor want = MakeEmpty(x.tensor.shape());
        std::copy_n(x.tensor.data<float>(), x.tensor.numel(), want.data<float>());
        REQUIRE(ops::ApplyRope(want, positions, params).ok());
        Tensor got = OnGpu(x.tensor);
        REQUIRE(ops::ApplyRope(got, OnGpu(positions), params).ok());
        CheckClose(got, want, kF32Ops);
      }
    }
  }
}

TEST_CASE("BilinearResize on the GPU matches the CPU op bit for bit", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  // 27x27 -> 14x14: LLaVA-OneVision's 2x2 video pooling; 4x4 -> 2x2: framezip-tiny-video's;
  // 5x7 -> 9x3: an upscale on one axis and a downscale on the other.
  struct Sizes {
    int64_t h_in, w_in, h_out, w_out;
  };
  for (const Sizes z : {Sizes{27, 27, 14, 14}, Sizes{4, 4, 2, 2}, Sizes{5, 7, 9, 3}}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (ops::ImageLayout layout :
           {ops::ImageLayout::kChannelsFirst, ops::ImageLayout::kChannelsLast}) {
        const bool first = layout == ops::ImageLayout::kChannelsFirst;
        DYNAMIC_SECTION(z.h_in << "x" << z.w_in << " -> " << z.h_out << "x" << z.w_out << " "
                               << DTypeName(dt) << (first ? " NCHW" : " NHWC")) {
          const int64_t n = 3, c = 5;
          const Shape in_shape = first ? Shape{n, c, z.h_in, z.w_in} : Shape{n, z.h_in, z.w_in, c};
          const Shape out_shape =
              first ? Shape{n, c, z.h_out, z.w_out} : Shape{n, z.h_out, z.w_out, c};
          const auto x = MakeRandom(in_shape, dt, rng, 2.f);
          Tensor want = MakeEmpty(out_shape, dt);
          REQUIRE(ops::BilinearResize(x.tensor, want, layout).ok());
          auto host_nan = Tensor::Empty(out_shape, dt);
          REQUIRE(host_nan.ok());
          std::memset(host_nan->raw_data(), 0xff, host_nan->nbytes());  // NaN in every float kind
          Tensor got = OnGpu(*host_nan);
          REQUIRE(ops::BilinearResize(OnGpu(x.tensor), got, layout).ok());
          // Same taps, same uncontracted multiply-adds, same rounding: exactly equal.
          CheckClose(got, want, testing::Tolerance{0.0, 0.0});
        }
      }
    }
  }
}

TEST_CASE("ApplyRope on the GPU rejects a negative position", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 2);
  ops::RopeParams params;
  params.head_dim = 8;
  Tensor x = OnGpu(MakeRandom({2, 1, 8}, DType::kF32, rng).tensor);
  const auto st = ops::ApplyRope(x, OnGpu(MakeI32({3, -1})), params);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("SiluMul Add and Gelu on the GPU match the CPU ops", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 3);
  const Shape shape = {3, 33335};  // not a multiple of any block size
  const auto a = MakeRandom(shape, DType::kF32, rng, 3.f);
  const auto b = MakeRandom(shape, DType::kF32, rng, 3.f);
  Tensor want = MakeEmpty(shape);

  REQUIRE(ops::SiluMul(a.tensor, b.tensor, want).ok());
  Tensor got = PoisonedGpu(shape);
  REQUIRE(ops::SiluMul(OnGpu(a.tensor), OnGpu(b.tensor), got).ok());
  CheckClose(got, want, kF32Ops);

  REQUIRE(ops::Add(a.tensor, b.tensor, want).ok());
  Tensor sum = OnGpu(a.tensor);  // in place, as the residual stream is updated
  REQUIRE(ops::Add(sum, OnGpu(b.tensor), sum).ok());
  CheckClose(sum, want, {0.0, 0.0});  // one f32 rounding on both sides: bit for bit

  for (auto form : {ops::GeluApproximation::kErf, ops::GeluApproximation::kTanh}) {
    REQUIRE(ops::Gelu(a.tensor, form, want).ok());
    Tensor g = PoisonedGpu(shape);
    REQUIRE(ops::Gelu(OnGpu(a.tensor), form, g).ok());
    CheckClose(g, want, kF32Ops);
  }
}

TEST_CASE("QuickGelu and Softmax on the GPU match the CPU ops", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 6);
  // QuickGelu (CLIP's MLP): random values plus the tails, where e^(-1.702x) overflows and the
  // result must be -0 (not NaN) on both sides.
  const Shape shape = {3, 33335};
  auto a = MakeRandom(shape, DType::kF32, rng, 3.f);
  float* av = a.tensor.data<float>();
  av[0] = -100.f;
  av[1] = 100.f;
  av[2] = -60.f;
  Tensor want = MakeEmpty(shape);
  REQUIRE(ops::QuickGelu(a.tensor, want).ok());
  Tensor got = PoisonedGpu(shape);
  REQUIRE(ops::QuickGelu(OnGpu(a.tensor), got).ok());
  CheckClose(got, want, kF32Ops);
  Tensor inplace = OnGpu(a.tensor);
  REQUIRE(ops::QuickGelu(inplace, inplace).ok());
  CheckClose(inplace, want, kF32Ops);

  // Softmax over rows longer than a block (1000, 5000) and shorter than a warp (7), with -inf
  // entries and one fully masked row, which must come out as zeros.
  for (int64_t n : {1000, 5000, 7}) {
    DYNAMIC_SECTION("softmax rows of " << n) {
      auto x = MakeRandom({6, n}, DType::kF32, rng, 4.f);
      float* xv = x.tensor.data<float>();
      for (int64_t i = 0; i < 6 * n; i += 5) xv[i] = -INFINITY;
      for (int64_t i = 2 * n; i < 3 * n; ++i) xv[i] = -INFINITY;
      Tensor sm_want = MakeEmpty({6, n});
      REQUIRE(ops::Softmax(x.tensor, sm_want).ok());
      Tensor sm_got = PoisonedGpu({6, n});
      REQUIRE(ops::Softmax(OnGpu(x.tensor), sm_got).ok());
      CheckClose(sm_got, sm_want, kF32Ops);
      Tensor sm_inplace = OnGpu(x.tensor);
      REQUIRE(ops::Softmax(sm_inplace, sm_inplace).ok());
      CheckClose(sm_inplace, sm_want, kF32Ops);
    }
  }
}

TEST_CASE("Embedding on the GPU gathers exactly the CPU op's rows", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed() + 4);
  const int64_t vocab = 1000, hidden = 96;
  std::uniform_int_distribution<int32_t> id_dist(0, vocab - 1);
  std::vector<int32_t> id(37);
  for (auto& i : id) i = id_dist(rng);
  id[0] = 0;
  id[1] = vocab - 1;
  const Tensor ids = MakeI32(id);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto table = MakeRandom({vocab, hidden}, t, rng);
    Tensor want = MakeEmpty({37, hidden});
    REQUIRE(ops::Embedding(table.tensor, ids, want).ok());
    Tensor got = PoisonedGpu({37, hidden});
    REQUIRE(ops::Embedding(OnGpu(table.tensor), OnGpu(ids), got).ok());
    CheckClose(got, want, {0.0, 0.0});  // a conversion to f32 is exact
  }
  Tensor out = PoisonedGpu({2, hidden});
  const auto bad = ops::Embedding(OnGpu(MakeRandom({vocab, hidden}, DType::kF32, rng).tensor),
                                  OnGpu(MakeI32({1, static_cast<int32_t>(vocab)})), out);
  CHECK(bad.code() == absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace framezip::engine::test
