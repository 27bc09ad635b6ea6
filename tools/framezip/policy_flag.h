// `--policy NAME[:KEY=VALUE,...]` of the CLI's gRPC clients as a framezip.v1.CompressionPolicy.
// The flag parses into the engine's typed PolicyConfig (engine/compress/policy_config.h), as
// `framezip run/eval --policy` do, and goes to the proto field by field (server/policy_proto.h):
// one spelling per option, e.g. `attentionpack:factors=int4`, `zipvl:low_bits=evict,tau=0.9`.
#pragma once

#include <string>

#include "common/status.h"
#include "framezip/v1/video_chat.pb.h"

namespace framezip::cli {

// INVALID_ARGUMENT ("--policy: ...") naming the unknown policy, the unknown option (with the
// options it has) or the value that is not one the option takes.
Status ParsePolicyFlag(const std::string& text, framezip::v1::CompressionPolicy& out);

}  // namespace framezip::cli
