// KV page pool sizing from free device memory: the pure function, checked against hand-computed
// counts and a brute-force search on random inputs.
#include "engine/core/kv_pool_sizing.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kGiB = 1024 * kMiB;

TEST_CASE("KV pool sizing takes the fraction, subtracts the reserve and counts whole pages",
          "[unit][engine]") {
  // An H200 after loading a 0.5B model: 130 GiB free, 90%, 4 GiB reserve, 2 MiB pages.
  KvPoolSizing sizing{0.9, 2 * kMiB, 4 * kGiB, 0};
  auto pages = KvPagesForFreeBytes(130 * kGiB, sizing);
  REQUIRE(pages.ok());
  // floor(130 GiB * 0.9) = 117 GiB exactly; minus 4 GiB = 113 GiB = 57856 pages of 2 MiB.
  CHECK(*pages == 57856);

  sizing.max_pages = 1000;
  CHECK(*KvPagesForFreeBytes(130 * kGiB, sizing) == 1000);
  sizing.max_pages = 0;

  // A remainder smaller than a page is dropped, never rounded up.
  CHECK(*KvPagesForFreeBytes(3 * kMiB - 1, {1.0, kMiB, 0, 0}) == 2);
  CHECK(*KvPagesForFreeBytes(3 * kMiB, {1.0, kMiB, 0, 0}) == 3);
  // The fraction applies before the reserve.
  CHECK(*KvPagesForFreeBytes(10 * kMiB, {0.5, kMiB, 2 * kMiB, 0}) == 3);
}

TEST_CASE("KV pool sizing refuses bad settings and a pool without room for one page",
          "[unit][engine]") {
  const auto code = [](const StatusOr<int64_t>& r) { return r.status().code(); };
  CHECK(code(KvPagesForFreeBytes(kGiB, {0.0, kMiB, 0, 0})) == absl::StatusCode::kInvalidArgument);
  CHECK(code(KvPagesForFreeBytes(kGiB, {1.5, kMiB, 0, 0})) == absl::StatusCode::kInvalidArgument);
  CHECK(code(KvPagesForFreeBytes(kGiB, {-0.1, kMiB, 0, 0})) == absl::StatusCode::kInvalidArgument);
  CHECK(code(KvPagesForFreeBytes(kGiB, {std::nan(""), kMiB, 0, 0})) ==
        absl::StatusCode::kInvalidArgument);
  CHECK(code(KvPagesForFreeBytes(kGiB, {0.5, 0, 0, 0})) == absl::StatusCode::kInvalidArgument);
  CHECK(code(KvPagesForFreeBytes(kGiB, {0.5, kMiB, 0, -1})) == absl::StatusCode::kInvalidArgument);

  auto none = KvPagesForFreeBytes(8 * kGiB, {0.5, kMiB, 4 * kGiB, 0});
  REQUIRE(none.status().code() == absl::StatusCode::kResourceExhausted);
  INFO(MessageOf(none.status()));
  CHECK(MessageOf(none.status()).find("8589934592 free bytes") != std::string::npos);
  CHECK(MessageOf(none.status()).find("4294967296 byte reserve") != std::string::npos);
  CHECK(code(KvPagesForFreeBytes(0, {1.0, kMiB, 0, 0})) == absl::StatusCode::kResourceExhausted);
}

// The count is the largest n with n * page <= floor(free * fraction) - reserve: checked against
// the definition on fresh random inputs, in exact integer arithmetic where the fraction is k/1024.
TEST_CASE("KV pool sizing matches its definition on random inputs", "[unit][engine]") {
  const uint64_t seed = testing::TestSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2000; ++i) {
    const size_t free_bytes = rng() % (200 * kGiB);
    const uint64_t k = 1 + rng() % 1024;  // fraction k/1024 is exact in binary
    const double fraction = static_cast<double>(k) / 1024.0;
    const size_t page = 1 + rng() % (64 * kMiB);
    const size_t reserve = rng() % (8 * kGiB);
    // free * k / 1024 without overflow: free < 2^38, k <= 2^10.
    const size_t budget = free_bytes * k / 1024;
    const size_t usable = budget > reserve ? budget - reserve : 0;
    const size_t want = usable / page;
    auto got = KvPagesForFreeBytes(free_bytes, {fraction, page, reserve, 0});
    INFO("free " << free_bytes << " fraction " << fraction << " page " << page << " reserve "
                 << reserve);
    if (want == 0) {
      REQUIRE(got.status().code() == absl::StatusCode::kResourceExhausted);
    } else {
      REQUIRE(got.ok());
      REQUIRE(static_cast<size_t>(*got) == want);
    }
  }
}

TEST_CASE("KV pool sizing from the device needs a CUDA device", "[unit][engine]") {
  // On the CPU there is no device memory to size from, in any build.
  CHECK(KvPagesForDevice(Device::Cpu(), {0.9, kMiB, 0, 0}).status().code() ==
        absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace framezip::engine
