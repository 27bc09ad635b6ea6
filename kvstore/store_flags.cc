#include "kvstore/store_flags.h"

namespace framezip::kvstore {

void RegisterStoreFlags(FlagSet& flags, StoreFlags* out) {
  flags.String("kv-address", &out->address,
               "shared framezip-kvstore to use instead of an embedded store", "HOST:PORT");
  flags.Int("kv-host-bytes", &out->host_bytes, "host-RAM tier bytes (0 = no host tier)");
  flags.String("kv-disk-path", &out->disk_path, "disk tier directory (empty = no disk tier)",
               "DIR");
  flags.Int("kv-disk-bytes", &out->disk_bytes, "disk tier byte cap");
  flags.Int("kv-disk-segment-bytes", &out->disk_segment_bytes, "disk segment file size");
  flags.String("kv-fsync", &out->fsync, "disk fsync policy: block, batch or off", "POLICY");
  flags.String("kv-redis", &out->redis, "Redis tier address (empty = no Redis tier)", "HOST:PORT");
  flags.Int("kv-redis-ttl-seconds", &out->redis_ttl_seconds, "default TTL of Redis values");
  flags.String("kv-redis-prefix", &out->redis_prefix, "key prefix in Redis", "S");
  flags.String("kv-write-mode", &out->write_mode, "through or back", "MODE");
  flags.Int("kv-max-block-bytes", &out->max_block_bytes, "largest block accepted");
  flags.Int("kv-pin-ttl-seconds", &out->pin_ttl_seconds, "default pin TTL");
  flags.Int("kv-disk-inject-enospc-after-bytes", &out->disk_inject_enospc_after_bytes,
            "testing: fail disk writes as if the disk were full after N bytes (0 = off)");
}

StatusOr<TieredStoreOptions> TieredStoreOptionsFrom(const StoreFlags& f, StoreMetrics* metrics) {
  auto non_negative = [](const char* name, int64_t v) -> Status {
    if (v < 0) return InvalidArgumentError("--{}: {} is negative", name, v);
    return absl::OkStatus();
  };
  FZ_RETURN_IF_ERROR(non_negative("kv-host-bytes", f.host_bytes));
  FZ_RETURN_IF_ERROR(non_negative("kv-disk-bytes", f.disk_bytes));
  FZ_RETURN_IF_ERROR(non_negative("kv-redis-ttl-seconds", f.redis_ttl_seconds));
  FZ_RETURN_IF_ERROR(non_negative("kv-disk-inject-enospc-after-bytes",
                                  f.disk_inject_enospc_after_bytes));
  if (f.max_block_bytes <= 0) return InvalidArgumentError("--kv-max-block-bytes must be > 0");
  if (f.pin_ttl_seconds <= 0) return InvalidArgumentError("--kv-pin-ttl-seconds must be > 0");
  TieredStoreOptions o;
  o.metrics = metrics;
  o.max_block_bytes = static_cast<uint64_t>(f.max_block_bytes);
  o.default_pin_ttl = std::chrono::seconds(f.pin_ttl_seconds);
  auto mode = ParseWriteMode(f.write_mode);
  if (!mode.ok()) return Annotate(mode.status(), "--kv-write-mode");
  o.write_mode = *mode;
  if (f.host_bytes > 0) {
    o.host = HostTierOptions{.capacity_bytes = static_cast<uint64_t>(f.host_bytes)};
  } else {
    o.host.reset();
  }
  if (!f.disk_path.empty()) {
    auto fsync = ParseFsyncPolicy(f.fsync);
    if (!fsync.ok()) return Annotate(fsync.status(), "--kv-fsync");
    DiskTierOptions d;
    d.dir = f.disk_path;
    d.capacity_bytes = static_cast<uint64_t>(f.disk_bytes);
    d.segment_bytes = static_cast<uint64_t>(f.disk_segment_bytes);
    d.fsync = *fsync;
    d.inject_enospc_after_bytes = static_cast<uint64_t>(f.disk_inject_enospc_after_bytes);
    o.disk = d;
  }
  if (!f.redis.empty()) {
    RedisTierOptions r;
    FZ_RETURN_IF_ERROR(Annotate(ParseRedisAddress(f.redis, &r), "--kv-redis"));
    r.default_ttl_seconds = static_cast<uint32_t>(f.redis_ttl_seconds);
    r.key_prefix = f.redis_prefix;
    o.redis = r;
  }
  if (!o.host && !o.disk && !o.redis) {
    return InvalidArgumentError(
        "no store tier: give --kv-host-bytes > 0, --kv-disk-path or --kv-redis");
  }
  return o;
}

}  // namespace framezip::kvstore
