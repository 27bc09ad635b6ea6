// Makes the TurnEngine framezip-server runs, from its configuration: the real engine
// (engine/runtime) behind BatchScheduler when --model is given, else an UnavailableEngine that
// refuses turns with the reason.
#pragma once

#include <memory>

#include "common/status.h"
#include "media/media_backend.h"
#include "server/config.h"
#include "server/turn_engine.h"

namespace framezip::server {

// `media` decodes the turns' media (server/media_backend_factory.h); shared with the server's
// upload validation.
StatusOr<std::unique_ptr<TurnEngine>> CreateEngine(const ServerConfig& config,
                                                   std::shared_ptr<media::MediaBackend> media);

}  // namespace framezip::server
