// RemoteStore: the KvStore interface over gRPC to a shared framezip-kvstore, so a server can use
// a store that several replicas share with the same code it uses for the embedded one.
//
// Blocks stream in chunks (chunk_bytes) both ways and carry their CRC32C: the service checks it
// on Put, the client on Get (a mismatch is DATA_LOSS, never returned as data). Every call has a
// deadline (`timeout`); an unreachable store is UNAVAILABLE. Tiers in results are the remote
// store's tiers (host/disk/redis).
//
// Thread-safe: one channel, shared by concurrent calls.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "framezip/v1/kvstore.grpc.pb.h"
#include "kvstore/store.h"

namespace framezip::kvstore::service {

struct RemoteStoreOptions {
  std::string address;  // host:port of framezip-kvstore
  std::chrono::milliseconds timeout{30000};
  uint64_t chunk_bytes = 1ull << 20;
  // Wait this long in Connect for the channel to come up; 0 = connect lazily.
  std::chrono::milliseconds connect_timeout{0};
  // Longest wait between reconnection attempts after the store went away. gRPC's default (120 s)
  // would leave a restarted store unused for minutes, every call failing fast meanwhile.
  std::chrono::milliseconds max_reconnect_backoff{1000};
};

class RemoteStore final : public KvStore {
 public:
  static StatusOr<std::unique_ptr<RemoteStore>> Connect(RemoteStoreOptions options);

  StatusOr<PutResult> Put(const BlockKey& key, std::string bytes,
                          const PutOptions& options = {}) override;
  StatusOr<Block> Get(const BlockKey& key, const GetOptions& options = {}) override;
  StatusOr<LookupResult> Lookup(std::span<const BlockKey> keys,
                                const LookupOptions& options = {}) override;
  StatusOr<uint32_t> Delete(std::span<const BlockKey> keys) override;
  StatusOr<uint32_t> Pin(const std::string& session_id, std::span<const BlockKey> keys,
                         std::chrono::seconds ttl = std::chrono::seconds(0)) override;
  StatusOr<uint32_t> Unpin(const std::string& session_id, std::span<const BlockKey> keys) override;
  StatusOr<StoreStats> Stats() override;

 private:
  RemoteStore(RemoteStoreOptions options, std::shared_ptr<grpc::Channel> channel);
  void SetDeadline(grpc::ClientContext* context) const;

  const RemoteStoreOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvStore::Stub> stub_;
};

}  // namespace framezip::kvstore::service
