#include "server/turn_types.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
  }
  return "unknown";
}

std::string EngineSpec(const PolicySpec& spec) {
  std::string out = PolicyName(spec.kind);
  if (spec.kind == PolicyKind::kAttentionPack) {
    std::vector<std::string> options;
    if (spec.ap_key_rank > 0) options.push_back(fmt::format("rank_k={}", spec.ap_key_rank));
    if (spec.ap_value_rank > 0) options.push_back(fmt::format("rank_v={}", spec.ap_value_rank));
    if (spec.ap_decompress_fraction > 0) {
      options.push_back(fmt::format("top_fraction={}", spec.ap_decompress_fraction));
    }
    if (spec.ap_factor_bits == 4) options.push_back("factors=int4");
    if (!options.empty()) out = fmt::format("{}:{}", out, fmt::join(options, ","));
  }
  if (spec.kind == PolicyKind::kDynamicLlava) {
    out += fmt::format(":text_gate={}", spec.dl_gate_generated_tokens ? "on" : "off");
    if (spec.dl_vision_keep_ratio > 0) {
      out += fmt::format(",vision_keep={}", spec.dl_vision_keep_ratio);
    }
  }
  return out;
}

bool PolicyFromName(const std::string& name, PolicyKind* kind) {
  for (PolicyKind k : {PolicyKind::kNone, PolicyKind::kZipVl, PolicyKind::kAttentionPack,
                       PolicyKind::kDynamicLlava, PolicyKind::kFastV, PolicyKind::kKivi}) {
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
