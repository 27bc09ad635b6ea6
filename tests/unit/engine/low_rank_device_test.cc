// AttentionPack's numeric core on every device present (tests/unit/engine/ops/device_cases.h): the
// CPU ops of engine/ops/low_rank.h and kv::LowRankFactor::Encode, and their GPU counterparts of
// engine/ops/low_rank_cuda.h, on the same inputs.
//
//  - Decode attention over a block (LowRankBlockAttend, fused on the GPU) against the f64
//    reference of low_rank_reference.h, in every factor format (f32, f16, int4), with mixed value
//    ranks, runs of positions with gaps, GQA groups of 1 to 7 and block sizes that leave a partial
//    last chunk.
//  - The randomized SVD on matrices of known decaying spectrum: on every device its leading
//    singular value against the spectrum and its reconstruction against Eckart–Young's bound; on
//    a GPU also against the CPU op's factorisation, which shares Ω with it, so that only rounding
//    differs (no independent reference knows the attained error of one Ω).
//  - Packing factors into their stored formats: on every device the bytes decode to the input
//    within the format's rounding; on a GPU they must also be the CPU encoder's bytes exactly
//    (blocks move between devices and to disk byte for byte).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "engine/kv/low_rank_factor.h"
#include "engine/ops/low_rank.h"
#include "engine/ops/low_rank_cuda.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/low_rank_reference.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::ops {
namespace {

using namespace reference;  // low_rank_reference.h

std::vector<float> ToHostVector(const Tensor& t) {
  auto host = t.To(Device::Cpu());
  FZ_CHECK(host.ok());
  return std::vector<float>(host->data<float>(), host->data<float>() + host->numel());
}

// A copy of `bytes` bytes at `data` on `device` (u8).
Tensor BytesOn(const void* data, size_t bytes, const Device& device) {
  auto host = Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kU8);
  FZ_CHECK(host.ok());
  std::memcpy(host->raw_data(), data, bytes);
  return test::On(*host, device);
}

// A host factor view's bytes copied to a device, and the view of that copy.
struct DeviceFactor {
  FactorView view;
  Tensor values, scales;
};

DeviceFactor CopyFactorTo(const FactorView& host, const Device& device) {
  DeviceFactor f;
  f.view = host;
  const size_t n = static_cast<size_t>(host.rows * host.cols);
  switch (host.format) {
    case FactorView::Format::kF32:
      f.values = BytesOn(host.f32, n * sizeof(float), device);
      f.view.f32 = static_cast<const float*>(f.values.raw_data());
      break;
    case FactorView::Format::kF16:
      f.values = BytesOn(host.f16, n * sizeof(Float16), device);
      f.view.f16 = static_cast<const Float16*>(f.values.raw_data());
      break;
    case FactorView::Format::kInt4: {
      const size_t groups =
          static_cast<size_t>((host.rows + host.group_rows - 1) / host.group_rows);
      f.values = BytesOn(host.packed, (n + 1) / 2, device);
      f.scales = BytesOn(host.scales, groups * static_cast<size_t>(host.cols) * 2, device);
      f.view.packed = static_cast<const uint8_t*>(f.values.raw_data());
      f.view.scales = static_cast<const Float16*>(f.scales.raw_data());
      break;
    }
  }
  return f;
}

// What LowRankBlockAttend returns, on the host.
struct Attended {
  std::vector<float> weights, max, sum, out;
};

