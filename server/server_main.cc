#include "server/server_main.h"

#include <cstdio>
#include <fstream>

#include "common/flags.h"
#include "common/logging.h"
#include "server/media_backend_factory.h"
#include "server/signal_wait.h"
#include "server/video_chat_server.h"

namespace framezip::server {
namespace {

// Written to a temporary name and renamed, so a reader never sees a partial port number.
void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int RunServerMain(int argc, char** argv, const EngineFactory& make_engine,
                  const std::string& program) {
  BlockTerminationSignals();
  StatusOr<ConfigLoad> load = LoadServerConfig(ArgsFrom(argc, argv), program);
  if (!load.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), MessageOf(load.status()).c_str());
    return 2;
  }
  if (load->help) {
    std::fputs(load->help_text.c_str(), stdout);
    return 0;
  }
  const ServerConfig& config = load->config;
  LoggingOptions logging{config.log_level, LogFormat::kText};
  StatusOr<LogFormat> format = ParseLogFormat(config.log_format);
  Status status = format.status();
  if (format.ok()) logging.format = *format;
  if (status.ok()) status = InitLogging(logging);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), MessageOf(status).c_str());
    return 2;
  }

  StatusOr<std::shared_ptr<media::MediaBackend>> media = CreateMediaBackend(config);
  if (!media.ok()) {
    FZ_LOG_ERROR("cannot start the media workers: {}", MessageOf(media.status()));
    return 1;
  }
  StatusOr<std::unique_ptr<TurnEngine>> engine = make_engine(config, *media);
  if (!engine.ok()) {
    FZ_LOG_ERROR("cannot start the engine: {}", MessageOf(engine.status()));
    return 1;
  }
  StatusOr<std::unique_ptr<VideoChatServer>> server =
      VideoChatServer::Start(config, std::move(*engine), *media);
  if (!server.ok()) {
    FZ_LOG_ERROR("cannot start: {}", MessageOf(server.status()));
    return 1;
  }
  WritePortFile(config.port_file, (*server)->port());
  WritePortFile(config.metrics_port_file, (*server)->metrics_port());
  WritePortFile(config.openai_port_file, (*server)->openai_port());

  const int sig = WaitForTerminationSignal();
  FZ_LOG_INFO("signal {}: draining (grace {} s)", sig, config.grace_seconds);
  (*server)->Drain(std::chrono::seconds(config.grace_seconds));
  server->reset();
  FZ_LOG_INFO("framezip-server stopped");
  return 0;
}

}  // namespace framezip::server
