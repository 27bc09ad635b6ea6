// framezip-server: the gRPC front of framezip.
//
// This is the process skeleton: it listens, serves grpc.health.v1 and reflection, and drains on
// SIGTERM (health NOT_SERVING, then shutdown within the grace period, exit 0). The VideoChat
// service registers here once it exists (issue 8).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/flags.h"
#include "common/logging.h"
#include "server/signal_wait.h"

int main(int argc, char** argv) {
  framezip::server::BlockTerminationSignals();

  std::string listen = "0.0.0.0:50051";
  std::string port_file;
  int grace_seconds = 30;
  std::string log_level = "info";
  std::string log_format = "text";
  framezip::FlagSet flags("framezip-server", "Serves framezip's gRPC API.");
  flags.String("listen", &listen, "address to serve gRPC on; port 0 picks a free one", "ADDR");
  flags.String("port-file", &port_file, "write the bound port here once serving", "FILE");
  flags.Int("grace-seconds", &grace_seconds, "drain time on SIGTERM before calls are cancelled");
  flags.String("log-level", &log_level, "trace|debug|info|warn|error", "LEVEL");
  flags.String("log-format", &log_format, "text|json", "FORMAT");
  framezip::Status status = flags.ApplyEnvironment();
  if (status.ok()) status = flags.Parse(framezip::ArgsFrom(argc, argv));
  if (framezip::FlagSet::IsHelp(status)) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  framezip::LoggingOptions logging{log_level, framezip::LogFormat::kText};
  if (status.ok()) {
    auto format = framezip::ParseLogFormat(log_format);
    status = format.status();
    if (format.ok()) logging.format = *format;
  }
  if (status.ok()) status = framezip::InitLogging(logging);
  if (!status.ok()) {
    std::fprintf(stderr, "framezip-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  // Tolerate clients that ping every 30 s, also between calls.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    FZ_LOG_ERROR("cannot listen on {}", listen);
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  FZ_LOG_INFO("framezip-server serving on port {} (health, reflection)", port);
  if (!port_file.empty()) std::ofstream(port_file) << port << "\n";

  const int sig = framezip::server::WaitForTerminationSignal();
  FZ_LOG_INFO("signal {}: draining (grace {} s)", sig, grace_seconds);
  server->GetHealthCheckService()->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(grace_seconds));
  FZ_LOG_INFO("framezip-server stopped");
  return 0;
}
