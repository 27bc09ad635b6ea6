// Conversions between the store's C++ types and framezip.v1 messages, and between absl and gRPC
// status codes (the same numbering, so codes map 1:1 both ways).
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "common/status.h"
#include "framezip/v1/kvstore.pb.h"
#include "kvstore/store.h"

namespace framezip::kvstore::service {

// A 32-byte key from a proto bytes field; INVALID_ARGUMENT naming `field` and its length.
StatusOr<BlockKey> KeyFromProto(const std::string& bytes, std::string_view field);
std::string KeyToProto(const BlockKey& key);

v1::KvTier TierToProto(Tier tier);
// UNSPECIFIED maps to kHost (the default placement); DEVICE is not a store tier: INVALID_ARGUMENT.
StatusOr<Tier> TierFromProto(v1::KvTier tier);
v1::KvPrecision PrecisionToProto(Precision precision);
Precision PrecisionFromProto(v1::KvPrecision precision);

void TierStatsToProto(const TierStats& stats, v1::TierStats* out);
TierStats TierStatsFromProto(const v1::TierStats& stats);

grpc::Status ToGrpc(const Status& status);
Status FromGrpc(const grpc::Status& status);

}  // namespace framezip::kvstore::service
