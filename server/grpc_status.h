// The one place where a framezip::Status becomes a grpc::Status (docs/DEVELOPING.md §3). Codes are
// mapped by an exhaustive switch, and the message is passed through unchanged: it was written for
// the client (it names the field or input at fault, never a server path).
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace framezip::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
grpc::Status ToGrpcStatus(const Status& status);

}  // namespace framezip::server
