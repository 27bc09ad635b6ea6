// The body of framezip-server's main(), parameterised by how the engine is made, so the shipped
// binary (server/main.cc, the real engine) and the test binary (a test double) share every line
// of process behaviour: configuration, logging, port files, SIGTERM drain, exit codes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "media/media_backend.h"
#include "server/config.h"
#include "server/turn_engine.h"

namespace framezip::server {

using EngineFactory = std::function<StatusOr<std::unique_ptr<TurnEngine>>(
    const ServerConfig& config, std::shared_ptr<media::MediaBackend> media)>;

// Exit codes: 0 after a clean drain (or --help), 1 when the server cannot start, 2 for a usage
// error (bad flag, config file or environment variable).
int RunServerMain(int argc, char** argv, const EngineFactory& make_engine,
                  const std::string& program = "framezip-server");

}  // namespace framezip::server
