// SessionKvCache over an embedded TieredStore: segments chain and come back in order, pins keep
// them, and a session's blocks are its own (keys chain from its key), released with it.
#include "server/session_kv_cache.h"

#include <catch2/catch.hpp>

namespace framezip::server {
namespace {

std::unique_ptr<SessionKvCache> MakeCache(kvstore::TieredStore** raw = nullptr) {
  auto store = kvstore::TieredStore::Open({});
  REQUIRE(store.ok());
  kvstore::TieredStore* embedded = store->get();
  if (raw != nullptr) *raw = embedded;
  return std::make_unique<SessionKvCache>(std::move(*store), embedded,
                                          SessionKvCacheOptions{.model_id = "m"});
}

uint64_t TotalBytes(const std::vector<KvBytes>& v) {
  uint64_t n = 0;
  for (const KvBytes& b : v) n += b.bytes;
  return n;
}

TEST_CASE("session KV segments are stored, loaded in order, and released", "[unit][server]") {
  kvstore::TieredStore* store = nullptr;
  auto cache = MakeCache(&store);
  const std::vector<int32_t> turn1 = {1, 2, 3}, turn2 = {4, 5};
  const std::vector<std::array<uint8_t, 32>> media = {MediaHashBytes(std::string(64, 'a'))};
  REQUIRE(cache->CommitSegment("s1", {"seg0-a", "seg0-b"}, turn1, media, "none", KvPrecision::kF16)
              .ok());
  REQUIRE(cache->CommitSegment("s1", {"seg1"}, turn2, {}, "none", KvPrecision::kF16).ok());
  CHECK(cache->segments("s1") == 2);
  auto loaded = cache->Load("s1");
  REQUIRE(loaded.ok());
  CHECK(loaded->segments == std::vector<std::vector<std::string>>{{"seg0-a", "seg0-b"}, {"seg1"}});
  CHECK(loaded->slowest_tier == kvstore::Tier::kHost);
  const std::vector<KvBytes> held = cache->Bytes("s1");
  REQUIRE(held.size() == 1);
  CHECK(held[0].tier == KvTier::kHost);
  CHECK(held[0].bytes == 6 + 6 + 4);

  // Another session with the same first turn (same tokens, media, policy) gets blocks of its own:
  // keys chain from the session key, so no session can compute or hit another's.
  REQUIRE(cache->CommitSegment("s2", {"seg0-a", "seg0-b"}, turn1, media, "none", KvPrecision::kF16)
              .ok());
  auto stats = store->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->tiers[0].blocks == 5);

  CHECK(TotalBytes(cache->Release("s1")) == 16);
  CHECK(cache->segments("s1") == 0);
  CHECK(absl::IsNotFound(cache->Load("s1").status()));
  // Every block of s1 is gone; s2's stay.
  stats = store->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->tiers[0].blocks == 2);
  auto s2 = cache->Load("s2");
  REQUIRE(s2.ok());
  CHECK(s2->segments.size() == 1);
  cache->Release("s2");
  stats = store->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->tiers[0].blocks == 0);
}

TEST_CASE("a session's chain reads as missing once the store lost any of its blocks",
          "[unit][server]") {
  kvstore::TieredStore* store = nullptr;
  auto cache = MakeCache(&store);
  CHECK(cache->ChainPresent("s1").value());  // nothing committed: nothing missing
  const std::vector<int32_t> turn1 = {1, 2, 3}, turn2 = {4, 5};
  REQUIRE(cache->CommitSegment("s1", {"a", "b"}, turn1, {}, "none", KvPrecision::kF16).ok());
  REQUIRE(cache->CommitSegment("s1", {"c"}, turn2, {}, "none", KvPrecision::kF16).ok());
  REQUIRE(cache->CommitSegment("s2", {"a"}, turn1, {}, "none", KvPrecision::kF16).ok());
  CHECK(cache->ChainPresent("s1").value());
  // One block in the middle of s1's chain goes (evicted, a Redis flush): s1's chain is broken,
  // s2's is whole.
  const auto blocks = cache->SharedSegments("s1");
  REQUIRE(blocks.size() == 2);
  const kvstore::BlockKey middle = blocks[0][1].key;
  REQUIRE(store->Delete(std::span<const kvstore::BlockKey>(&middle, 1)).value() == 1);
  CHECK_FALSE(cache->ChainPresent("s1").value());
  CHECK(cache->ChainPresent("s2").value());
  // Starting over: released, the session commits a full segment from the root and is whole.
  cache->Release("s1");
  REQUIRE(cache
              ->CommitSegment("s1", {"abc"}, std::vector<int32_t>{1, 2, 3, 4, 5}, {}, "none",
                              KvPrecision::kF16)
              .ok());
  CHECK(cache->segments("s1") == 1);
  CHECK(cache->ChainPresent("s1").value());
  CHECK(cache->Load("s1").value().segments == std::vector<std::vector<std::string>>{{"abc"}});
}

TEST_CASE("different media give different session KV keys", "[unit][server]") {
  kvstore::TieredStore* store = nullptr;
  auto cache = MakeCache(&store);
  const std::vector<int32_t> tokens = {7, 8, 9};
  REQUIRE(cache
              ->CommitSegment("a", {"x"}, tokens, {MediaHashBytes(std::string(64, '1'))}, "none",
                              KvPrecision::kF16)
              .ok());
  REQUIRE(cache
              ->CommitSegment("b", {"y"}, tokens, {MediaHashBytes(std::string(64, '2'))}, "none",
                              KvPrecision::kF16)
              .ok());
  auto stats = store->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->tiers[0].blocks == 2);
  auto a = cache->Load("a");
  auto b = cache->Load("b");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->segments[0][0] == "x");
  CHECK(b->segments[0][0] == "y");
  CHECK(MediaHashBytes("not hex") == std::array<uint8_t, 32>{});
}

}  // namespace
}  // namespace framezip::server
