// Who is calling: optional bearer-token authentication, and the principal each call acts for.
//
// With a token file, every RPC of framezip.v1.VideoChat must carry the metadata
// "authorization: Bearer <token>" with one of the file's tokens, else it fails with
// UNAUTHENTICATED. Health and reflection stay open (load balancers probe them).
//
// Token file: one token per line, either "TOKEN" or "NAME TOKEN" (whitespace between); blank
// lines and lines starting with '#' are ignored. NAME ([A-Za-z0-9._@:-]{1,128}) is the
// principal the token acts for; a bare token acts for "token-<first 12 hex digits of its
// SHA-256>", so its principal is stable while its text stays secret.
//
// Principals scope sessions: a session belongs to the principal that created it, and every other
// principal gets NOT_FOUND for it (server/session_store.h). Without auth every caller is the
// anonymous principal "" and sees every session, as before.
//
// Tenant header (optional): a trusted proxy in front of framezip may name the tenant a call acts
// for in a header (`tenant_header`, e.g. "x-framezip-tenant"); the tenant then becomes the call's
// principal. Only calls authenticated as one of `tenant_proxy_principals` may set it (a header
// from anyone else is refused with PERMISSION_DENIED). With auth off the header is trusted from
// every caller: only deploy that way behind a proxy that sets or strips the header itself.
//
// Immutable after construction, so thread-safe.
#pragma once

#include <grpcpp/server_context.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace framezip::server {

struct AuthOptions {
  std::string token_file;                            // empty = auth off
  std::string tenant_header;                         // empty = no tenant header
  std::vector<std::string> tenant_proxy_principals;  // who may set it (auth on)
};

class BearerAuth {
 public:
  BearerAuth() = default;  // auth off, no tenant header
  // INVALID_ARGUMENT naming the file and line when the file cannot be read, holds no token or a
  // malformed line, or a tenant header name that gRPC metadata cannot carry.
  static StatusOr<BearerAuth> Create(const AuthOptions& options);
  // `tokens`: (principal, token) pairs; an empty principal gets the derived "token-..." name.
  static BearerAuth FromTokens(std::vector<std::pair<std::string, std::string>> tokens);

  bool enabled() const { return !tokens_.empty(); }
  // The principal the call acts for ("" when auth is off and no tenant header is set).
  // UNAUTHENTICATED when auth is on and the token is missing or wrong; PERMISSION_DENIED when a
  // caller that is not a trusted proxy sets the tenant header; INVALID_ARGUMENT for a malformed
  // tenant value.
  StatusOr<std::string> Authenticate(const grpc::ServerContextBase& context) const;
  // The same from header values already taken off the request (the OpenAI-compatible HTTP API's
  // "Authorization" and tenant headers; nullopt = the header is absent).
  StatusOr<std::string> AuthenticateHeaders(const std::optional<std::string>& authorization,
                                            const std::optional<std::string>& tenant) const;
  // The tenant header's name (lower case; empty = none).
  const std::string& tenant_header() const { return tenant_header_; }

 private:
  struct Token {
    std::string principal;
    std::string secret;
  };
  std::vector<Token> tokens_;
  std::string tenant_header_;
  std::vector<std::string> tenant_proxies_;
};

// [A-Za-z0-9._@:-]{1,128}: principals and tenant values.
bool IsValidPrincipal(const std::string& name);

}  // namespace framezip::server
