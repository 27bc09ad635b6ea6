// framezip.v1.KvStore over gRPC (synchronous API): serves any KvStore (the daemon serves a
// TieredStore). Large blocks stream in and out in chunks; every Put is CRC32C-checked before it
// is stored. Contract and codes: proto/framezip/v1/kvstore.proto.
//
// Note on GetRequest.promote: the proto documents "default true", but proto3 cannot tell an
// unset bool from false, so the field is honoured as sent; RemoteStore always sets it.
//
// Thread-safe: gRPC calls the handlers on its own threads; the store is thread-safe.
#pragma once

#include <grpcpp/server_builder.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "framezip/v1/kvstore.grpc.pb.h"
#include "kvstore/store.h"

namespace framezip::kvstore::service {

struct KvStoreServiceOptions {
  uint64_t max_block_bytes = 256ull << 20;
  // Size of the chunks Get streams out (the proto allows up to 4 MiB).
  uint64_t chunk_bytes = 1ull << 20;
  // Testing only (framezip-kvstore --test-put-delay-ms): every Put answers this much later, as
  // a slow Redis or a store across a network would, so clients' latency under a slow store can
  // be measured. 0 = off.
  std::chrono::milliseconds test_put_delay{0};
};

// Largest gRPC message the service and client exchange: a 4 MiB chunk plus framing.
inline constexpr int kMaxMessageBytes = 8 << 20;
// HTTP/2 stream window for block transfers: the 64 KiB default stalls a 1 MiB Put on
// window updates (see bench/RESULTS.md).
inline constexpr int kStreamWindowBytes = 16 << 20;

// Message limits and flow-control windows for a server that hosts KvStoreService.
void ConfigureServerBuilder(grpc::ServerBuilder& builder);

class KvStoreService final : public v1::KvStore::Service {
 public:
  // `store` is not owned and must outlive the service.
  KvStoreService(KvStore* store, KvStoreServiceOptions options);

  grpc::Status Put(grpc::ServerContext* context, grpc::ServerReader<v1::PutRequest>* reader,
                   v1::PutResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   grpc::ServerWriter<v1::GetResponse>* writer) override;
  grpc::Status Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override;
  grpc::Status Delete(grpc::ServerContext* context, const v1::DeleteRequest* request,
                      v1::DeleteResponse* response) override;
  grpc::Status Pin(grpc::ServerContext* context, const v1::PinRequest* request,
                   v1::PinResponse* response) override;
  grpc::Status Unpin(grpc::ServerContext* context, const v1::PinRequest* request,
                     v1::PinResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

  // Calls being handled now (a drain waits for this to reach 0 before shutting the server down,
  // since the sync server's Shutdown(deadline) otherwise waits out the deadline while clients
  // keep idle connections open).
  int in_flight() const { return in_flight_.load(); }

 private:
  class CallGuard;

  KvStore* store_;
  const KvStoreServiceOptions options_;
  std::atomic<int> in_flight_{0};
};

}  // namespace framezip::kvstore::service