// The block attention of `q` over `block` on `device`: the CPU op, or the fused kernel over copies
// of the block's bytes, positions and ranks on the GPU.
Attended AttendOn(const Device& device, const std::vector<float>& q, const StoredBlock& block,
                  const std::vector<int32_t>& positions, const LowRankAttentionShape& shape,
                  const RopeParams& rope) {
  const int64_t heads = shape.num_heads, d = shape.head_dim;
  const int64_t t = static_cast<int64_t>(positions.size());
  Attended got;
  if (device.is_cpu()) {
    got.weights.assign(static_cast<size_t>(heads * t), -1.f);
    BlockAttention out;
    const Status st =
        LowRankBlockAttend(q, block.View(positions), shape, rope, 0.f, got.weights, out);
    INFO(st.ToString());
    REQUIRE(st.ok());
    got.max = out.max;
    got.sum = out.sum;
    got.out = out.out;
    return got;
  }
  const DeviceFactor us_k = CopyFactorTo(block.us_k.View(), device),
                     vt_k = CopyFactorTo(block.vt_k.View(), device),
                     us_v = CopyFactorTo(block.us_v.View(), device),
                     vt_v = CopyFactorTo(block.vt_v.View(), device);
  const Tensor positions_on = BytesOn(positions.data(), positions.size() * 4, device);
  const Tensor ranks_on = BytesOn(block.value_ranks.data(), block.value_ranks.size() * 2, device);
  auto q_host = Tensor::Empty({heads, d}, DType::kF32);
  REQUIRE(q_host.ok());
  std::copy(q.begin(), q.end(), q_host->data<float>());
  Tensor weights = test::PoisonedOn({heads, t}, device), max = test::PoisonedOn({heads}, device),
         sum = test::PoisonedOn({heads}, device), out = test::PoisonedOn({heads, d}, device);
  const LowRankBlockView view{
      .key_us = us_k.view,
      .key_vt = vt_k.view,
      .value_us = us_v.view,
      .value_vt = vt_v.view,
      .positions = {static_cast<const int32_t*>(positions_on.raw_data()), positions.size()},
      .value_ranks = {static_cast<const uint16_t*>(ranks_on.raw_data()), block.value_ranks.size()}};
  const Status st = LowRankBlockAttendCuda(test::On(*q_host, device), view, shape, rope, 0.f,
                                           weights, max, sum, out);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return {ToHostVector(weights), ToHostVector(max), ToHostVector(sum), ToHostVector(out)};
}

// The CPU against the reference, under the bounds of "LowRankBlockAttend equals attention over
// keys and values rebuilt at their ranks" (low_rank_test.cc): each score within the reference's
// per-score tolerance (f32 arithmetic relative to |q|·|k|, plus the turn of its RoPE angle by the
// CPU's run-wise rotation), each weight and sum within the factor e^(±2·tol) that moves.
void CheckCpuAttention(const Attended& got, const Reference& want, int64_t heads, int64_t tokens,
                       int64_t d) {
  const double w_rel = 2.5 * want.score_tol;
  for (int64_t h = 0; h < heads; ++h) {
    CAPTURE(h, got.max[h], want.max[h], got.sum[h], want.sum[h]);
    CHECK(std::fabs(got.max[h] - want.max[h]) <= want.score_tol);
    CHECK(std::fabs(got.sum[h] - want.sum[h]) <= w_rel * want.sum[h] + 1e-6);
    int64_t bad_weights = 0, bad_out = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const double w = std::exp(want.s[h * tokens + t] - want.max[h]);
      if (!(std::fabs(got.weights[h * tokens + t] - w) <= w_rel * w + 1e-6)) ++bad_weights;
    }
    for (int64_t c = 0; c < d; ++c) {
      if (!(std::fabs(got.out[h * d + c] - want.out[h * d + c]) <=
            (w_rel + 1e-5) * want.out_mass[h * d + c] + 1e-6)) {
        ++bad_out;
      }
    }
    CHECK(bad_weights == 0);
    CHECK(bad_out == 0);
  }
}

