// `--policy NAME[:FIELD=VALUE,...]` of the CLI's gRPC clients as a framezip.v1.CompressionPolicy:
// NAME is a PolicyKind without its prefix (zipvl, attentionpack, ...), each FIELD a field of that
// kind's options message in the public API (docs/api.md), e.g. `attentionpack:factor_bits=4`.
#pragma once

#include <string>

#include "common/status.h"
#include "framezip/v1/video_chat.pb.h"

namespace framezip::cli {

// INVALID_ARGUMENT naming the unknown policy, the unknown field (with the fields that exist) or
// the value that does not parse as the field's type.
Status ParsePolicyFlag(const std::string& text, framezip::v1::CompressionPolicy& out);

}  // namespace framezip::cli
