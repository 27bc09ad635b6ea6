// Where framezip-server decodes untrusted media (config `media_isolation`): in sandboxed,
// single-use worker processes (media/worker/worker_pool.h; the default), so a decoder crash or
// hang fails one request and never the server; or, for trusted inputs only, in this process.
// One backend serves both upload validation and the turns' decoding.
#pragma once

#include <filesystem>
#include <memory>

#include "common/status.h"
#include "media/media_backend.h"
#include "server/config.h"

namespace framezip::server {

// UNAVAILABLE naming the binary when the worker cannot be started.
StatusOr<std::shared_ptr<media::MediaBackend>> CreateMediaBackend(const ServerConfig& config);

// framezip-media-worker in the directory of the running executable.
std::filesystem::path DefaultMediaWorkerPath();

}  // namespace framezip::server