// A GPU against the reference, under the bounds it met against the CPU op before the reference
// existed. The GPU takes RoPE angles as the reference does, the f32 product float(pos)·θ (as
// ApplyRope and transformers); the CPU's runs take the exact angle of their first token turned by
// l·θ (LaneAngles), which float(pos)·θ itself misses by up to half an ulp of the angle: 1e-3 rad
// at position 30000 for θ = 1. Scores of norm ~10 then move by ~1e-2, so the bounds, set for the
// GPU against the CPU, grow with that half ulp; a wrong kernel is off by O(1). Scores are sums of
// HD·R products of unit normals: their rounding, not the max, moves; the block's share of
// attention (out / sum) must agree within 1e-4 relative.
void CheckGpuAttention(const Attended& got, const Reference& want, int64_t heads, int64_t tokens,
                       int64_t d, double angle_error) {
  for (int64_t h = 0; h < heads; ++h) {
    CAPTURE(h);
    CHECK(got.max[h] == Approx(want.max[h]).epsilon(1e-4 + 2 * angle_error).margin(1e-3));
    CHECK(got.sum[h] == Approx(want.sum[h]).epsilon(1e-3 + 8 * angle_error));
    std::vector<float> got_row(got.out.begin() + h * d, got.out.begin() + (h + 1) * d);
    std::vector<float> want_row(want.out.begin() + h * d, want.out.begin() + (h + 1) * d);
    for (float& x : got_row) x /= got.sum[h];
    for (float& x : want_row) x /= static_cast<float>(want.sum[h]);
    CHECK(test::RelativeL2(got_row, want_row) < 1e-4 + 4 * angle_error);
  }
  std::vector<float> want_weights(static_cast<size_t>(heads * tokens));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < tokens; ++t) {
      want_weights[h * tokens + t] =
          static_cast<float>(std::exp(want.s[h * tokens + t] - want.max[h]));
    }
  }
  CHECK(test::RelativeL2(got.weights, want_weights) < 1e-3 + 8 * angle_error);
}

TEST_CASE("LowRankBlockAttend on every device equals attention over the rebuilt block",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  struct Case {
    int64_t tokens;
    int heads, kv_heads, d, rank_k, rank_v;
  };
  const int format = GENERATE(0, 1, 2);  // f32, f16, int4 factors
  // Blocks near the start of a context (where the GPU's angle bound stays near its floor) and
  // anywhere in a 32k one.
  const int32_t furthest_start = GENERATE(1000, 30000);
  const Case c =
      GENERATE(Case{1, 4, 2, 32, 8, 8}, Case{300, 4, 2, 32, 16, 16}, Case{1000, 14, 2, 64, 32, 32},
               Case{257, 8, 8, 64, 16, 4}, Case{4100, 7, 1, 64, 16, 8});
  DYNAMIC_SECTION("format " << format << " T=" << c.tokens << " H=" << c.heads
                            << " G=" << c.kv_heads << " d=" << c.d << " R=" << c.rank_k << "/"
                            << c.rank_v << " first position <= " << furthest_start) {
    const int64_t hd = int64_t{c.kv_heads} * c.d, t = c.tokens;
    StoredBlock block;
    block.us_k =
        Store(testing::RandomNormal(static_cast<size_t>(t * c.rank_k), rng), t, c.rank_k, format);
    block.vt_k =
        Store(testing::RandomNormal(static_cast<size_t>(c.rank_k * hd), rng), c.rank_k, hd, format);
    block.us_v =
        Store(testing::RandomNormal(static_cast<size_t>(t * c.rank_v), rng), t, c.rank_v, format);
    block.vt_v =
        Store(testing::RandomNormal(static_cast<size_t>(c.rank_v * hd), rng), c.rank_v, hd, format);
    // Positions in runs with gaps, from anywhere in the context; value ranks 0..R_v.
    std::vector<int32_t> positions(static_cast<size_t>(t));
    block.value_ranks.resize(static_cast<size_t>(t));
    std::uniform_int_distribution<int32_t> start(0, furthest_start), gap(2, 500), rank(0, c.rank_v);
    std::bernoulli_distribution breaks(0.03);
    int32_t p = start(rng);
    for (int64_t i = 0; i < t; ++i) {
      positions[i] = p;
      p += breaks(rng) ? gap(rng) : 1;
      block.value_ranks[i] = static_cast<uint16_t>(rank(rng));
    }
    // Unit-normal queries: scores of norm ~10, a softmax peaked on a few tokens.
    const std::vector<float> q = testing::RandomNormal(static_cast<size_t>(c.heads * c.d), rng);
    const LowRankAttentionShape shape{
        .num_heads = c.heads, .num_kv_heads = c.kv_heads, .head_dim = c.d};
    const RopeParams rope{.head_dim = c.d};
    const Reference want = AttendInDouble(q, block.us_k.values, block.vt_k.values, c.rank_k,
                                          block.Values(), c.rank_v, positions, c.heads, c.kv_heads,
                                          c.d, rope, 1.0 / std::sqrt(static_cast<double>(c.d)));
    const int32_t max_position = *std::max_element(positions.begin(), positions.end());
    const double angle_error = 0.5 * (std::nextafter(static_cast<float>(max_position), INFINITY) -
                                      static_cast<float>(max_position));
    CAPTURE(max_position, angle_error);

    test::ForEachDevice([&](const Device& device) {
      const Attended got = AttendOn(device, q, block, positions, shape, rope);
      if (device.is_cpu()) {
        CheckCpuAttention(got, want, c.heads, t, c.d);
      } else {
        CheckGpuAttention(got, want, c.heads, t, c.d, angle_error);
      }
    });
  }
}

