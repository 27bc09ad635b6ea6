#include "kvstore/metrics.h"
#include "kvstore/types.h"

namespace framezip::kvstore {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
    case Tier::kRedis: return "redis";
    case Tier::kRemote: return "remote";
  }
  return "unknown";
}

std::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kUnspecified: return "unspecified";
    case Precision::kF32: return "f32";
    case Precision::kF16: return "f16";
    case Precision::kBf16: return "bf16";
    case Precision::kInt8: return "int8";
    case Precision::kInt4: return "int4";
    case Precision::kInt2: return "int2";
    case Precision::kLowRank: return "low_rank";
  }
  return "unknown";
}

StoreMetrics& NullStoreMetrics() {
  static StoreMetrics* const kNull = new StoreMetrics();
  return *kNull;
}

}  // namespace framezip::kvstore
