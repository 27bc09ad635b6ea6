// The API's CompressionPolicy (proto/framezip/v1/video_chat.proto) to and from the engine's typed
// PolicyConfig (engine/compress/policy_config.h), field by field: each proto field has the name
// of the option it sets, and an unset field keeps the option's default. No text in between.
#pragma once

#include <string_view>

#include "common/status.h"
#include "engine/compress/policy_config.h"
#include "framezip/v1/video_chat.pb.h"

namespace framezip::server {

// The options `policy` sets over the defaults of its kind, checked against their ranges:
// INVALID_ARGUMENT naming the field under `field` ("policy.zipvl.tau: 1.5 is not in [1e-06,
// 1]"), or the unknown kind. POLICY_KIND_UNSPECIFIED gives `unspecified` as it is.
StatusOr<engine::compress::PolicyConfig> PolicyFromProto(
    const v1::CompressionPolicy& policy, const engine::compress::PolicyConfig& unspecified,
    std::string_view field);

// Every option of `config`, set explicitly (the model-default options of dynamic_llava that are
// unset stay unset).
void PolicyToProto(const engine::compress::PolicyConfig& config, v1::CompressionPolicy* out);

}  // namespace framezip::server
