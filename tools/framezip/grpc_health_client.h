// Client side of grpc.health.v1.Check.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace framezip::cli {

// Returns "SERVING", "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN"; an error status when the call
// itself fails (server down, deadline).
StatusOr<std::string> CheckGrpcHealth(const std::string& address, const std::string& service,
                                      std::chrono::milliseconds timeout);

}  // namespace framezip::cli
