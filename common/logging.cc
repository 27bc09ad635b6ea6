#include "common/logging.h"

#include <memory>

#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace framezip {
namespace {

// %j: the message escaped as a JSON string body, so a quote or newline in a message cannot break
// the one-object-per-line format.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\r':
          dest.append(std::string_view("\\r"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            const char esc[] = {'\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
            dest.append(esc, esc + sizeof(esc));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      fmt::format("log format must be 'text' or 'json', not '{}'", name));
}

Status InitLogging(const LoggingOptions& options) {
  const spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  // from_str maps anything unknown to "off"; only accept "off" when it was asked for.
  if (level == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(fmt::format(
        "log level must be one of trace, debug, info, warn, error, critical, off; not '{}'",
        options.level));
  }
  auto logger = std::make_shared<spdlog::logger>("framezip",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (options.format == LogFormat::kJson) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonEscapedMessage>('j').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,"msg":"%j"})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %t %v");
  }
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace framezip
