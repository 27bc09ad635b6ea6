#include "server/turn_types.h"

#include <fmt/format.h>

#include <iterator>
#include <variant>
#include <vector>

namespace framezip::server {

const char* PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kNone:
      return "none";
    case PolicyKind::kZipVl:
      return "zipvl";
    case PolicyKind::kAttentionPack:
      return "attentionpack";
    case PolicyKind::kDynamicLlava:
      return "dynamic_llava";
    case PolicyKind::kFastV:
      return "fastv";
    case PolicyKind::kKivi:
      return "kivi";
    case PolicyKind::kZipVlAttentionPack:
      return "zipvl+attentionpack";
  }
  return "unknown";
}

PolicyKind KindOf(const PolicyConfig& policy) {
  static constexpr PolicyKind kByAlternative[] = {
      PolicyKind::kNone,          PolicyKind::kZipVl,
      PolicyKind::kAttentionPack, PolicyKind::kZipVlAttentionPack,
      PolicyKind::kDynamicLlava,  PolicyKind::kFastV,
      PolicyKind::kKivi};
  static_assert(std::size(kByAlternative) == std::variant_size_v<decltype(PolicyConfig::options)>);
  return kByAlternative[policy.options.index()];
}

bool PolicyFromName(const std::string& name, PolicyKind* kind) {
  for (PolicyKind k : {PolicyKind::kNone, PolicyKind::kZipVl, PolicyKind::kAttentionPack,
                       PolicyKind::kDynamicLlava, PolicyKind::kFastV, PolicyKind::kKivi,
                       PolicyKind::kZipVlAttentionPack}) {
    if (name == PolicyName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
  }
  return "unknown";
}

const char* KvTierName(KvTier tier) {
  switch (tier) {
    case KvTier::kDevice:
      return "device";
    case KvTier::kHost:
      return "host";
    case KvTier::kDisk:
      return "disk";
    case KvTier::kRedis:
      return "redis";
    case KvTier::kRemote:
      return "remote";
  }
  return "unknown";
}

const char* KvPrecisionName(KvPrecision precision) {
  switch (precision) {
    case KvPrecision::kF32:
      return "f32";
    case KvPrecision::kF16:
      return "f16";
    case KvPrecision::kBF16:
      return "bf16";
    case KvPrecision::kInt8:
      return "int8";
    case KvPrecision::kInt4:
      return "int4";
    case KvPrecision::kInt2:
      return "int2";
    case KvPrecision::kLowRank:
      return "low_rank";
  }
  return "unknown";
}

}  // namespace framezip::server
