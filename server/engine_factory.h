// Makes the TurnEngine framezip-server runs, from its configuration: the real engine
// (engine/runtime) behind BatchScheduler when --model is given, else an UnavailableEngine that
// refuses turns with the reason.
#pragma once

#include <memory>

#include "common/status.h"
#include "server/config.h"
#include "server/turn_engine.h"

namespace framezip::server {

StatusOr<std::unique_ptr<TurnEngine>> CreateEngine(const ServerConfig& config);

}  // namespace framezip::server
