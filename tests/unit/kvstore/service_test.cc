// KvStoreService and RemoteStore in one process over a real loopback gRPC connection: blocks
// larger than one gRPC message stream in chunks both ways, codes map 1:1, and the client's view
// (tiers, durability, stats) matches the store behind the service.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include "kvstore/service/kvstore_service.h"
#include "kvstore/service/proto_convert.h"
#include "kvstore/service/remote_store.h"
#include "kvstore/tiered_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/kvstore/test_blocks.h"

namespace framezip::kvstore {
namespace {

using test::BytesOf;
using test::KeyOf;

TEST_CASE("remote store streams multi-chunk blocks through the service", "[unit][kvstore]") {
  testing::TempDir dir;
  TieredStoreOptions options;
  options.host = HostTierOptions{.capacity_bytes = 32 << 20};
  options.disk = DiskTierOptions{.dir = dir.path(), .fsync = FsyncPolicy::kOff};
  auto store = TieredStore::Open(options);
  REQUIRE(store.ok());
  service::KvStoreService kv_service(store->get(), {.max_block_bytes = 16 << 20,
                                                    .chunk_bytes = 3 << 20});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&kv_service);
  service::ConfigureServerBuilder(builder);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  auto client = service::RemoteStore::Connect({.address = "127.0.0.1:" + std::to_string(port),
                                               .chunk_bytes = 4 << 20});
  REQUIRE(client.ok());
  KvStore& remote = **client;

  const std::string big = BytesOf(1, (9 << 20) + 7);  // 3 chunks up, 4 down
  auto put = remote.Put(KeyOf(1), big, {.precision = Precision::kInt8});
  REQUIRE(put.ok());
  CHECK(put->tiers == std::vector<Tier>{Tier::kHost, Tier::kDisk});
  CHECK_FALSE(put->durable);  // fsync off
  auto block = remote.Get(KeyOf(1));
  REQUIRE(block.ok());
  CHECK(*block->bytes == big);
  CHECK(block->precision == Precision::kInt8);
  CHECK(block->served_from == Tier::kHost);
  const std::string empty;
  REQUIRE(remote.Put(KeyOf(2), empty).ok());
  CHECK(remote.Get(KeyOf(2)).value().bytes->empty());

  CHECK(remote.Put(KeyOf(3), BytesOf(3, 17 << 20)).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(remote.Get(KeyOf(3)).status().code() == absl::StatusCode::kNotFound);
  auto found = remote.Lookup(std::vector<BlockKey>{KeyOf(1), KeyOf(2), KeyOf(3)},
                             {.pin_session_id = "s", .prefetch = false});
  REQUIRE(found.ok());
  CHECK(found->present_prefix == 2);
  CHECK(found->present_bytes == big.size());
  auto stats = remote.Stats();
  REQUIRE(stats.ok());
  REQUIRE(stats->tiers.size() == 2);
  CHECK(stats->tiers[0].tier == Tier::kHost);
  CHECK(stats->tiers[0].pinned_blocks == 2);
  CHECK(stats->tiers[1].blocks == 2);
  CHECK(remote.Unpin("s", std::vector<BlockKey>{KeyOf(1), KeyOf(2)}).value() == 2);
  CHECK(remote.Delete(std::vector<BlockKey>{KeyOf(1)}).value() == 1);
  CHECK(remote.Get(KeyOf(1)).status().code() == absl::StatusCode::kNotFound);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST_CASE("status codes and enums convert 1:1 between absl, gRPC and the store",
          "[unit][kvstore]") {
  for (auto code : {absl::StatusCode::kNotFound, absl::StatusCode::kResourceExhausted,
                    absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDataLoss}) {
    const Status s(code, "message");
    CHECK(service::FromGrpc(service::ToGrpc(s)) == s);
  }
  CHECK(service::ToGrpc(absl::OkStatus()).ok());
  CHECK(service::TierFromProto(v1::KV_TIER_UNSPECIFIED).value() == Tier::kHost);
  CHECK(service::TierFromProto(v1::KV_TIER_DISK).value() == Tier::kDisk);
  CHECK(service::TierFromProto(v1::KV_TIER_DEVICE).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(service::KeyFromProto(std::string(31, 'x'), "keys[0]").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(service::KeyFromProto(service::KeyToProto(KeyOf(9)), "k").value() == KeyOf(9));
}

}  // namespace
}  // namespace framezip::kvstore