// RandomizedSvd on `device`: the CPU op, or RandomizedSvdCuda on a copy of `a` there.
LowRankFactors SvdOn(const Device& device, const std::vector<float>& a, int64_t m, int64_t n,
                     const RandomizedSvdOptions& options) {
  if (device.is_cpu()) {
    auto f = RandomizedSvd(a, m, n, options);
    INFO((f.ok() ? "" : MessageOf(f.status())));
    REQUIRE(f.ok());
    return *std::move(f);
  }
  auto host = Tensor::Empty({m, n}, DType::kF32);
  REQUIRE(host.ok());
  std::copy(a.begin(), a.end(), host->data<float>());
  auto f = RandomizedSvdCuda(test::On(*host, device), options);
  INFO((f.ok() ? "" : MessageOf(f.status())));
  REQUIRE(f.ok());
  return {.rows = m,
          .cols = n,
          .rank = options.rank,
          .us = ToHostVector(f->us),
          .vt = ToHostVector(f->vt),
          .singular_values = ToHostVector(f->singular_values)};
}

TEST_CASE("RandomizedSvd on every device meets Eckart-Young and agrees with the CPU op",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  struct Size {
    int64_t m, n;
    int rank;
  };
  const Size size =
      GENERATE(Size{64, 64, 64}, Size{2000, 128, 16}, Size{5000, 64, 32}, Size{300, 128, 8});
  DYNAMIC_SECTION(size.m << "x" << size.n << " rank " << size.rank) {
    // Singular values 0.8^i: no gap, so the trailing values of a truncated factorisation are
    // those of one Ω, not the spectrum's; the tail of a full-rank one is f32 rounding noise.
    const int64_t k = std::min(size.m, size.n);
    std::vector<double> sigma(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) sigma[i] = std::pow(0.8, static_cast<double>(i));
    const std::vector<double> a = MatrixWithSpectrum(size.m, size.n, sigma, rng);
    const std::vector<float> af = ToFloat(a);
    double total = 0, tail = 0;
    for (int64_t i = 0; i < k; ++i) {
      total += sigma[i] * sigma[i];
      if (i >= size.rank) tail += sigma[i] * sigma[i];
    }
    const RandomizedSvdOptions options{.rank = size.rank, .power_iterations = 2, .seed = 7};
    const LowRankFactors cpu = SvdOn(Device::Cpu(), af, size.m, size.n, options);
    const double cpu_error = std::sqrt(ReconstructionError2(a, cpu) / total);

    test::ForEachDevice([&](const Device& device) {
      const LowRankFactors got = SvdOn(device, af, size.m, size.n, options);
      REQUIRE(got.singular_values.size() == static_cast<size_t>(size.rank));
      REQUIRE(got.us.size() == static_cast<size_t>(size.m * size.rank));
      REQUIRE(got.vt.size() == static_cast<size_t>(size.rank * size.n));
      // Against the spectrum: σ_1 is resolved to (σ_{R+1}/σ_1)^(2q+1) <= 0.8^40 of itself, far
      // below 1e-3; no rank-R factorisation beats Eckart–Young's sqrt(Σ_{i>R} σ_i²) (the f32
      // rounding of A and of the factors moves the error by ~1e-6 of ‖A‖); vt's rows orthonormal
      // as the CPU test holds them.
      const double error = std::sqrt(ReconstructionError2(a, got) / total);
      CAPTURE(error, std::sqrt(tail / total));
      CHECK(std::fabs(got.singular_values[0] - sigma[0]) <= 1e-3 * sigma[0]);
      CHECK(std::is_sorted(got.singular_values.rbegin(), got.singular_values.rend()));
      CHECK(error >= std::sqrt(tail / total) * (1 - 1e-3) - 1e-5);
      CHECK(OrthonormalityError(got) <= 1e-4);
      if (device.is_cpu()) return;
      // Against the CPU op, which shares Ω: only rounding differs. The tail of a full-rank f32
      // factorisation is rounding noise (0.8^54 of the largest at j = 54): both devices know each
      // value to a few 1e-5 of the largest, not better.
      for (int j = 0; j < size.rank; ++j) {
        CAPTURE(j);
        CHECK(got.singular_values[j] ==
              Approx(cpu.singular_values[j]).epsilon(1e-3).margin(1e-4 * cpu.singular_values[0]));
      }
      CAPTURE(cpu_error);
      CHECK(error <= cpu_error * 1.01 + 1e-5);
    });
  }
}

