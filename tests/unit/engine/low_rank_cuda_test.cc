// [cuda]: AttentionPack on the GPU (ops/low_rank_cuda.h). The randomized SVD must give the CPU
// op's singular values and a reconstruction as close to the input as the CPU's (they share Ω, so
// only rounding differs), on matrices with a decaying spectrum. Packing must write the bytes
// kv::LowRankFactor::Encode writes (f16 and int4, with zero columns, ties and group tails). The
// fused decompress-and-attend kernel is checked against the CPU op LowRankBlockAttend (itself
// checked against an f64 reference in low_rank_test.cc), on fresh random blocks in every factor
// format (f32, f16, int4), with mixed value ranks, runs of positions with gaps, GQA groups of 1 to
// 7, and block sizes that leave a partial last chunk. The maxima, sums, unnormalised outputs and
// every weight must agree within f32 rounding of the two orders of summation; the block's share of
// attention (out / sum) within 1e-4 relative.
#include "engine/ops/low_rank_cuda.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/half.h"
#include "engine/kv/low_rank_factor.h"
#include "engine/ops/low_rank.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine::test {
namespace {

using ops::FactorView;
using ops::RopeParams;

// One factor in a stored format, on the host and as a copy on the GPU.
struct TwoSidedFactor {
  int64_t rows = 0, cols = 0;
  FactorView::Format format = FactorView::Format::kF32;
  std::vector<float> f32;
  std::vector<Float16> f16;
  std::vector<uint8_t> packed;
  std::vector<Float16> scales;
  Tensor device_values, device_scales;  // u8 byte copies of the host arrays

  FactorView Host() const { return View(f32.data(), f16.data(), packed.data(), scales.data()); }
  FactorView Device() const {
    const void* values = device_values.raw_data();
    return View(static_cast<const float*>(values), static_cast<const Float16*>(values),
                static_cast<const uint8_t*>(values),
                format == FactorView::Format::kInt4
                    ? static_cast<const Float16*>(device_scales.raw_data())
                    : nullptr);
  }

 private:
  FactorView View(const float* a, const Float16* b, const uint8_t* c, const Float16* s) const {
    FactorView v{.format = format, .rows = rows, .cols = cols};
    if (format == FactorView::Format::kF32) v.f32 = a;
    if (format == FactorView::Format::kF16) v.f16 = b;
    if (format == FactorView::Format::kInt4) {
      v.packed = c;
      v.scales = s;
      v.group_rows = 32;
    }
    return v;
  }
};

Tensor BytesOnGpu(const void* data, size_t bytes) {
  auto host = Tensor::Empty({static_cast<int64_t>(bytes)}, DType::kU8);
  FZ_CHECK(host.ok());
  std::memcpy(host->raw_data(), data, bytes);
  return OnGpu(*host);
}

// int4 as FactorView reads it: per (32 rows, column) an f16 scale max|x|/7, codes round(x/s) + 8.
TwoSidedFactor MakeFactor(const std::vector<float>& x, int64_t rows, int64_t cols, int format) {
  TwoSidedFactor f;
  f.rows = rows;
  f.cols = cols;
  const size_t n = static_cast<size_t>(rows * cols);
  if (format == 0) {
    f.format = FactorView::Format::kF32;
    f.f32 = x;
    f.device_values = BytesOnGpu(f.f32.data(), n * sizeof(float));
  } else if (format == 1) {
    f.format = FactorView::Format::kF16;
    for (float v : x) f.f16.push_back(F32ToF16(v));
    f.device_values = BytesOnGpu(f.f16.data(), n * sizeof(Float16));
  } else {
    f.format = FactorView::Format::kInt4;
    const int64_t groups = (rows + 31) / 32;
    f.scales.resize(static_cast<size_t>(groups * cols));
    f.packed.assign((n + 1) / 2, 0);
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t c = 0; c < cols; ++c) {
        float amax = 0;
        for (int64_t r = g * 32; r < std::min(rows, (g + 1) * 32); ++r) {
          amax = std::max(amax, std::fabs(x[r * cols + c]));
        }
        f.scales[g * cols + c] = F32ToF16(amax > 0 ? amax / 7.f : 1.f);
      }
    }
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float s = F16ToF32(f.scales[(i / cols) / 32 * cols + i % cols]);
      const int code = std::clamp(static_cast<int>(std::lround(x[i] / s)) + 8, 0, 15);
      f.packed[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? code : code << 4);
    }
    f.device_values = BytesOnGpu(f.packed.data(), f.packed.size());
    f.device_scales = BytesOnGpu(f.scales.data(), f.scales.size() * sizeof(Float16));
  }
  return f;
}

