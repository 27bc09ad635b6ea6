#include "media/ffmpeg_handles.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "common/logging.h"

extern "C" {
#include <libavutil/error.h>
#include <libavutil/log.h>
}

namespace framezip::media::internal {

std::string AvErrorString(int error) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(error, buf, sizeof(buf));
  return buf;
}

namespace {

void LogCallback(void* /*avcl*/, int level, const char* format, va_list args) {
  // Cheap exit first: FFmpeg logs a lot at verbose levels, from decoder threads too.
  if (level > AV_LOG_WARNING || !spdlog::should_log(spdlog::level::debug)) return;
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  FZ_LOG_DEBUG("ffmpeg: {}", text);
}

}  // namespace

void InstallFfmpegLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_level(AV_LOG_WARNING);
    av_log_set_callback(LogCallback);
  });
}

}  // namespace framezip::media::internal
