#include "kvstore/tiered_store.h"

#include <catch2/catch.hpp>

#include "common/crc32c.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using test::BytesOf;
using test::KeyOf;

constexpr size_t kBlock = 1000;

std::unique_ptr<TieredStore> OpenStore(TieredStoreOptions options) {
  auto store = TieredStore::Open(std::move(options));
  REQUIRE(store.ok());
  return std::move(store).value();
}

const TierStats& StatsOf(const StoreStats& stats, Tier tier) {
  for (const TierStats& s : stats.tiers) {
    if (s.tier == tier) return s;
  }
  FAIL("no stats for tier");
  return stats.tiers.front();
}

PutResult PutBlock(KvStore& store, uint64_t n, PutOptions options = {}) {
  options.precision = Precision::kInt4;
  auto result = store.Put(KeyOf(n), BytesOf(n, kBlock), options);
  REQUIRE(result.ok());
  return *result;
}

TEST_CASE("tiered store writes through to disk, promotes disk hits and demotes nothing twice",
          "[unit][kvstore]") {
  testing::TempDir dir;
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 3 * kBlock};
  options.disk = DiskTierOptions{.dir = dir.path()};
  auto store = OpenStore(options);
  const PutResult first = PutBlock(*store, 1);
  CHECK(first.tiers == std::vector<Tier>{Tier::kHost, Tier::kDisk});
  CHECK(first.durable);
  CHECK_FALSE(first.already_present);
  CHECK(PutBlock(*store, 1).already_present);
  for (int i = 2; i <= 5; ++i) PutBlock(*store, i);  // host holds 3: 1 and 2 left it

  auto block = store->Get(KeyOf(1));
  REQUIRE(block.ok());
  CHECK(block->served_from == Tier::kDisk);
  CHECK(*block->bytes == BytesOf(1, kBlock));
  CHECK(block->crc32c == Crc32c(BytesOf(1, kBlock)));
  CHECK(store->host()->Contains(KeyOf(1)));  // promoted
  CHECK(store->Get(KeyOf(1))->served_from == Tier::kHost);
  CHECK(store->Get(KeyOf(1), {.promote = false})->served_from == Tier::kHost);
  CHECK(store->Get(KeyOf(2), {.promote = false})->served_from == Tier::kDisk);
  CHECK_FALSE(store->host()->Contains(KeyOf(2)));

  auto stats = store->Stats();
  REQUIRE(stats.ok());
  CHECK(StatsOf(*stats, Tier::kDisk).promotions == 1);
  CHECK(StatsOf(*stats, Tier::kDisk).blocks == 5);
  CHECK(StatsOf(*stats, Tier::kHost).blocks == 3);
  CHECK(StatsOf(*stats, Tier::kHost).evictions >= 2);
  CHECK(store->Get(KeyOf(42)).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("tiered store write-back keeps blocks in RAM and demotes them to disk under pressure",
          "[unit][kvstore]") {
  testing::TempDir dir;
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 2 * kBlock};
  options.disk = DiskTierOptions{.dir = dir.path()};
  options.write_mode = WriteMode::kWriteBack;
  {
    auto store = OpenStore(options);
    CHECK(PutBlock(*store, 1).tiers == std::vector<Tier>{Tier::kHost});
    PutBlock(*store, 2);
    CHECK_FALSE(store->disk()->Contains(KeyOf(1)));
    PutBlock(*store, 3);  // evicts 1 from host: demoted to disk, not lost
    CHECK(store->disk()->Contains(KeyOf(1)));
    CHECK_FALSE(store->disk()->Contains(KeyOf(3)));
    for (int i = 1; i <= 3; ++i) CHECK(*store->Get(KeyOf(i))->bytes == BytesOf(i, kBlock));
    REQUIRE(store->Flush().ok());
    CHECK(store->disk()->Contains(KeyOf(3)));
  }
  options.write_mode = WriteMode::kWriteThrough;
  auto store = OpenStore(options);
  for (int i = 1; i <= 3; ++i) CHECK(*store->Get(KeyOf(i))->bytes == BytesOf(i, kBlock));
}

