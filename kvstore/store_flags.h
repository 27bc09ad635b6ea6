// Command-line configuration of a store, shared by framezip-kvstore and framezip-server so both
// take the same flags (and FRAMEZIP_* environment variables):
//
//   --kv-address ADDR          use a shared framezip-kvstore at ADDR (RemoteStore) instead of
//                              an embedded store (only meaningful for clients like the server)
//   --kv-host-bytes N          host-RAM tier size; 0 = no host tier
//   --kv-disk-path DIR         disk tier directory; empty = no disk tier
//   --kv-disk-bytes N          disk tier byte cap
//   --kv-disk-segment-bytes N  segment file size
//   --kv-fsync block|batch|off
//   --kv-redis HOST:PORT       Redis tier; empty = none
//   --kv-redis-ttl-seconds N   default TTL of Redis values
//   --kv-redis-prefix S        key prefix in Redis
//   --kv-write-mode through|back
//   --kv-max-block-bytes N
//   --kv-pin-ttl-seconds N     default pin TTL
//   --kv-disk-inject-enospc-after-bytes N   testing only: fail disk writes as if full
#pragma once

#include <cstdint>
#include <string>

#include "common/flags.h"
#include "common/status.h"
#include "kvstore/tiered_store.h"

namespace framezip::kvstore {

struct StoreFlags {
  std::string address;
  int64_t host_bytes = 1ll << 30;
  std::string disk_path;
  int64_t disk_bytes = 16ll << 30;
  int64_t disk_segment_bytes = 64ll << 20;
  std::string fsync = "block";
  std::string redis;
  int64_t redis_ttl_seconds = 3600;
  std::string redis_prefix = "fzkv:";
  std::string write_mode = "through";
  int64_t max_block_bytes = 256ll << 20;
  int64_t pin_ttl_seconds = 600;
  int64_t disk_inject_enospc_after_bytes = 0;
};

// Registers the flags above on `flags`, bound to `*out` (whose values are the defaults).
void RegisterStoreFlags(FlagSet& flags, StoreFlags* out);

// The embedded store's options from parsed flags (INVALID_ARGUMENT naming the bad flag).
StatusOr<TieredStoreOptions> TieredStoreOptionsFrom(const StoreFlags& flags,
                                                   StoreMetrics* metrics);

}  // namespace framezip::kvstore
