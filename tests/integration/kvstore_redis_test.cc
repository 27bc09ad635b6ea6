// The Redis tier against a real redis-server (Debian's, on a free loopback port): chunked values,
// TTL, sharing between two stores (replicas), corruption, and Redis going down and coming back
// while the other tiers keep serving.
#include <signal.h>

#include <catch2/catch.hpp>
#include <thread>

#include "common/crc32c.h"
#include "kvstore/tiered_store.h"
#include "tests/integration/kvstore_harness.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using namespace std::chrono_literals;
using test::BytesOf;
using test::KeyOf;

RedisTierOptions RedisOptions(const test::RedisServer& redis) {
  RedisTierOptions o;
  o.port = redis.port();
  o.chunk_bytes = 64 << 10;
  o.backoff_initial = 20ms;
  o.backoff_max = 200ms;
  o.connect_timeout = 200ms;
  o.command_timeout = 2000ms;
  return o;
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

TEST_CASE("redis tier stores chunked blocks with a TTL and shares them between stores",
          "[integration][kvstore]") {
  testing::TempDir dir;
  test::RedisServer redis(dir.path());
  REQUIRE(redis.running());

  RedisTier tier(RedisOptions(redis), &NullStoreMetrics());
  const std::string big = BytesOf(1, (1 << 20) + 123);  // 17 chunks, the last one short
  REQUIRE(tier.Put(KeyOf(1), big, Crc32c(big), Precision::kInt2, 0).ok());
  auto block = tier.Get(KeyOf(1));
  REQUIRE(block.ok());
  CHECK(*block->bytes == big);
  CHECK(block->precision == Precision::kInt2);
  CHECK(block->served_from == Tier::kRedis);
  const std::string meta = redis.Command({"GET", "fzkv:" + BlockKeyHex(KeyOf(1))});
  CHECK(meta.rfind("FZKV1 1048699 ", 0) == 0);
  CHECK(redis.Command({"STRLEN", "fzkv:" + BlockKeyHex(KeyOf(1)) + ":16"}) == "123");
  auto ttl = tier.TtlOf(KeyOf(1));
  REQUIRE(ttl.ok());
  REQUIRE(ttl->has_value());
  CHECK(**ttl > 3500);
  CHECK(**ttl <= 3600);
  CHECK(tier.Get(KeyOf(2)).status().code() == absl::StatusCode::kNotFound);

  // A block with a 1 s TTL disappears on its own (all chunks: no partial value is served).
  const std::string small = BytesOf(3, 200 << 10);
  REQUIRE(tier.Put(KeyOf(3), small, Crc32c(small), Precision::kF16, 1).ok());
  CHECK(tier.Get(KeyOf(3)).ok());
  CHECK(Eventually([&] { return tier.Get(KeyOf(3)).status().code() == absl::StatusCode::kNotFound; },
                   5s));
  CHECK(redis.Command({"EXISTS", "fzkv:" + BlockKeyHex(KeyOf(3)) + ":0"}) == "0");

  // Two replicas: A writes through to Redis, B (its own RAM, no disk) reads it from there.
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 8 << 20};
  options.redis = RedisOptions(redis);
  auto a = TieredStore::Open(options);
  auto b = TieredStore::Open(options);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto put = (*a)->Put(KeyOf(10), BytesOf(10, 300 << 10), {.precision = Precision::kInt4});
  REQUIRE(put.ok());
  CHECK(put->tiers == std::vector<Tier>{Tier::kHost, Tier::kRedis});
  auto found = (*b)->Lookup(std::vector<BlockKey>{KeyOf(10), KeyOf(11)});
  REQUIRE(found.ok());
  CHECK(found->present_prefix == 1);
  CHECK(found->tiers == std::vector<Tier>{Tier::kRedis});
  auto shared = (*b)->Get(KeyOf(10));
  REQUIRE(shared.ok());
  CHECK(shared->served_from == Tier::kRedis);
  CHECK(*shared->bytes == BytesOf(10, 300 << 10));
  CHECK((*b)->Get(KeyOf(10))->served_from == Tier::kHost);  // promoted
  CHECK((*b)->Delete(std::vector<BlockKey>{KeyOf(10)}).value() == 1);
  CHECK(tier.Get(KeyOf(10)).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("redis tier never serves a corrupted value", "[integration][kvstore]") {
  testing::TempDir dir;
  test::RedisServer redis(dir.path());
  REQUIRE(redis.running());
  RedisTier tier(RedisOptions(redis), &NullStoreMetrics());
  const std::string bytes = BytesOf(5, 100 << 10);
  REQUIRE(tier.Put(KeyOf(5), bytes, Crc32c(bytes), Precision::kF16, 0).ok());
  std::string chunk = bytes.substr(64 << 10);
  chunk[10] ^= 1;
  REQUIRE(redis.Command({"SET", "fzkv:" + BlockKeyHex(KeyOf(5)) + ":1", chunk}) == "OK");
  CHECK(tier.Get(KeyOf(5)).status().code() == absl::StatusCode::kNotFound);
  CHECK(tier.Stats().corrupt_blocks == 1);
  CHECK(redis.Command({"EXISTS", "fzkv:" + BlockKeyHex(KeyOf(5))}) == "0");  // dropped
}

TEST_CASE("redis down: its tier is cleanly unavailable and the others keep working, and back it is used again",
          "[integration][kvstore]") {
  testing::TempDir dir;
  test::RedisServer redis(dir.path());
  REQUIRE(redis.running());
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 2 << 20};
  options.disk = DiskTierOptions{.dir = dir / "disk"};
  options.redis = RedisOptions(redis);
  auto opened = TieredStore::Open(options);
  REQUIRE(opened.ok());
  TieredStore& store = **opened;
  REQUIRE(store.Put(KeyOf(1), BytesOf(1, 512 << 10)).value().tiers.size() == 3);
  // A block only Redis has (written there by "another replica").
  const std::string remote_only = BytesOf(2, 1000);
  REQUIRE(store.redis()->Put(KeyOf(2), remote_only, Crc32c(remote_only), Precision::kF16, 0).ok());

  redis.Kill();
  const auto start = std::chrono::steady_clock::now();
  auto put = store.Put(KeyOf(3), BytesOf(3, 512 << 10));
  REQUIRE(put.ok());
  CHECK(put->tiers == std::vector<Tier>{Tier::kHost, Tier::kDisk});
  CHECK(put->durable);
  auto get = store.Get(KeyOf(1));
  REQUIRE(get.ok());
  CHECK(*get->bytes == BytesOf(1, 512 << 10));
  auto missing = store.Get(KeyOf(2));
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(MessageOf(missing.status()), Catch::Contains("redis tier unavailable"));
  CHECK(store.Lookup(std::vector<BlockKey>{KeyOf(1), KeyOf(3), KeyOf(2)}).value().present_prefix ==
        2);
  CHECK(std::chrono::steady_clock::now() - start < 2s);  // fails fast, no hang
  const auto redis_stats = store.Stats().value().tiers.back();
  CHECK(redis_stats.tier == Tier::kRedis);
  CHECK_FALSE(redis_stats.available);
  CHECK(redis_stats.write_failures >= 1);
  CHECK(store.redis()->Put(KeyOf(4), "x", Crc32c("x"), Precision::kF16, 0).code() ==
        absl::StatusCode::kUnavailable);

  REQUIRE(redis.Start());  // back, on the same port, empty
  CHECK(Eventually([&] { return store.redis()->Put(KeyOf(4), "x", Crc32c("x"),
                                                   Precision::kF16, 0).ok(); },
                   5s));
  CHECK(store.redis()->available());
  auto again = store.Put(KeyOf(5), BytesOf(5, 1000));
  REQUIRE(again.ok());
  CHECK(again->tiers == std::vector<Tier>{Tier::kHost, Tier::kDisk, Tier::kRedis});
  CHECK(*store.redis()->Get(KeyOf(5)).value().bytes == BytesOf(5, 1000));
}

}  // namespace
}  // namespace framezip::kvstore
