// The real framezip-kvstore daemon, driven through RemoteStore (the client a server uses) and the
// raw gRPC stub: put/get of 1 MiB blocks, lookup, delete, stats, LRU eviction order and pins over
// the service, bad requests, Redis down and back, and its /metrics.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <thread>

#include "common/crc32c.h"
#include "kvstore/service/kvstore_service.h"
#include "kvstore/service/proto_convert.h"
#include "kvstore/service/remote_store.h"
#include "tests/integration/kvstore_harness.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using namespace std::chrono_literals;
using test::BytesOf;
using test::KeyOf;

constexpr size_t kMiB = 1 << 20;

std::unique_ptr<service::RemoteStore> Client(const test::KvstoreDaemon& daemon) {
  auto client = service::RemoteStore::Connect(
      {.address = daemon.address(), .timeout = 20s, .chunk_bytes = 256 << 10,
       .connect_timeout = 10s});
  REQUIRE(client.ok());
  return std::move(client).value();
}

const TierStats& StatsOf(const StoreStats& stats, Tier tier) {
  for (const TierStats& s : stats.tiers) {
    if (s.tier == tier) return s;
  }
  FAIL("no stats for tier");
  return stats.tiers.front();
}

TEST_CASE("framezip-kvstore serves put, get, lookup, delete and stats with host, disk and redis",
          "[integration][kvstore]") {
  testing::TempDir dir;
  test::RedisServer redis(dir.path());
  REQUIRE(redis.running());
  test::KvstoreDaemon daemon(dir.path(), {"--kv-host-bytes", std::to_string(3 * kMiB),
                                          "--kv-disk-path", (dir / "disk").string(),
                                          "--kv-redis", redis.address()});
  REQUIRE(daemon.running());
  auto store = Client(daemon);

  for (int i = 1; i <= 4; ++i) {
    auto put = store->Put(KeyOf(i), BytesOf(i, kMiB), {.precision = Precision::kInt4});
    REQUIRE(put.ok());
    CHECK(put->tiers == std::vector<Tier>{Tier::kHost, Tier::kDisk, Tier::kRedis});
    CHECK(put->durable);
  }
  CHECK(store->Put(KeyOf(1), BytesOf(1, kMiB)).value().already_present);
  for (int i = 4; i >= 1; --i) {
    auto block = store->Get(KeyOf(i));
    REQUIRE(block.ok());
    CHECK(*block->bytes == BytesOf(i, kMiB));
    CHECK(block->precision == Precision::kInt4);
    CHECK(block->served_from == (i == 1 ? Tier::kDisk : Tier::kHost));  // 1 left RAM for 4
  }
  auto found = store->Lookup(std::vector<BlockKey>{KeyOf(1), KeyOf(2), KeyOf(9), KeyOf(3)});
  REQUIRE(found.ok());
  CHECK(found->present_prefix == 2);
  CHECK(found->present_bytes == 2 * kMiB);
  CHECK(store->Get(KeyOf(9)).status().code() == absl::StatusCode::kNotFound);

  CHECK(store->Delete(std::vector<BlockKey>{KeyOf(2), KeyOf(9)}).value() == 1);
  CHECK(store->Get(KeyOf(2)).status().code() == absl::StatusCode::kNotFound);
  CHECK(redis.Command({"EXISTS", "fzkv:" + BlockKeyHex(KeyOf(2))}) == "0");

  auto stats = store->Stats();
  REQUIRE(stats.ok());
  REQUIRE(stats->tiers.size() == 3);
  const TierStats& host = StatsOf(*stats, Tier::kHost);
  CHECK(host.capacity_bytes == 3 * kMiB);
  CHECK(host.hits >= 3);
  CHECK(host.evictions >= 1);
  CHECK(StatsOf(*stats, Tier::kDisk).blocks == 3);
  CHECK(StatsOf(*stats, Tier::kDisk).promotions == 1);
  CHECK(StatsOf(*stats, Tier::kRedis).available);
  REQUIRE(host.bytes_by_precision.size() == 1);
  CHECK(host.bytes_by_precision[0].precision == Precision::kInt4);

  const std::string metrics = test::HttpGet(daemon.metrics_port(), "/metrics");
  CHECK(test::MetricValue(metrics, "framezip_kv_bytes{precision=\"int4\",tier=\"disk\"}") ==
        3.0 * kMiB);
  CHECK(test::MetricValue(metrics, "framezip_kv_hits_total{tier=\"host\"}").value_or(0) >= 3);
  CHECK(test::MetricValue(metrics, "framezip_kv_promotions_total{tier=\"disk\"}") == 1.0);
  CHECK(test::MetricValue(metrics, "framezip_kv_evictions_total{tier=\"host\"}").value_or(0) >= 1);
  CHECK(test::MetricValue(metrics, "framezip_kv_restore_seconds_count{tier=\"disk\"}") == 1.0);
  CHECK(test::MetricValue(metrics, "framezip_kv_tier_available{tier=\"redis\"}") == 1.0);

  // Redis down: the daemon keeps serving from RAM and disk and reports the tier unavailable.
  redis.Kill();
  auto put = store->Put(KeyOf(20), BytesOf(20, kMiB));
  REQUIRE(put.ok());
  CHECK(put->tiers == std::vector<Tier>{Tier::kHost, Tier::kDisk});
  CHECK(*store->Get(KeyOf(3)).value().bytes == BytesOf(3, kMiB));
  CHECK_FALSE(StatsOf(store->Stats().value(), Tier::kRedis).available);
  CHECK(test::MetricValue(test::HttpGet(daemon.metrics_port(), "/metrics"),
                          "framezip_kv_tier_available{tier=\"redis\"}") == 0.0);
  // Back: new blocks reach Redis again (after the reconnect backoff).
  REQUIRE(redis.Start());
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    auto p = store->Put(KeyOf(100 + i), BytesOf(100 + i, 1000));
    back = p.ok() && p->tiers.size() == 3;
    if (!back) std::this_thread::sleep_for(50ms);
  }
  CHECK(back);
  CHECK(StatsOf(store->Stats().value(), Tier::kRedis).available);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("framezip-kvstore evicts least recently used first and never evicts pinned blocks",
          "[integration][kvstore]") {
  testing::TempDir dir;
  test::KvstoreDaemon daemon(dir.path(), {"--kv-host-bytes", std::to_string(3 * kMiB)});
  REQUIRE(daemon.running());
  auto store = Client(daemon);
  auto present = [&](int i) { return store->Get(KeyOf(i), {.promote = false}).ok(); };

  for (int i = 1; i <= 3; ++i) REQUIRE(store->Put(KeyOf(i), BytesOf(i, kMiB)).ok());
  REQUIRE(store->Get(KeyOf(1)).ok());  // LRU order now 2, 3, 1
  REQUIRE(store->Put(KeyOf(4), BytesOf(4, kMiB)).ok());
  CHECK_FALSE(present(2));
  CHECK(present(3));  // (Get touches: order now 1, 4, 3... after these reads)
  CHECK(present(1));
  CHECK(present(4));
  // Order is 3, 1, 4 (least recent first). Pin 3 for a session: 1 and 4 go first.
  CHECK(store->Pin("session-a", std::vector<BlockKey>{KeyOf(3), KeyOf(2)}).value() == 1);
  REQUIRE(store->Put(KeyOf(5), BytesOf(5, kMiB)).ok());
  CHECK(present(3));
  CHECK_FALSE(present(1));
  REQUIRE(store->Put(KeyOf(6), BytesOf(6, kMiB)).ok());
  CHECK(present(3));
  CHECK_FALSE(present(4));
  CHECK(StatsOf(store->Stats().value(), Tier::kHost).pinned_blocks == 1);
  // Put with a pin, then everything else pinned: RAM full of pins refuses the next block.
  REQUIRE(store->Put(KeyOf(7), BytesOf(7, kMiB), {.pin_session_id = "session-b"}).ok());
  CHECK(store->Pin("session-b", std::vector<BlockKey>{KeyOf(6)}).value() == 1);
  CHECK(store->Put(KeyOf(8), BytesOf(8, kMiB)).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(store->Unpin("session-a", std::vector<BlockKey>{KeyOf(3)}).value() == 1);
  REQUIRE(store->Put(KeyOf(8), BytesOf(8, kMiB)).ok());
  CHECK_FALSE(present(3));
  CHECK(present(6));
  CHECK(present(7));
}

TEST_CASE("framezip-kvstore rejects bad requests with actionable codes", "[integration][kvstore]") {
  testing::TempDir dir;
  test::KvstoreDaemon daemon(dir.path(), {"--kv-host-bytes", std::to_string(4 * kMiB),
                                          "--kv-max-block-bytes", std::to_string(2 * kMiB)});
  REQUIRE(daemon.running());
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KvStore::NewStub(channel);

  auto put = [&](const std::string& key, const std::string& bytes, uint32_t crc) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::PutResponse response;
    auto writer = stub->Put(&context, &response);
    v1::PutRequest request;
    request.mutable_header()->set_key(key);
    request.mutable_header()->set_size_bytes(bytes.size());
    request.mutable_header()->set_crc32c(crc);
    writer->Write(request);
    request.set_chunk(bytes);
    writer->Write(request);
    writer->WritesDone();
    return writer->Finish();
  };
  const std::string key = service::KeyToProto(KeyOf(1));
  const std::string bytes = BytesOf(1, 1000);
  auto bad_crc = put(key, bytes, Crc32c(bytes) ^ 1);
  CHECK(bad_crc.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(bad_crc.error_message(), Catch::Contains("CRC32C"));
  auto short_key = put(key.substr(0, 31), bytes, Crc32c(bytes));
  CHECK(short_key.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(short_key.error_message(), Catch::Contains("header.key must be 32 bytes, got 31"));
  const std::string big = BytesOf(2, 3 * kMiB);
  CHECK(put(key, big, Crc32c(big)).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);

  auto store = Client(daemon);
  CHECK(store->Get(KeyOf(1)).status().code() == absl::StatusCode::kNotFound);  // nothing stored
  CHECK(put(key, bytes, Crc32c(bytes)).ok());
  CHECK(*store->Get(KeyOf(1)).value().bytes == bytes);
  CHECK(store->Pin("", std::vector<BlockKey>{KeyOf(1)}).status().code() ==
        absl::StatusCode::kInvalidArgument);

  // A store that cannot be reached is UNAVAILABLE, within the deadline.
  auto gone = service::RemoteStore::Connect(
      {.address = "127.0.0.1:" + std::to_string(test::FreeLoopbackPort()), .timeout = 2s});
  REQUIRE(gone.ok());
  CHECK((*gone)->Get(KeyOf(1)).status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace framezip::kvstore