// The factor's stored bytes on `device`: kv::LowRankFactor::Encode on the CPU, the packing kernel
// on a GPU (from a copy of the values there), read back.
kv::LowRankFactor EncodeOn(const Device& device, const std::vector<float>& x, int64_t rows,
                           int64_t cols, bool int4) {
  const kv::FactorFormat format = int4 ? kv::FactorFormat::kInt4 : kv::FactorFormat::kF16;
  if (device.is_cpu()) return kv::LowRankFactor::Encode(x, rows, cols, format);
  auto host = Tensor::Empty({rows, cols}, DType::kF32);
  REQUIRE(host.ok());
  std::copy(x.begin(), x.end(), host->data<float>());
  const size_t data_bytes =
      int4 ? kv::LowRankFactor::PackedBytes(rows, cols) : static_cast<size_t>(rows * cols) * 2;
  const size_t scale_count = int4 ? kv::LowRankFactor::ScaleCount(rows, cols) : 0;
  auto data = Tensor::Empty({static_cast<int64_t>(data_bytes)}, DType::kU8, device);
  auto scales = Tensor::Empty({static_cast<int64_t>(std::max<size_t>(scale_count * 2, 1))},
                              DType::kU8, device);
  REQUIRE(data.ok());
  REQUIRE(scales.ok());
  const Status st = EncodeLowRankFactorCuda(
      test::On(*host, device), int4 ? FactorView::Format::kInt4 : FactorView::Format::kF16, *data,
      *scales);
  INFO(st.ToString());
  REQUIRE(st.ok());
  auto got_data = data->To(Device::Cpu());
  auto got_scales = scales->To(Device::Cpu());
  REQUIRE(got_data.ok());
  REQUIRE(got_scales.ok());
  std::vector<Float16> f16, scale_values(scale_count);
  std::vector<uint8_t> packed;
  if (int4) {
    packed.assign(got_data->data<uint8_t>(), got_data->data<uint8_t>() + data_bytes);
    std::memcpy(scale_values.data(), got_scales->raw_data(), scale_count * 2);
  } else {
    f16.resize(static_cast<size_t>(rows * cols));
    std::memcpy(f16.data(), got_data->raw_data(), data_bytes);
  }
  auto f = kv::LowRankFactor::FromParts(format, rows, cols, std::move(f16), std::move(packed),
                                        std::move(scale_values));
  INFO((f.ok() ? "" : MessageOf(f.status())));
  REQUIRE(f.ok());
  return *std::move(f);
}

