// Optional bearer-token authentication. With a token file, every RPC of framezip.v1.VideoChat
// must carry the metadata "authorization: Bearer <token>" with one of the file's tokens, else it
// fails with UNAUTHENTICATED. Health and reflection stay open (load balancers probe them).
//
// Token file: one token per line; blank lines and lines starting with '#' are ignored.
// Immutable after construction, so thread-safe.
#pragma once

#include <grpcpp/server_context.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace framezip::server {

class BearerAuth {
 public:
  BearerAuth() = default;  // auth off
  // INVALID_ARGUMENT when the file cannot be read or holds no token.
  static StatusOr<BearerAuth> FromTokenFile(const std::string& path);
  static BearerAuth FromTokens(std::vector<std::string> tokens);

  bool enabled() const { return !tokens_.empty(); }
  // OK when auth is off or the call carries a valid token; UNAUTHENTICATED otherwise.
  Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace framezip::server
