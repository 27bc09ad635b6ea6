#include "tools/framezip/policy_flag.h"

#include "engine/compress/policy_config.h"
#include "server/policy_proto.h"

namespace framezip::cli {

Status ParsePolicyFlag(const std::string& text, v1::CompressionPolicy& out) {
  StatusOr<engine::compress::PolicyConfig> config = engine::compress::ParsePolicyConfig(text);
  if (!config.ok()) return InvalidArgumentError("--policy: {}", MessageOf(config.status()));
  server::PolicyToProto(*config, &out);
  return absl::OkStatus();
}

}  // namespace framezip::cli
