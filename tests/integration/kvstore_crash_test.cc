// Crash safety of framezip-kvstore's disk tier, with the real daemon: SIGKILL while writing
// (every block acknowledged under fsync-per-block comes back intact, no torn block is ever
// served), a corrupted segment byte (the block reads as missing and the corruption is counted),
// and a full disk (writes fail cleanly, reads keep working).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "kvstore/disk_record.h"
#include "kvstore/service/remote_store.h"
#include "tests/integration/kvstore_harness.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using namespace std::chrono_literals;
using test::BytesOf;
using test::KeyOf;

std::unique_ptr<service::RemoteStore> Client(const test::KvstoreDaemon& daemon) {
  auto client = service::RemoteStore::Connect(
      {.address = daemon.address(), .timeout = 10s, .connect_timeout = 10s});
  REQUIRE(client.ok());
  return std::move(client).value();
}

std::vector<std::string> DiskOnly(const std::filesystem::path& disk,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--kv-host-bytes", "0", "--kv-disk-path", disk.string(),
                                   "--kv-fsync", "block", "--kv-disk-segment-bytes",
                                   std::to_string(2 << 20)};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST_CASE("kill -9 while writing: every acknowledged block survives intact",
          "[integration][kvstore]") {
  testing::TempDir dir;
  const auto disk = dir / "disk";
  constexpr size_t kSize = 256 << 10;
  std::mutex mu;
  std::set<int> acked;
  std::set<int> attempted;
  {
    test::KvstoreDaemon daemon(dir.path(), DiskOnly(disk));
    REQUIRE(daemon.running());
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w) {
      writers.emplace_back([&, w] {
        auto store = Client(daemon);
        for (int i = w; !stop; i += 2) {
          {
            std::lock_guard lock(mu);
            attempted.insert(i);
          }
          auto put = store->Put(KeyOf(i), BytesOf(i, kSize));
          if (!put.ok()) return;  // the daemon is gone
          if (put->durable) {
            std::lock_guard lock(mu);
            acked.insert(i);
          }
        }
      });
    }
    // Kill it mid-stream, once a good number of blocks are acknowledged.
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard lock(mu);
        if (acked.size() >= 40) break;
      }
      std::this_thread::sleep_for(5ms);
    }
    daemon.Kill();
    stop = true;
    for (auto& t : writers) t.join();
  }
  REQUIRE(acked.size() >= 40);

  test::KvstoreDaemon daemon(dir.path(), DiskOnly(disk));
  REQUIRE(daemon.running());
  auto store = Client(daemon);
  for (int i : acked) {
    auto block = store->Get(KeyOf(i));
    REQUIRE(block.ok());
    REQUIRE(*block->bytes == BytesOf(i, kSize));
  }
  // Blocks in flight at the kill are either absent or whole, never torn.
  for (int i : attempted) {
    if (acked.count(i)) continue;
    auto block = store->Get(KeyOf(i));
    if (block.ok()) CHECK(*block->bytes == BytesOf(i, kSize));
  }
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a corrupted segment byte: the block reads as missing and a metric counts it",
          "[integration][kvstore]") {
  testing::TempDir dir;
  const auto disk = dir / "disk";
  constexpr size_t kSize = 100 << 10;
  {
    test::KvstoreDaemon daemon(dir.path(), DiskOnly(disk));
    REQUIRE(daemon.running());
    auto store = Client(daemon);
    for (int i = 0; i < 8; ++i) REQUIRE(store->Put(KeyOf(i), BytesOf(i, kSize)).ok());
    REQUIRE(daemon.Stop() == 0);
  }
  // Block 0 is the first record of the oldest segment; flip one byte in the middle of its payload.
  std::vector<std::filesystem::path> segments;
  for (const auto& e : std::filesystem::directory_iterator(disk)) {
    if (e.path().extension() == ".fzkv") segments.push_back(e.path());
  }
  std::sort(segments.begin(), segments.end());
  REQUIRE_FALSE(segments.empty());
  {
    const int fd = ::open(segments.front().c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    const off_t at = disk::kHeaderBytes + kSize / 2;
    char c = 0;
    REQUIRE(::pread(fd, &c, 1, at) == 1);
    c = static_cast<char>(c ^ 0x01);
    REQUIRE(::pwrite(fd, &c, 1, at) == 1);
    ::close(fd);
  }
  test::KvstoreDaemon daemon(dir.path(), DiskOnly(disk));
  REQUIRE(daemon.running());
  auto store = Client(daemon);
  CHECK(store->Get(KeyOf(0)).status().code() == absl::StatusCode::kNotFound);
  CHECK(store->Get(KeyOf(0)).status().code() == absl::StatusCode::kNotFound);  // dropped, once
  for (int i = 1; i < 8; ++i) CHECK(*store->Get(KeyOf(i)).value().bytes == BytesOf(i, kSize));
  CHECK(store->Stats().value().tiers.front().corrupt_blocks == 1);
  const std::string metrics = test::HttpGet(daemon.metrics_port(), "/metrics");
  CHECK(test::MetricValue(metrics, "framezip_kv_corrupt_blocks_total{tier=\"disk\"}") == 1.0);
  // The key can be stored again and is served intact.
  REQUIRE(store->Put(KeyOf(0), BytesOf(0, kSize)).ok());
  CHECK(*store->Get(KeyOf(0)).value().bytes == BytesOf(0, kSize));
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("disk full: writes fail cleanly, reads keep working, nothing torn after restart",
          "[integration][kvstore]") {
  testing::TempDir dir;
  const auto disk = dir / "disk";
  constexpr size_t kSize = 200 << 10;
  const uint64_t record = disk::RecordBytes(kSize);
  std::set<int> stored;
  {
    // ENOSPC injected after 5.5 records: the 6th write fails half-way, like a real full disk.
    test::KvstoreDaemon daemon(
        dir.path(), DiskOnly(disk, {"--kv-disk-inject-enospc-after-bytes",
                                    std::to_string(5 * record + record / 2)}));
    REQUIRE(daemon.running());
    auto store = Client(daemon);
    for (int i = 0; i < 8; ++i) {
      auto put = store->Put(KeyOf(i), BytesOf(i, kSize));
      if (put.ok()) {
        stored.insert(i);
      } else {
        CHECK(put.status().code() == absl::StatusCode::kResourceExhausted);
        CHECK_THAT(MessageOf(put.status()), Catch::Contains("No space left on device"));
      }
    }
    CHECK(stored.size() == 5);
    for (int i : stored) CHECK(*store->Get(KeyOf(i)).value().bytes == BytesOf(i, kSize));
    const std::string metrics = test::HttpGet(daemon.metrics_port(), "/metrics");
    CHECK(test::MetricValue(metrics, "framezip_kv_write_failures_total{tier=\"disk\"}") == 3.0);
    CHECK(daemon.Stop() == 0);
  }
  // With room again: nothing corrupt, nothing lost, writes work.
  test::KvstoreDaemon daemon(dir.path(), DiskOnly(disk));
  REQUIRE(daemon.running());
  auto store = Client(daemon);
  CHECK(store->Stats().value().tiers.front().corrupt_blocks == 0);
  for (int i : stored) CHECK(*store->Get(KeyOf(i)).value().bytes == BytesOf(i, kSize));
  REQUIRE(store->Put(KeyOf(7), BytesOf(7, kSize)).ok());
}

}  // namespace
}  // namespace framezip::kvstore