std::vector<float> ToHost(const Tensor& t) {
  auto host = t.To(engine::Device::Cpu());
  FZ_CHECK(host.ok());
  return std::vector<float>(host->data<float>(), host->data<float>() + host->numel());
}

TEST_CASE("LowRankBlockAttendCuda matches the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  struct Case {
    int64_t tokens;
    int heads, kv_heads, d, rank_k, rank_v;
  };
  const int format = GENERATE(0, 1, 2);
  // Blocks near the start of a context (where the angle tolerance below stays near its floor)
  // and anywhere in a 32k one.
  const int32_t furthest_start = GENERATE(1000, 30000);
  const Case c =
      GENERATE(Case{1, 4, 2, 32, 8, 8}, Case{300, 4, 2, 32, 16, 16}, Case{1000, 14, 2, 64, 32, 32},
               Case{257, 8, 8, 64, 16, 4}, Case{4100, 7, 1, 64, 16, 8});
  DYNAMIC_SECTION("format " << format << ", T=" << c.tokens << " H=" << c.heads
                            << " G=" << c.kv_heads << " d=" << c.d << " R=" << c.rank_k << "/"
                            << c.rank_v << ", first position <= " << furthest_start) {
    const int64_t hd = int64_t{c.kv_heads} * c.d, t = c.tokens;
    const TwoSidedFactor us_k = MakeFactor(
        testing::RandomNormal(static_cast<size_t>(t * c.rank_k), rng), t, c.rank_k, format);
    const TwoSidedFactor vt_k = MakeFactor(
        testing::RandomNormal(static_cast<size_t>(c.rank_k * hd), rng), c.rank_k, hd, format);
    const TwoSidedFactor us_v = MakeFactor(
        testing::RandomNormal(static_cast<size_t>(t * c.rank_v), rng), t, c.rank_v, format);
    const TwoSidedFactor vt_v = MakeFactor(
        testing::RandomNormal(static_cast<size_t>(c.rank_v * hd), rng), c.rank_v, hd, format);
    // Positions in runs with gaps, from anywhere in a 32k context; ranks 0..R_v.
    std::vector<int32_t> positions(static_cast<size_t>(t));
    std::vector<uint16_t> ranks(static_cast<size_t>(t));
    std::uniform_int_distribution<int32_t> start(0, furthest_start), gap(2, 500), rank(0, c.rank_v);
    std::bernoulli_distribution breaks(0.03);
    int32_t p = start(rng);
    for (int64_t i = 0; i < t; ++i) {
      positions[i] = p;
      p += breaks(rng) ? gap(rng) : 1;
      ranks[i] = static_cast<uint16_t>(rank(rng));
    }
    const std::vector<float> q = testing::RandomNormal(static_cast<size_t>(c.heads * c.d), rng);
    const ops::LowRankAttentionShape shape{
        .num_heads = c.heads, .num_kv_heads = c.kv_heads, .head_dim = c.d};
    const RopeParams rope{.head_dim = c.d};

    std::vector<float> want_weights(static_cast<size_t>(c.heads * t));
    ops::BlockAttention want;
    REQUIRE(ops::LowRankBlockAttend(q,
                                    {.key_us = us_k.Host(),
                                     .key_vt = vt_k.Host(),
                                     .value_us = us_v.Host(),
                                     .value_vt = vt_v.Host(),
                                     .positions = positions,
                                     .value_ranks = ranks},
                                    shape, rope, 0.f, want_weights, want)
                .ok());

    const Tensor positions_gpu = BytesOnGpu(positions.data(), positions.size() * 4);
    const Tensor ranks_gpu = BytesOnGpu(ranks.data(), ranks.size() * 2);
    auto q_host = Tensor::Empty({c.heads, c.d}, DType::kF32);
    REQUIRE(q_host.ok());
    std::copy(q.begin(), q.end(), q_host->data<float>());
    const Tensor q_gpu = OnGpu(*q_host);
    Tensor weights = PoisonedGpu({c.heads, t}), max = PoisonedGpu({c.heads}),
           sum = PoisonedGpu({c.heads}), out = PoisonedGpu({c.heads, c.d});
    const ops::LowRankBlockView device_block{
        .key_us = us_k.Device(),
        .key_vt = vt_k.Device(),
        .value_us = us_v.Device(),
        .value_vt = vt_v.Device(),
        .positions = {static_cast<const int32_t*>(positions_gpu.raw_data()), positions.size()},
        .value_ranks = {static_cast<const uint16_t*>(ranks_gpu.raw_data()), ranks.size()}};
    REQUIRE(
        ops::LowRankBlockAttendCuda(q_gpu, device_block, shape, rope, 0.f, weights, max, sum, out)
            .ok());
    const std::vector<float> got_max = ToHost(max), got_sum = ToHost(sum), got_out = ToHost(out),
                             got_weights = ToHost(weights);
    // The two devices take RoPE angles differently: the GPU the f32 product float(pos)·θ (as
    // ApplyRope and transformers), the CPU's runs the exact angle of their first token turned by
    // l·θ (LaneAngles), which float(pos)·θ itself misses by up to half an ulp of the angle: 1e-3
    // rad at position 30000 for θ = 1. Scores of norm ~10 then move by ~1e-2, so the tolerances
    // grow with that half ulp; a wrong kernel is off by O(1).
    const int32_t max_position = *std::max_element(positions.begin(), positions.end());
    const double angle_error = 0.5 * (std::nextafter(static_cast<float>(max_position), INFINITY) -
                                      static_cast<float>(max_position));
    CAPTURE(max_position, angle_error);
    for (int h = 0; h < c.heads; ++h) {
      CAPTURE(h);
      // Scores are sums of HD·R products of unit normals: their rounding, not the max, moves.
      CHECK(got_max[h] == Approx(want.max[h]).epsilon(1e-4 + 2 * angle_error).margin(1e-3));
      CHECK(got_sum[h] == Approx(want.sum[h]).epsilon(1e-3 + 8 * angle_error));
      std::vector<float> got_row(got_out.begin() + h * c.d, got_out.begin() + (h + 1) * c.d);
      std::vector<float> want_row(want.out.begin() + h * c.d, want.out.begin() + (h + 1) * c.d);
      for (float& x : got_row) x /= got_sum[h];
      for (float& x : want_row) x /= want.sum[h];
      CHECK(RelativeL2(got_row, want_row) < 1e-4 + 4 * angle_error);
    }
    CHECK(RelativeL2(got_weights, want_weights) < 1e-3 + 8 * angle_error);
  }
}