TEST_CASE("tiered store lookup finds the longest present prefix, pins and prefetches it",
          "[unit][kvstore]") {
  testing::TempDir dir;
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 4 * kBlock};
  options.disk = DiskTierOptions{.dir = dir.path()};
  auto store = OpenStore(options);
  for (int i = 1; i <= 6; ++i) PutBlock(*store, i);  // 1, 2 only on disk now
  const std::vector<BlockKey> chain = {KeyOf(1), KeyOf(2), KeyOf(3), KeyOf(77), KeyOf(4)};
  auto found = store->Lookup(chain, {.pin_session_id = "s1", .prefetch = true});
  REQUIRE(found.ok());
  CHECK(found->present_prefix == 3);
  CHECK(found->tiers == std::vector<Tier>{Tier::kDisk, Tier::kDisk, Tier::kHost});
  CHECK(found->present_bytes == 3 * kBlock);
  store->WaitForPrefetches();
  CHECK(store->host()->Contains(KeyOf(1)));
  CHECK(store->host()->Contains(KeyOf(2)));
  CHECK(StatsOf(*store->Stats(), Tier::kHost).pinned_blocks == 3);

  // Pinned blocks survive a flood of new blocks; unpinned ones are evicted.
  for (int i = 10; i <= 20; ++i) PutBlock(*store, i);
  for (int i : {1, 2, 3}) CHECK(store->host()->Contains(KeyOf(i)));
  CHECK(store->Unpin("s1", std::vector<BlockKey>{KeyOf(1), KeyOf(2), KeyOf(3)}).value() == 3);
  CHECK(store->Unpin("s1", std::vector<BlockKey>{KeyOf(1)}).value() == 0);
  for (int i = 21; i <= 25; ++i) PutBlock(*store, i);
  CHECK_FALSE(store->host()->Contains(KeyOf(1)));
  CHECK(store->Get(KeyOf(1)).ok());  // still on disk

  CHECK(store->Lookup(std::vector<BlockKey>{KeyOf(99)}).value().present_prefix == 0);
  CHECK(store->Pin("s2", std::vector<BlockKey>{KeyOf(4), KeyOf(99)}).value() == 1);
  CHECK(store->Delete(std::vector<BlockKey>{KeyOf(4), KeyOf(99)}).value() == 1);
  CHECK(store->Get(KeyOf(4)).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("tiered store pin TTL: expired pins stop protecting blocks", "[unit][kvstore]") {
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 2 * kBlock};
  auto store = OpenStore(options);
  PutBlock(*store, 1, {.pin_session_id = "s"});
  REQUIRE(store->Pin("s", std::vector<BlockKey>{KeyOf(1)}, std::chrono::seconds(1)).value() == 1);
  PutBlock(*store, 2);
  PutBlock(*store, 3);  // evicts 2, not the pinned 1
  CHECK(store->host()->Contains(KeyOf(1)));
  CHECK_FALSE(store->host()->Contains(KeyOf(2)));
  // Host-only store full of pinned blocks refuses with RESOURCE_EXHAUSTED.
  REQUIRE(store->Pin("s", std::vector<BlockKey>{KeyOf(3)}, std::chrono::seconds(1)).value() == 1);
  CHECK(store->Put(KeyOf(4), BytesOf(4, kBlock)).status().code() ==
        absl::StatusCode::kResourceExhausted);
  // Wait (bounded) for the 1 s pins to lapse.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!store->Put(KeyOf(4), BytesOf(4, kBlock)).ok()) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(store->Put(KeyOf(5), BytesOf(5, 10 * kBlock)).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("tiered store falls back to disk when RAM is pinned full, and to RAM when disk is full",
          "[unit][kvstore]") {
  testing::TempDir dir;
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 3 * kBlock};
  options.disk = DiskTierOptions{.dir = dir.path(),
                                 .inject_enospc_after_bytes = 2 * disk::RecordBytes(kBlock)};
  auto store = OpenStore(options);
  PutBlock(*store, 1);
  PutBlock(*store, 2);
  const PutResult third = PutBlock(*store, 3);  // disk "full": lands in RAM only
  CHECK(third.tiers == std::vector<Tier>{Tier::kHost});
  CHECK_FALSE(third.durable);
  CHECK(StatsOf(*store->Stats(), Tier::kDisk).write_failures == 1);
  for (int i = 1; i <= 3; ++i) CHECK(store->Get(KeyOf(i)).ok());
  CHECK(store->Put(KeyOf(9), BytesOf(9, 1 << 20), {.highest_tier = Tier::kDisk}).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace framezip::kvstore
