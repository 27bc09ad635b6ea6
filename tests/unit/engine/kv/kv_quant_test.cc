// KIVI quantisation (engine/ops/kv_quant.h): bit-exact packing and the round-trip bound
// |x - x̂| <= scale/2 with the stored f16 scale (docs/methods.md §5.3 item 4).
#include "engine/ops/kv_quant.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/random.h"

namespace framezip::engine::ops::kvq {
namespace {

TEST_CASE("Packed code blocks unpack bit-exactly in the documented layout", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int bits = GENERATE(4, 2);
  CAPTURE(bits);
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
  for (int trial = 0; trial < 100; ++trial) {
    uint8_t in[kQuantGroup], out[kQuantGroup], packed[16] = {};
    for (auto& c : in) c = static_cast<uint8_t>(code(rng));
    PackBlock(in, bits, packed);
    UnpackBlock(packed, bits, out);
    for (int j = 0; j < kQuantGroup; ++j) REQUIRE(out[j] == in[j]);
    // The layout the AVX2 unpacker relies on.
    if (bits == 4) {
      for (int j = 0; j < 16; ++j) REQUIRE(packed[j] == (in[j] | in[j + 16] << 4));
    } else {
      for (int j = 0; j < 8; ++j) {
        REQUIRE(packed[j] == (in[j] | in[j + 8] << 2 | in[j + 16] << 4 | in[j + 24] << 6));
      }
      for (int j = 8; j < 16; ++j) REQUIRE(packed[j] == 0);  // writes exactly 8 bytes
    }
  }
}

// Random rows with a few outlier channels (as real keys have) and a constant channel.
std::vector<float> MakeRows(int64_t n, int64_t c, std::mt19937_64& rng) {
  auto x = testing::RandomNormal(static_cast<size_t>(n * c), rng, 1.5f);
  for (int64_t t = 0; t < n; ++t) {
    x[t * c + 3] *= 40.f;  // outlier channel
    x[t * c + 5] = 0.3f;   // constant channel
  }
  return x;
}

TEST_CASE("Quantise/dequantise round trip stays within scale/2", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int bits = GENERATE(4, 2);
  const int64_t n = GENERATE(1, 7, 32);
  const bool keys = GENERATE(true, false);
  CAPTURE(bits, n, keys);
  const int64_t c = 96, levels = (1 << bits) - 1, groups = c / kQuantGroup;
  const auto x = MakeRows(n, c, rng);
  std::vector<uint8_t> codes(static_cast<size_t>(n) * CodeRowBytes(c, bits));
  const size_t params = keys ? static_cast<size_t>(c) : static_cast<size_t>(n * groups);
  std::vector<Float16> scale(params), zero(params);
  std::vector<float> y(x.size());
  if (keys) {
    QuantizeKeys(x.data(), n, c, bits, codes.data(), scale.data(), zero.data());
    DequantizeKeys(codes.data(), scale.data(), zero.data(), n, c, bits, y.data());
  } else {
    QuantizeValues(x.data(), n, c, bits, codes.data(), scale.data(), zero.data(), n);
    DequantizeValues(codes.data(), scale.data(), zero.data(), n, c, bits, n, y.data());
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t p = keys ? static_cast<size_t>(ch) : static_cast<size_t>(ch / 32 * n + t);
      const double s = F16ToF32(scale[p]);
      const double xv = x[t * c + ch];
      CAPTURE(t, ch, xv, y[t * c + ch], s);
      REQUIRE(std::fabs(xv - y[t * c + ch]) <= s / 2 + 1e-6 * std::max(1.0, std::fabs(xv)));
    }
  }
  // The scale is (nearly) the minimal one for its group's range, so the bound has teeth: it may
  // exceed (max - min) / L only by the f16 rounding of zero (down) and scale (up).
  for (size_t p = 0; p < params; ++p) {
    double lo = 1e30, hi = -1e30;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const size_t q = keys ? static_cast<size_t>(ch) : static_cast<size_t>(ch / 32 * n + t);
        if (q != p) continue;
        lo = std::min(lo, double(x[t * c + ch]));
        hi = std::max(hi, double(x[t * c + ch]));
      }
    }
    const double s = F16ToF32(scale[p]), z = F16ToF32(zero[p]);
    CAPTURE(p, lo, hi, s, z);
    REQUIRE(z <= lo);
    REQUIRE(lo - z <= std::fabs(lo) * 1e-3 + 1e-7);
    REQUIRE(s * levels >= hi - z - 1e-6);
    REQUIRE(s <= (hi - z) / levels * (1 + 2e-3) + 1e-7);
  }
}

}  // namespace
}  // namespace framezip::engine::ops::kvq