// A row-major m × n matrix with singular values 0.8^i (random orthonormal-ish factors: Gaussian
// columns, whose spread the decay dominates).
std::vector<float> DecayingMatrix(int64_t m, int64_t n, std::mt19937_64& rng) {
  const int64_t k = std::min(m, n);
  const std::vector<float> u = testing::RandomNormal(static_cast<size_t>(m * k), rng);
  const std::vector<float> v = testing::RandomNormal(static_cast<size_t>(k * n), rng);
  std::vector<float> a(static_cast<size_t>(m * n), 0.f);
  for (int64_t j = 0; j < k; ++j) {
    const float sigma = std::pow(0.8f, static_cast<float>(j)) / std::sqrt(static_cast<float>(m));
    for (int64_t i = 0; i < m; ++i) {
      const float ui = sigma * u[i * k + j];
      for (int64_t c = 0; c < n; ++c) a[i * n + c] += ui * v[j * n + c];
    }
  }
  return a;
}

// ‖A − us·vt‖_F / ‖A‖_F in double.
double ReconstructionError(const std::vector<float>& a, const std::vector<float>& us,
                           const std::vector<float>& vt, int64_t m, int64_t n, int r) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      double x = 0;
      for (int j = 0; j < r; ++j) x += double{us[i * r + j]} * vt[j * n + c];
      const double want = a[i * n + c];
      num += (want - x) * (want - x);
      den += want * want;
    }
  }
  return std::sqrt(num / den);
}

