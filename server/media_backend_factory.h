// Where framezip-server decodes media: in sandboxed, single-use framezip-media-worker processes
// (media/worker/worker_pool.h), so a decoder crash or hang fails one request and never the
// server. It is the only place: the server links no FFmpeg or OpenCV (no in-process decoding), so
// it runs on a machine without the codec stack as long as the worker has it. One backend serves
// both upload validation and the turns' decoding.
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
