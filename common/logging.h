// Logging facade over spdlog. Every module logs through FZ_LOG_* so the sink, level and format
// (text or JSON lines) are chosen once, by the process, in InitLogging().
//
// Messages use fmt syntax: FZ_LOG_INFO("turn {} done in {:.1f} ms", id, ms).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace framezip {

enum class LogFormat { kText, kJson };

struct LoggingOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogFormat format = LogFormat::kText;
};

// Installs the process-wide logger (stderr). Returns INVALID_ARGUMENT for an unknown level.
Status InitLogging(const LoggingOptions& options);

// Parses "text" or "json".
StatusOr<LogFormat> ParseLogFormat(std::string_view name);

}  // namespace framezip

#define FZ_LOG_TRACE(...) ::spdlog::trace(__VA_ARGS__)
#define FZ_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define FZ_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define FZ_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define FZ_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
