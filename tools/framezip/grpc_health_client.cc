#include "tools/framezip/grpc_health_client.h"

#include <grpcpp/grpcpp.h>

#include "grpc/health/v1/health.grpc.pb.h"

namespace framezip::cli {

StatusOr<std::string> CheckGrpcHealth(const std::string& address, const std::string& service,
                                      std::chrono::milliseconds timeout) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

}  // namespace framezip::cli
