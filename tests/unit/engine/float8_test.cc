// FP8 E4M3 (engine/core/float8.h) against the format's definition: anchor values, every code's
// round trip, and rounding checked against an exhaustive nearest-value search in f64 on fresh
// random inputs.
#include "engine/core/float8.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

float Decode(int code) { return F8E4M3ToF32(Float8E4M3{static_cast<uint8_t>(code)}); }

TEST_CASE("FP8 E4M3 codes decode to the values the format defines", "[unit][engine]") {
  CHECK(Decode(0x00) == 0.0f);
  CHECK(Decode(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(Decode(0x07) == 7 * std::ldexp(1.0f, -9));
  CHECK(Decode(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(Decode(0x38) == 1.0f);
  CHECK(Decode(0x3c) == 1.5f);
  CHECK(Decode(0x40) == 2.0f);
  CHECK(Decode(0x7e) == 448.0f);  // largest finite: no infinities in E4M3FN
  CHECK(std::isnan(Decode(0x7f)));
  CHECK(std::isnan(Decode(0xff)));
  CHECK(Decode(0xb8) == -1.0f);
  CHECK(Decode(0xfe) == -448.0f);
  CHECK(std::signbit(Decode(0x80)));
  // Positive codes are in increasing order, and the negative half mirrors them.
  for (int code = 1; code <= 0x7e; ++code) {
    CAPTURE(code);
    CHECK(Decode(code) > Decode(code - 1));
    CHECK(Decode(code | 0x80) == -Decode(code));
  }
}

TEST_CASE("FP8 E4M3 encoding gives back every code it decodes", "[unit][engine]") {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    CAPTURE(code);
    CHECK(static_cast<int>(F32ToF8E4M3(Decode(code)).bits) == code);
  }
  CHECK((F32ToF8E4M3(NAN).bits & 0x7f) == 0x7f);
}

TEST_CASE("FP8 E4M3 encoding rounds to the nearest value with ties to even", "[unit][engine]") {
  // The nearest finite E4M3 value by exhaustive search in f64; of two equally near, the one
  // whose code is even (an even mantissa). Beyond the range: ±448.
  const auto nearest = [](double x) {
    int best = -1;
    double best_distance = INFINITY;
    for (int code = 0; code < 256; ++code) {
      if ((code & 0x7f) == 0x7f || code == 0x80) continue;  // NaN; -0 equals +0
      const double distance = std::fabs(static_cast<double>(Decode(code)) - x);
      if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
        best = code;
        best_distance = distance;
      }
    }
    return Decode(best);
  };
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<double> log2_magnitude(-12.0, 9.5);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>((i % 2 == 0 ? 1 : -1) * std::exp2(log2_magnitude(rng)));
    CAPTURE(x);
    CHECK(F8E4M3ToF32(F32ToF8E4M3(x)) == nearest(x));
  }
  // Midpoints round to the even neighbour: 1 + 1/16 lies between 1 (0x38) and 1.125 (0x39),
  // 1.125 + 1/16 between 0x39 and 1.25 (0x3a); below the normals, 2.5 · 2^-9 between codes 2, 3.
  CHECK(F32ToF8E4M3(1.0625f).bits == 0x38);
  CHECK(F32ToF8E4M3(1.1875f).bits == 0x3a);
  CHECK(F32ToF8E4M3(2.5f * std::ldexp(1.0f, -9)).bits == 0x02);
  CHECK(F32ToF8E4M3(1e6f).bits == 0x7e);
  CHECK(F32ToF8E4M3(-500.0f).bits == 0xfe);
  CHECK(F32ToF8E4M3(1e-10f).bits == 0x00);
}

}  // namespace
}  // namespace framezip::engine
