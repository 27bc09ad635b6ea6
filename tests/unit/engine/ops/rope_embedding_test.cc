// ApplyRope, RopeSplitQkv and Embedding on every device present against f64
// (tests/unit/engine/ops/device_cases.h).
//
// RoPE's angles are f32 as in HF (an f32 inverse frequency times an f32 position), so the
// reference takes RopeInverseFrequencies' f32 values, checked here against the f64 formula
// (default and llama3), and rotates in f64 by the f32 angle. What is left is the f32 rounding of
// cos, sin and the rotation, for inputs of RMS 2: 1e-5 abs + 1e-5 rel (docs/DEVELOPING.md §5). An
// angle off by one f32 ulp at position 32767 errs by ~2e-3 and fails it.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/ops/embedding.h"
#include "engine/ops/rope.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kRope{1e-5, 1e-5};

// HF's inverse frequencies in f64: theta^(-2i/d), llama3-rescaled by wavelength band
// (transformers' _compute_llama3_parameters).
std::vector<double> InverseFrequenciesF64(const ops::RopeParams& p) {
  std::vector<double> inv(static_cast<size_t>(p.head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    double f = 1 / std::pow(p.theta, 2.0 * static_cast<double>(i) / p.head_dim);
    if (p.llama3_factor > 0) {
      const double low_wavelen = p.llama3_original_max_positions / p.llama3_low_freq_factor;
      const double high_wavelen = p.llama3_original_max_positions / p.llama3_high_freq_factor;
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= p.llama3_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (p.llama3_original_max_positions / wavelen - p.llama3_low_freq_factor) /
            (p.llama3_high_freq_factor - p.llama3_low_freq_factor);
        f = (1 - smooth) * f / p.llama3_factor + smooth * f;
      }
    }
    inv[i] = f;
  }
  return inv;
}