TEST_CASE("RandomizedSvdCuda matches the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  struct Size {
    int64_t m, n;
    int rank;
  };
  const Size size =
      GENERATE(Size{64, 64, 64}, Size{2000, 128, 16}, Size{5000, 64, 32}, Size{300, 128, 8});
  DYNAMIC_SECTION(size.m << "x" << size.n << " rank " << size.rank) {
    const std::vector<float> a = DecayingMatrix(size.m, size.n, rng);
    const ops::RandomizedSvdOptions options{.rank = size.rank, .power_iterations = 2, .seed = 7};
    auto cpu = ops::RandomizedSvd(a, size.m, size.n, options);
    REQUIRE(cpu.ok());
    auto host = Tensor::Empty({size.m, size.n}, DType::kF32);
    REQUIRE(host.ok());
    std::copy(a.begin(), a.end(), host->data<float>());
    auto gpu = ops::RandomizedSvdCuda(OnGpu(*host), options);
    REQUIRE(gpu.ok());
    const std::vector<float> us = ToHost(gpu->us), vt = ToHost(gpu->vt),
                             sv = ToHost(gpu->singular_values);
    REQUIRE(sv.size() == static_cast<size_t>(size.rank));
    for (int j = 0; j < size.rank; ++j) {
      CAPTURE(j);
      // The tail of a full-rank f32 factorisation is rounding noise (0.8^54 of the largest at
      // j = 54): both devices know each value to a few 1e-5 of the largest, not better.
      CHECK(sv[j] ==
            Approx(cpu->singular_values[j]).epsilon(1e-3).margin(1e-4 * cpu->singular_values[0]));
    }
    const double cpu_error = ReconstructionError(a, cpu->us, cpu->vt, size.m, size.n, size.rank);
    const double gpu_error = ReconstructionError(a, us, vt, size.m, size.n, size.rank);
    CAPTURE(cpu_error, gpu_error);
    CHECK(gpu_error <= cpu_error * 1.01 + 1e-5);
  }
}

