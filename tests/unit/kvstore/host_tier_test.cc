#include "kvstore/host_tier.h"

#include <catch2/catch.hpp>

#include "common/crc32c.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using test::BytesOf;
using test::KeyOf;

BlockBytes Bytes(uint64_t seed, size_t size) {
  return std::make_shared<const std::string>(BytesOf(seed, size));
}

TEST_CASE("host tier evicts least recently used first and stays under its byte bound",
          "[unit][kvstore]") {
  PinTable pins;
  HostTier tier({.capacity_bytes = 3000}, &pins, &NullStoreMetrics());
  for (int i = 1; i <= 3; ++i) REQUIRE(tier.Put(KeyOf(i), Bytes(i, 1000), 0, Precision::kF16).ok());
  REQUIRE(tier.Get(KeyOf(1)));  // 1 is now most recent: 2 is the LRU
  auto evicted = tier.Put(KeyOf(4), Bytes(4, 1000), 0, Precision::kInt4);
  REQUIRE(evicted.ok());
  REQUIRE(evicted->size() == 1);
  CHECK((*evicted)[0].key == KeyOf(2));
  CHECK(*(*evicted)[0].block.bytes == BytesOf(2, 1000));
  CHECK_FALSE(tier.Contains(KeyOf(2)));
  CHECK(tier.Contains(KeyOf(1)));

  // A 2000-byte block evicts the two least recent (3, then 1).
  evicted = tier.Put(KeyOf(5), Bytes(5, 2000), 0, Precision::kF16);
  REQUIRE(evicted.ok());
  REQUIRE(evicted->size() == 2);
  CHECK((*evicted)[0].key == KeyOf(3));
  CHECK((*evicted)[1].key == KeyOf(1));
  const TierStats s = tier.Stats();
  CHECK(s.bytes == 3000);
  CHECK(s.blocks == 2);
  CHECK(s.evictions == 3);
  CHECK(s.hits == 1);
  REQUIRE(s.bytes_by_precision.size() == 2);  // f16 (block 5) and int4 (block 4)
  CHECK(s.bytes_by_precision[0].precision == Precision::kF16);
  CHECK(s.bytes_by_precision[0].bytes == 2000);
  CHECK(s.bytes_by_precision[1].bytes == 1000);
  CHECK_FALSE(tier.Get(KeyOf(99)));
  CHECK(tier.Stats().misses == 1);
}

TEST_CASE("host tier never evicts pinned blocks and a Put that cannot fit changes nothing",
          "[unit][kvstore]") {
  PinTable pins;
  HostTier tier({.capacity_bytes = 2000}, &pins, &NullStoreMetrics());
  REQUIRE(tier.Put(KeyOf(1), Bytes(1, 1000), 0, Precision::kF16).ok());
  REQUIRE(tier.Put(KeyOf(2), Bytes(2, 1000), 0, Precision::kF16).ok());
  pins.Pin("s", KeyOf(1), PinTable::Clock::now() + std::chrono::hours(1));
  auto evicted = tier.Put(KeyOf(3), Bytes(3, 1000), 0, Precision::kF16);
  REQUIRE(evicted.ok());
  REQUIRE(evicted->size() == 1);
  CHECK((*evicted)[0].key == KeyOf(2));  // 1 was older but pinned

  pins.Pin("s", KeyOf(3), PinTable::Clock::now() + std::chrono::hours(1));
  auto refused = tier.Put(KeyOf(4), Bytes(4, 1000), 0, Precision::kF16);
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(tier.Contains(KeyOf(1)));
  CHECK(tier.Contains(KeyOf(3)));

  // An expired pin no longer protects.
  pins.Pin("s", KeyOf(1), PinTable::Clock::now() - std::chrono::seconds(1));
  CHECK(tier.Put(KeyOf(4), Bytes(4, 1000), 0, Precision::kF16).ok());
  CHECK_FALSE(tier.Contains(KeyOf(1)));
  CHECK(tier.Put(KeyOf(5), Bytes(5, 5000), 0, Precision::kF16).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace framezip::kvstore
