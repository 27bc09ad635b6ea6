#include "tests/testing/random.h"

#include <cstdio>
#include <cstdlib>

namespace framezip::testing {

uint64_t TestSeed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("FRAMEZIP_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    std::random_device rd;
    const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
    std::fprintf(stderr, "random test inputs: FRAMEZIP_TEST_SEED=%llu\n",
                 static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

std::vector<float> RandomNormal(size_t n, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace framezip::testing