// x [T, H, d] rotated half-split by the f32 angle positions[t]·inv[i], in f64.
std::vector<double> RopeReference(const std::vector<double>& x, const std::vector<int32_t>& pos,
                                  const std::vector<float>& inv, int64_t heads, int64_t d) {
  std::vector<double> y(x.size());
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t row = (t * static_cast<size_t>(heads) + static_cast<size_t>(h)) * d;
      for (int64_t e = 0; e < d / 2; ++e) {
        const double angle = static_cast<float>(pos[t]) * inv[e];
        const double a = x[row + e], b = x[row + e + d / 2];
        y[row + e] = a * std::cos(angle) - b * std::sin(angle);
        y[row + e + d / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return y;
}

TEST_CASE("ApplyRope matches f64 on every device, Qwen2 and llama3 frequencies",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int head_dim = GENERATE(32, 64, 128);
  const bool llama3 = GENERATE(false, true);
  ops::RopeParams params{.head_dim = head_dim, .theta = llama3 ? 500000.0 : 1000000.0};
  if (llama3) params.llama3_factor = 8;
  CAPTURE(head_dim, llama3);
  const std::vector<float> inv = ops::RopeInverseFrequencies(params);
  const std::vector<double> inv_f64 = InverseFrequenciesF64(params);
  REQUIRE(inv.size() == inv_f64.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    INFO("frequency " << i);
    REQUIRE(std::fabs(inv[i] - inv_f64[i]) <= 1e-6 * inv_f64[i]);
  }
  const int64_t tokens = 33, heads = 14;
  const auto x = MakeRandom({tokens, heads, head_dim}, DType::kF32, rng, 2.f);
  std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
  std::vector<int32_t> pos(tokens);
  for (auto& p : pos) p = pos_dist(rng);
  pos[0] = 0;
  const auto want = RopeReference(x.values, pos, inv, heads, head_dim);
  ForEachDevice([&](const Device& device) {
    Tensor y = On(x.tensor, device);
    REQUIRE(ops::ApplyRope(y, On(MakeI32(pos), device), params).ok());
    CheckCloseTo(y, want, kRope);
    // With the positions' host copy checked instead of the device's (the decoder's path).
    Tensor z = On(x.tensor, device);
    REQUIRE(ops::ApplyRope(z, On(MakeI32(pos), device), params, pos).ok());
    CheckCloseTo(z, want, kRope);
  });
}

TEST_CASE("RopeSplitQkv splits a fused projection and rotates q and k as ApplyRope does",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int head_dim = GENERATE(64, 128);
  const ops::RopeParams params{.head_dim = head_dim, .theta = 1000000.0};
  CAPTURE(head_dim);
  const int64_t tokens = 37, q_heads = 14, kv_heads = 2, d = head_dim;
  const int64_t q_width = q_heads * d, kv_width = kv_heads * d, row = q_width + 2 * kv_width;
  const auto qkv = MakeRandom({tokens, row}, DType::kF32, rng, 2.f);
  std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
  std::vector<int32_t> pos(tokens);
  for (auto& p : pos) p = pos_dist(rng);
  // The three parts as separate tensors (what three projections would have written).
  std::vector<double> q_in, k_in, v_in;
  for (int64_t t = 0; t < tokens; ++t) {
    const auto at = qkv.values.begin() + t * row;
    q_in.insert(q_in.end(), at, at + q_width);
    k_in.insert(k_in.end(), at + q_width, at + q_width + kv_width);
    v_in.insert(v_in.end(), at + q_width + kv_width, at + row);
  }
  const std::vector<float> inv = ops::RopeInverseFrequencies(params);
  const auto want_q = RopeReference(q_in, pos, inv, q_heads, d);
  const auto want_k = RopeReference(k_in, pos, inv, kv_heads, d);
  auto values_of = [](const Tensor& t) {
    const std::vector<float> f = testing::ToFloatVector(t);
    return std::vector<double>(f.begin(), f.end());
  };
  auto host = [](const std::vector<double>& v, Shape shape) {
    Tensor t = *Tensor::Empty(shape, DType::kF32);
    for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
    return t;
  };
  ForEachDevice([&](const Device& device) {
    Tensor q = PoisonedOn({tokens, q_heads, d}, device);
    Tensor k = PoisonedOn({tokens, kv_heads, d}, device);
    Tensor v = PoisonedOn({tokens, kv_heads, d}, device);
    REQUIRE(
        ops::RopeSplitQkv(On(qkv.tensor, device), On(MakeI32(pos), device), params, pos, q, k, v)
            .ok());
    CheckCloseTo(q, want_q, kRope);
    CheckCloseTo(k, want_k, kRope);
    CheckCloseTo(v, v_in, {0.0, 0.0});
    // Bit for bit what the separate path gives on this device: the decoder's two layouts agree.
    Tensor q_separate = On(host(q_in, {tokens, q_heads, d}), device);
    Tensor k_separate = On(host(k_in, {tokens, kv_heads, d}), device);
    REQUIRE(ops::ApplyRope(q_separate, On(MakeI32(pos), device), params, pos).ok());
    REQUIRE(ops::ApplyRope(k_separate, On(MakeI32(pos), device), params, pos).ok());
    CheckCloseTo(q, values_of(q_separate), {0.0, 0.0});
    CheckCloseTo(k, values_of(k_separate), {0.0, 0.0});
    // A fused row of the wrong width is refused, naming the tensors.
    Tensor narrow = PoisonedOn({tokens, row - d}, device);
    const Status st = ops::RopeSplitQkv(narrow, On(MakeI32(pos), device), params, pos, q, k, v);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(st), Catch::Contains("qkv"));
  });
}

TEST_CASE("ApplyRope refuses a negative position on every device, naming it",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const ops::RopeParams params{.head_dim = 8};
  const auto x = MakeRandom({2, 1, 8}, DType::kF32, rng);
  ForEachDevice([&](const Device& device) {
    Tensor y = On(x.tensor, device);
    const Status st = ops::ApplyRope(y, On(MakeI32({3, -1}), device), params);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(st), Catch::Contains("-1"));
  });
}

TEST_CASE("Embedding gathers exactly the table's rows on every device, and names a bad id",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t vocab = 1000, hidden = 96;
  std::uniform_int_distribution<int32_t> id_dist(0, vocab - 1);
  std::vector<int32_t> ids(37);
  for (auto& i : ids) i = id_dist(rng);
  ids[0] = 0;
  ids[1] = vocab - 1;
  const DType dtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  const auto table = MakeRandom({vocab, hidden}, dtype, rng);
  std::vector<double> want;
  for (int32_t id : ids) {
    want.insert(want.end(), table.values.begin() + id * hidden,
                table.values.begin() + (id + 1) * hidden);
  }
  ForEachDevice([&](const Device& device) {
    Tensor out = PoisonedOn({37, hidden}, device);
    REQUIRE(ops::Embedding(On(table.tensor, device), On(MakeI32(ids), device), out).ok());
    CheckCloseTo(out, want, {0.0, 0.0});  // a conversion to f32 is exact
    Tensor two = PoisonedOn({2, hidden}, device);
    const Status bad = ops::Embedding(On(table.tensor, device),
                                      On(MakeI32({1, static_cast<int32_t>(vocab)}), device), two);
    CHECK(bad.code() == absl::StatusCode::kOutOfRange);
    CHECK_THAT(MessageOf(bad), Catch::Contains("1000"));
  });
}

}  // namespace
}  // namespace framezip::engine::test
