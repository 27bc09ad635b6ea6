#include "kvstore/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/crc32c.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using test::BytesOf;
using test::KeyOf;

constexpr size_t kBlock = 1000;

std::unique_ptr<DiskTier> OpenTier(const DiskTierOptions& options, const PinTable* pins = nullptr) {
  auto tier = DiskTier::Open(options, pins, &NullStoreMetrics());
  REQUIRE(tier.ok());
  return std::move(tier).value();
}

void PutBlock(DiskTier& tier, uint64_t n, size_t size = kBlock) {
  const std::string bytes = BytesOf(n, size);
  REQUIRE(tier.Put(KeyOf(n), bytes, Crc32c(bytes), Precision::kInt4).ok());
}

void ExpectBlock(DiskTier& tier, uint64_t n, size_t size = kBlock) {
  auto block = tier.Get(KeyOf(n));
  REQUIRE(block.ok());
  CHECK(*block->bytes == BytesOf(n, size));
  CHECK(block->precision == Precision::kInt4);
  CHECK(block->served_from == Tier::kDisk);
}

std::vector<std::filesystem::path> Segments(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".fzkv" && std::filesystem::file_size(e.path()) > 0) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void FlipByte(const std::filesystem::path& file, uint64_t offset) {
  const int fd = ::open(file.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  char c = 0;
  REQUIRE(::pread(fd, &c, 1, static_cast<off_t>(offset)) == 1);
  c ^= 0x40;
  REQUIRE(::pwrite(fd, &c, 1, static_cast<off_t>(offset)) == 1);
  ::close(fd);
}

TEST_CASE("disk tier round-trips blocks and rebuilds its index after reopening",
          "[unit][kvstore]") {
  testing::TempDir dir;
  const DiskTierOptions options{.dir = dir.path(), .segment_bytes = 4096};
  {
    auto tier = OpenTier(options);
    for (int i = 1; i <= 10; ++i) PutBlock(*tier, i);
    auto durable = tier->Put(KeyOf(1), BytesOf(1, kBlock), Crc32c(BytesOf(1, kBlock)),
                             Precision::kInt4);
    REQUIRE(durable.ok());
    CHECK(*durable);  // per-block fsync
    for (int i = 1; i <= 10; ++i) ExpectBlock(*tier, i);
    CHECK(tier->Get(KeyOf(99)).status().code() == absl::StatusCode::kNotFound);
    CHECK(Segments(dir.path()).size() >= 3);  // rotated at 4 KiB
    CHECK(tier->Erase(KeyOf(3)));
    CHECK_FALSE(tier->Erase(KeyOf(3)));
    // A second process (or store) cannot open the same directory.
    CHECK(DiskTier::Open(options, nullptr, &NullStoreMetrics()).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
  auto tier = OpenTier(options);
  const TierStats s = tier->Stats();
  CHECK(s.blocks == 9);
  CHECK(s.bytes == 9 * kBlock);
  CHECK(s.corrupt_blocks == 0);
  REQUIRE(s.bytes_by_precision.size() == 1);
  CHECK(s.bytes_by_precision[0].precision == Precision::kInt4);
  for (int i = 1; i <= 10; ++i) {
    if (i == 3) {
      CHECK_FALSE(tier->Contains(KeyOf(3)));  // the tombstone survived the restart
    } else {
      ExpectBlock(*tier, i);
    }
  }
}

TEST_CASE("disk tier ignores a torn last record after a crash and keeps the rest",
          "[unit][kvstore]") {
  testing::TempDir dir;
  const DiskTierOptions options{.dir = dir.path(), .segment_bytes = 1 << 20};
  { auto tier = OpenTier(options); for (int i = 1; i <= 4; ++i) PutBlock(*tier, i); }
  // Simulate a crash mid-append: cut the last record in half.
  const auto segment = Segments(dir.path()).back();
  const auto size = std::filesystem::file_size(segment);
  std::filesystem::resize_file(segment, size - kBlock / 2);
  auto tier = OpenTier(options);
  for (int i = 1; i <= 3; ++i) ExpectBlock(*tier, i);
  CHECK_FALSE(tier->Contains(KeyOf(4)));
  CHECK(tier->Stats().corrupt_blocks == 1);
  PutBlock(*tier, 4);  // appends go to a fresh segment
  ExpectBlock(*tier, 4);
}

TEST_CASE("disk tier never serves a corrupted record: it reads as missing and is counted",
          "[unit][kvstore]") {
  testing::TempDir dir;
  const DiskTierOptions options{.dir = dir.path(), .segment_bytes = 4096};
  { auto tier = OpenTier(options); for (int i = 1; i <= 6; ++i) PutBlock(*tier, i); }
  // Flip one payload byte of the first record of the oldest (sealed, not re-verified) segment,
  // and one header byte of its second record.
  const auto oldest = Segments(dir.path()).front();
  const uint64_t record = disk::RecordBytes(kBlock);
  FlipByte(oldest, disk::kHeaderBytes + 500);
  FlipByte(oldest, record + 41);  // inside the length field
  auto tier = OpenTier(options);
  auto first = tier->Get(KeyOf(1));
  CHECK(first.status().code() == absl::StatusCode::kNotFound);
  CHECK_FALSE(tier->Contains(KeyOf(1)));  // dropped
  CHECK_FALSE(tier->Contains(KeyOf(2)));  // never indexed: its header fails its CRC
  CHECK(tier->Stats().corrupt_blocks == 2);
  for (int i = 4; i <= 6; ++i) ExpectBlock(*tier, i);
}

TEST_CASE("disk tier compaction reclaims deleted records and loses none of the live ones",
          "[unit][kvstore]") {
  testing::TempDir dir;
  const DiskTierOptions options{.dir = dir.path(), .segment_bytes = 4096};
  auto tier = OpenTier(options);
  for (int i = 1; i <= 12; ++i) PutBlock(*tier, i);
  const uint64_t before = tier->FileBytes();
  for (int i = 1; i <= 12; ++i) {
    if (i % 3 != 0) REQUIRE(tier->Erase(KeyOf(i)));
  }
  auto compacted = tier->Compact();
  REQUIRE(compacted.ok());
  CHECK(*compacted >= 3);
  CHECK(tier->FileBytes() < before - 5 * disk::RecordBytes(kBlock));  // 6 dead records gone
  for (int i = 3; i <= 12; i += 3) ExpectBlock(*tier, i);
  tier.reset();
  tier = OpenTier(options);
  CHECK(tier->Stats().blocks == 4);
  for (int i = 1; i <= 12; ++i) {
    if (i % 3 == 0) ExpectBlock(*tier, i);
    else CHECK_FALSE(tier->Contains(KeyOf(i)));
  }
}

TEST_CASE("disk tier evicts oldest segments first under its byte cap and keeps pinned blocks",
          "[unit][kvstore]") {
  testing::TempDir dir;
  PinTable pins;
  const uint64_t record = disk::RecordBytes(kBlock);
  // Segments hold 3 records; the cap holds 9.
  const DiskTierOptions options{.dir = dir.path(), .capacity_bytes = 9 * record,
                                .segment_bytes = 3 * record};
  auto tier = OpenTier(options, &pins);
  for (int i = 1; i <= 9; ++i) PutBlock(*tier, i);
  pins.Pin("session", KeyOf(2), PinTable::Clock::now() + std::chrono::hours(1));
  PutBlock(*tier, 10);  // evicts the oldest segment {1,2,3}; 2 is pinned and moves forward
  CHECK(tier->FileBytes() <= 9 * record + record);
  CHECK_FALSE(tier->Contains(KeyOf(1)));
  CHECK_FALSE(tier->Contains(KeyOf(3)));
  ExpectBlock(*tier, 2);
  for (int i = 4; i <= 10; ++i) ExpectBlock(*tier, i);
  CHECK(tier->Stats().evictions == 2);
  for (int i = 11; i <= 30; ++i) PutBlock(*tier, i);
  CHECK(tier->FileBytes() <= 10 * record);
  ExpectBlock(*tier, 2);  // still there after many more evictions
  CHECK(tier->Contains(KeyOf(30)));
  CHECK_FALSE(tier->Contains(KeyOf(10)));
  // A block larger than the whole cap is refused.
  const std::string huge = BytesOf(1, 10 * record);
  CHECK(tier->Put(KeyOf(1000), huge, Crc32c(huge), Precision::kF16).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("disk tier full of pinned blocks refuses writes cleanly", "[unit][kvstore]") {
  testing::TempDir dir;
  PinTable pins;
  const uint64_t record = disk::RecordBytes(kBlock);
  auto tier = OpenTier({.dir = dir.path(), .capacity_bytes = 4 * record,
                        .segment_bytes = 2 * record},
                       &pins);
  for (int i = 1; i <= 4; ++i) {
    PutBlock(*tier, i);
    pins.Pin("s", KeyOf(i), PinTable::Clock::now() + std::chrono::hours(1));
  }
  const std::string bytes = BytesOf(5, kBlock);
  auto s = tier->Put(KeyOf(5), bytes, Crc32c(bytes), Precision::kF16);
  CHECK(s.status().code() == absl::StatusCode::kResourceExhausted);
  for (int i = 1; i <= 4; ++i) ExpectBlock(*tier, i);
  CHECK(tier->Stats().write_failures == 1);
}

TEST_CASE("disk tier with no space left: writes fail cleanly, reads keep working, no torn record",
          "[unit][kvstore]") {
  testing::TempDir dir;
  const uint64_t record = disk::RecordBytes(kBlock);
  DiskTierOptions options{.dir = dir.path(), .segment_bytes = 1 << 20,
                          .inject_enospc_after_bytes = 3 * record + 10};
  {
    auto tier = OpenTier(options);
    for (int i = 1; i <= 3; ++i) PutBlock(*tier, i);
    const std::string bytes = BytesOf(4, kBlock);
    auto s = tier->Put(KeyOf(4), bytes, Crc32c(bytes), Precision::kInt4);
    CHECK(s.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(MessageOf(s.status()), Catch::Contains("No space left"));
    CHECK(tier->Put(KeyOf(4), bytes, Crc32c(bytes), Precision::kInt4).status().code() ==
          absl::StatusCode::kResourceExhausted);
    CHECK_FALSE(tier->Contains(KeyOf(4)));
    for (int i = 1; i <= 3; ++i) ExpectBlock(*tier, i);
    CHECK(tier->Stats().write_failures == 2);
    CHECK(tier->FileBytes() == 3 * record);  // the half-written record was cut off
  }
  options.inject_enospc_after_bytes = 0;  // space is back
  auto tier = OpenTier(options);
  CHECK(tier->Stats().corrupt_blocks == 0);
  for (int i = 1; i <= 3; ++i) ExpectBlock(*tier, i);
  PutBlock(*tier, 4);
  ExpectBlock(*tier, 4);
}

TEST_CASE("disk tier fsync policies: batch and off store and reload the same", "[unit][kvstore]") {
  for (FsyncPolicy policy : {FsyncPolicy::kPerBatch, FsyncPolicy::kOff}) {
    testing::TempDir dir;
    const DiskTierOptions options{.dir = dir.path(), .fsync = policy,
                                  .fsync_batch_bytes = 3 * kBlock,
                                  .fsync_batch_interval = std::chrono::milliseconds(5)};
    {
      auto tier = OpenTier(options);
      for (int i = 1; i <= 8; ++i) {
        const std::string bytes = BytesOf(i, kBlock);
        auto durable = tier->Put(KeyOf(i), bytes, Crc32c(bytes), Precision::kInt4);
        REQUIRE(durable.ok());
        CHECK_FALSE(*durable);
      }
      REQUIRE(tier->Sync().ok());
    }
    auto tier = OpenTier(options);
    for (int i = 1; i <= 8; ++i) ExpectBlock(*tier, i);
  }
  CHECK(ParseFsyncPolicy("block").value() == FsyncPolicy::kPerBlock);
  CHECK(ParseFsyncPolicy("sometimes").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::kvstore
