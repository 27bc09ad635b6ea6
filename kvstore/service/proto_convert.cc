#include "kvstore/service/proto_convert.h"

#include <cstring>

namespace framezip::kvstore::service {

static_assert(static_cast<int>(Tier::kHost) == v1::KV_TIER_HOST);
static_assert(static_cast<int>(Tier::kDisk) == v1::KV_TIER_DISK);
static_assert(static_cast<int>(Tier::kRedis) == v1::KV_TIER_REDIS);
static_assert(static_cast<int>(Tier::kRemote) == v1::KV_TIER_REMOTE);
static_assert(static_cast<int>(Precision::kF16) == v1::KV_PRECISION_F16);
static_assert(static_cast<int>(Precision::kInt4) == v1::KV_PRECISION_INT4);
static_assert(static_cast<int>(Precision::kLowRank) == v1::KV_PRECISION_LOW_RANK);
static_assert(kNumPrecisions == v1::KvPrecision_MAX + 1);

StatusOr<BlockKey> KeyFromProto(const std::string& bytes, std::string_view field) {
  BlockKey key;
  if (bytes.size() != key.size()) {
    return InvalidArgumentError("{} must be {} bytes, got {}", field, key.size(), bytes.size());
  }
  std::memcpy(key.data(), bytes.data(), key.size());
  return key;
}

std::string KeyToProto(const BlockKey& key) {
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

v1::KvTier TierToProto(Tier tier) { return static_cast<v1::KvTier>(tier); }

StatusOr<Tier> TierFromProto(v1::KvTier tier) {
  switch (tier) {
    case v1::KV_TIER_UNSPECIFIED:
    case v1::KV_TIER_HOST: return Tier::kHost;
    case v1::KV_TIER_DISK: return Tier::kDisk;
    case v1::KV_TIER_REDIS: return Tier::kRedis;
    case v1::KV_TIER_REMOTE: return Tier::kHost;  // this store is the remote one
    default: break;
  }
  return InvalidArgumentError("placement.tier {} is not a store tier (host, disk or redis)",
                              v1::KvTier_Name(tier));
}

v1::KvPrecision PrecisionToProto(Precision precision) {
  return static_cast<v1::KvPrecision>(precision);
}

Precision PrecisionFromProto(v1::KvPrecision precision) {
  const int p = static_cast<int>(precision);
  return p >= 0 && p < kNumPrecisions ? static_cast<Precision>(p) : Precision::kUnspecified;
}

void TierStatsToProto(const TierStats& s, v1::TierStats* out) {
  out->set_tier(TierToProto(s.tier));
  out->set_available(s.available);
  out->set_bytes(s.bytes);
  out->set_capacity_bytes(s.capacity_bytes);
  out->set_blocks(s.blocks);
  out->set_pinned_blocks(s.pinned_blocks);
  out->set_hits(s.hits);
  out->set_misses(s.misses);
  out->set_evictions(s.evictions);
  out->set_promotions(s.promotions);
  out->set_corrupt_blocks(s.corrupt_blocks);
  for (const PrecisionBytes& pb : s.bytes_by_precision) {
    v1::KvBytes* b = out->add_bytes_by_precision();
    b->set_tier(TierToProto(s.tier));
    b->set_precision(PrecisionToProto(pb.precision));
    b->set_bytes(pb.bytes);
  }
}

TierStats TierStatsFromProto(const v1::TierStats& p) {
  TierStats s;
  const int tier = static_cast<int>(p.tier());
  s.tier = tier >= 2 && tier <= 5 ? static_cast<Tier>(tier) : Tier::kRemote;
  s.available = p.available();
  s.bytes = p.bytes();
  s.capacity_bytes = p.capacity_bytes();
  s.blocks = p.blocks();
  s.pinned_blocks = p.pinned_blocks();
  s.hits = p.hits();
  s.misses = p.misses();
  s.evictions = p.evictions();
  s.promotions = p.promotions();
  s.corrupt_blocks = p.corrupt_blocks();
  for (const v1::KvBytes& b : p.bytes_by_precision()) {
    s.bytes_by_precision.push_back({PrecisionFromProto(b.precision()), b.bytes(), 0});
  }
  return s;
}

// absl::StatusCode and grpc::StatusCode share their numbering (both follow google.rpc.Code).
grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), MessageOf(status));
}

Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace framezip::kvstore::service