// The raw bytes of a stored factor: values, then (int4) scales.
std::vector<uint8_t> StoredBytes(const kv::LowRankFactor& f) {
  const FactorView v = f.View();
  std::vector<uint8_t> bytes;
  const auto append = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  if (v.format == FactorView::Format::kF16) {
    append(v.f16, static_cast<size_t>(v.rows * v.cols) * 2);
  } else {
    append(v.packed, kv::LowRankFactor::PackedBytes(v.rows, v.cols));
    append(v.scales, kv::LowRankFactor::ScaleCount(v.rows, v.cols) * 2);
  }
  return bytes;
}

TEST_CASE("Packing factors on every device keeps each value within its format's rounding",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  struct Size {
    int64_t rows, cols;
  };
  const Size size = GENERATE(Size{1, 1}, Size{33, 7}, Size{4096, 16}, Size{16, 64}, Size{100, 3});
  const bool int4 = GENERATE(false, true);
  DYNAMIC_SECTION(size.rows << "x" << size.cols << (int4 ? " int4" : " f16")) {
    const int64_t rows = size.rows, cols = size.cols;
    std::vector<float> x = testing::RandomNormal(static_cast<size_t>(rows * cols), rng);
    // A zero column (scale 0), exact halves of a step (rounding ties) and an f16 overflow.
    for (int64_t r = 0; r < rows; ++r) x[r * cols] = 0.f;
    if (cols > 2) {
      for (int64_t r = 0; r < std::min<int64_t>(rows, 32); ++r) x[r * cols + 1] = 0.5f;
      x[1] = 7.f;  // scale 1: the 0.5s sit exactly between codes 0 and 1
    }
    if (!int4) x.back() = 1e6f;
    const std::vector<uint8_t> cpu_bytes = StoredBytes(kv::LowRankFactor::Encode(
        x, rows, cols, int4 ? kv::FactorFormat::kInt4 : kv::FactorFormat::kF16));

    test::ForEachDevice([&](const Device& device) {
      const kv::LowRankFactor got = EncodeOn(device, x, rows, cols, int4);
      const std::vector<float> decoded = got.Decode();
      REQUIRE(decoded.size() == x.size());
      int64_t off_grid = 0;
      if (!int4) {
        // f16: each value is the input rounded to nearest f16 (1e6 overflows to infinity).
        const std::vector<double> want =
            test::RoundedTo(std::vector<double>(x.begin(), x.end()), DType::kF16);
        for (size_t i = 0; i < x.size(); ++i) off_grid += decoded[i] != want[i];
      } else {
        // int4: per (32 rows, column) the scale is max|x| / 7 (in f32) rounded to f16, and each
        // value lies within half a step of its input, give or take the f32 rounding of x / step
        // (a wrong code is a whole step off; the largest value of a group, clamped to 7 steps,
        // misses by at most 7 times the scale's f16 rounding, far less than half a step).
        const FactorView view = got.View();
        for (int64_t g = 0; g * 32 < rows; ++g) {
          for (int64_t c = 0; c < cols; ++c) {
            float max_abs = 0.f;
            for (int64_t r = g * 32; r < std::min(rows, g * 32 + 32); ++r) {
              max_abs = std::max(max_abs, std::fabs(x[r * cols + c]));
            }
            const float scale = F16ToF32(view.scales[g * cols + c]);
            off_grid += scale != F16ToF32(F32ToF16(max_abs / 7.f));
            for (int64_t r = g * 32; r < std::min(rows, g * 32 + 32); ++r) {
              const double err =
                  std::fabs(static_cast<double>(decoded[r * cols + c]) - x[r * cols + c]);
              off_grid += !(err <= 0.5 * scale * (1 + 1e-3));
            }
          }
        }
      }
      CHECK(off_grid == 0);
      if (device.is_cpu()) return;
      // The CPU's bytes exactly: blocks are exchanged between devices and written to disk.
      CHECK(StoredBytes(got) == cpu_bytes);
    });
  }
}

}  // namespace
}  // namespace framezip::engine::ops