TEST_CASE("RandomizedSvdCuda refuses bad input and names it", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  auto host = Tensor::Empty({4, 3}, DType::kF32);
  REQUIRE(host.ok());
  std::fill_n(host->data<float>(), 12, 1.f);
  host->data<float>()[5] = std::nanf("");
  const Status nan = ops::RandomizedSvdCuda(OnGpu(*host), {.rank = 2}).status();
  CHECK(nan.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(nan.message()), Catch::Contains("not finite"));
  CHECK(ops::RandomizedSvdCuda(OnGpu(*host), {.rank = 4}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ops::RandomizedSvdCuda(*host, {.rank = 2}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("EncodeLowRankFactorCuda writes the bytes of kv::LowRankFactor::Encode", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  struct Size {
    int64_t rows, cols;
  };
  const Size size = GENERATE(Size{1, 1}, Size{33, 7}, Size{4096, 16}, Size{16, 64}, Size{100, 3});
  const bool int4 = GENERATE(false, true);
  DYNAMIC_SECTION(size.rows << "x" << size.cols << (int4 ? " int4" : " f16")) {
    std::vector<float> x = testing::RandomNormal(static_cast<size_t>(size.rows * size.cols), rng);
    // A zero column (scale 0), exact halves of a step (rounding ties) and an f16 overflow.
    for (int64_t r = 0; r < size.rows; ++r) x[r * size.cols] = 0.f;
    if (size.cols > 2) {
      for (int64_t r = 0; r < std::min<int64_t>(size.rows, 32); ++r) x[r * size.cols + 1] = 0.5f;
      x[1] = 7.f;  // scale 1: the 0.5s sit exactly between codes 0 and 1
    }
    if (!int4) x.back() = 1e6f;
    auto host = Tensor::Empty({size.rows, size.cols}, DType::kF32);
    REQUIRE(host.ok());
    std::copy(x.begin(), x.end(), host->data<float>());
    const kv::LowRankFactor want = kv::LowRankFactor::Encode(
        x, size.rows, size.cols, int4 ? kv::FactorFormat::kInt4 : kv::FactorFormat::kF16);
    const FactorView view = want.View();
    const size_t data_bytes = int4 ? kv::LowRankFactor::PackedBytes(size.rows, size.cols)
                                   : static_cast<size_t>(size.rows * size.cols) * 2;
    const size_t scale_bytes = int4 ? kv::LowRankFactor::ScaleCount(size.rows, size.cols) * 2 : 1;
    auto data =
        Tensor::Empty({static_cast<int64_t>(data_bytes)}, DType::kU8, engine::Device::Cuda(0));
    auto scales =
        Tensor::Empty({static_cast<int64_t>(scale_bytes)}, DType::kU8, engine::Device::Cuda(0));
    REQUIRE(data.ok());
    REQUIRE(scales.ok());
    REQUIRE(ops::EncodeLowRankFactorCuda(
                OnGpu(*host), int4 ? FactorView::Format::kInt4 : FactorView::Format::kF16, *data,
                *scales)
                .ok());
    auto got_data = data->To(engine::Device::Cpu());
    REQUIRE(got_data.ok());
    const void* want_data = int4 ? static_cast<const void*>(view.packed) : view.f16;
    CHECK(std::memcmp(got_data->raw_data(), want_data, data_bytes) == 0);
    if (int4) {
      auto got_scales = scales->To(engine::Device::Cpu());
      REQUIRE(got_scales.ok());
      CHECK(std::memcmp(got_scales->raw_data(), view.scales, scale_bytes) == 0);
    }
  }
}

TEST_CASE("LowRankBlockAttendCuda refuses what the kernel cannot take", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const TwoSidedFactor us = MakeFactor(testing::RandomNormal(8 * 4, rng), 8, 4, 0);
  const TwoSidedFactor vt = MakeFactor(testing::RandomNormal(4 * 64, rng), 4, 64, 0);
  std::vector<int32_t> positions(8, 0);
  const Tensor positions_gpu = BytesOnGpu(positions.data(), positions.size() * 4);
  std::vector<uint16_t> ranks(8, 4);
  const Tensor ranks_gpu = BytesOnGpu(ranks.data(), ranks.size() * 2);
  const ops::LowRankBlockView block{
      .key_us = us.Device(),
      .key_vt = vt.Device(),
      .value_us = us.Device(),
      .value_vt = vt.Device(),
      .positions = {static_cast<const int32_t*>(positions_gpu.raw_data()), 8},
      .value_ranks = {static_cast<const uint16_t*>(ranks_gpu.raw_data()), 8}};
  Tensor q = PoisonedGpu({2, 32}), weights = PoisonedGpu({2, 8}), max = PoisonedGpu({2}),
         sum = PoisonedGpu({2}), out = PoisonedGpu({2, 32});
  const ops::LowRankAttentionShape shape{.num_heads = 2, .num_kv_heads = 2, .head_dim = 32};
  // weights of the wrong shape: named.
  Tensor short_weights = PoisonedGpu({2, 7});
  const Status bad = ops::LowRankBlockAttendCuda(q, block, shape, RopeParams{.head_dim = 32}, 0.f,
                                                 short_weights, max, sum, out);
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.message()), Catch::Contains("weights"));
  // A RoPE of another head size.
  CHECK(ops::LowRankBlockAttendCuda(q, block, shape, RopeParams{.head_dim = 64}, 0.f, weights, max,
                                    sum, out)
            .code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::test
