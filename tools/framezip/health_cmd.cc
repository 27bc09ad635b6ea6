#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>

#include "tools/framezip/cli_util.h"
#include "tools/framezip/grpc_health_client.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {

int RunHealth(const std::vector<std::string>& args) {
  std::string server = "127.0.0.1:50051";
  std::string service;
  int timeout_ms = 2000;
  FlagSet flags(
      "framezip health",
      "Asks a server for grpc.health.v1 status; exits 0 when SERVING (Docker HEALTHCHECK).");
  flags.String("server", &server, "server address", "ADDR");
  flags.String("service", &service, "service name; empty = the whole server", "NAME");
  flags.Int("timeout-ms", &timeout_ms, "deadline of the check");
  if (auto code = ParseOrExit(flags, args)) return *code;
  auto result = CheckGrpcHealth(server, service, std::chrono::milliseconds(timeout_ms));
  if (!result.ok()) {
    std::fprintf(stderr, "framezip health: %s: %s\n", server.c_str(),
                 std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", result->c_str());
  return *result == "SERVING" ? 0 : 1;
}

}  // namespace framezip::cli
