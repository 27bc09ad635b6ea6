#include "server/auth.h"

#include <algorithm>
#include <fstream>
#include <span>

#include "common/client_text.h"
#include "media/content_hash.h"

namespace framezip::server {
namespace {

// Compares without an early exit, so the time taken does not reveal how much of a token matched.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string DerivedPrincipal(const std::string& token) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(token.data());
  return "token-" + media::ToHex(media::HashBytes({bytes, token.size()})).substr(0, 12);
}

// gRPC metadata keys: lower case letters, digits, '-', '_' and '.' (and not "grpc-" ones).
bool IsValidHeaderName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.rfind("grpc-", 0) == 0) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

bool IsValidPrincipal(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '@' || c == ':' || c == '-';
  });
}

StatusOr<BearerAuth> BearerAuth::Create(const AuthOptions& options) {
  BearerAuth auth;
  if (!options.token_file.empty()) {
    std::ifstream in(options.token_file);
    if (!in) return InvalidArgumentError("auth token file '{}' cannot be read", options.token_file);
    std::vector<std::pair<std::string, std::string>> tokens;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      line = Trim(line);
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.find_first_of(" \t");
      if (space == std::string::npos) {
        tokens.emplace_back("", line);
        continue;
      }
      std::string name = line.substr(0, space);
      std::string token = Trim(line.substr(space));
      if (!IsValidPrincipal(name) || token.empty() ||
          token.find_first_of(" \t") != std::string::npos) {
        // Never echo the line: it holds a secret.
        return InvalidArgumentError(
            "auth token file '{}', line {}: expected 'TOKEN' or 'NAME TOKEN' with NAME of "
            "[A-Za-z0-9._@:-]{{1,128}}",
            options.token_file, number);
      }
      tokens.emplace_back(std::move(name), std::move(token));
    }
    if (tokens.empty()) {
      return InvalidArgumentError("auth token file '{}' holds no token", options.token_file);
    }
    auth = FromTokens(std::move(tokens));
  }
  if (!options.tenant_header.empty()) {
    if (!IsValidHeaderName(options.tenant_header)) {
      return InvalidArgumentError(
          "--tenant-header: '{}' is not a gRPC metadata key (lower-case letters, digits, '-', "
          "'_', '.')",
          ClientText(options.tenant_header));
    }
    auth.tenant_header_ = options.tenant_header;
  }
  for (const std::string& p : options.tenant_proxy_principals) {
    if (!IsValidPrincipal(p)) {
      return InvalidArgumentError("--tenant-proxy-principals: '{}' is not a principal name",
                                  ClientText(p));
    }
  }
  auth.tenant_proxies_ = options.tenant_proxy_principals;
  return auth;
}

BearerAuth BearerAuth::FromTokens(std::vector<std::pair<std::string, std::string>> tokens) {
  BearerAuth auth;
  for (auto& [principal, secret] : tokens) {
    if (principal.empty()) principal = DerivedPrincipal(secret);
    auth.tokens_.push_back({std::move(principal), std::move(secret)});
  }
  return auth;
}

StatusOr<std::string> BearerAuth::Authenticate(const grpc::ServerContextBase& context) const {
  const auto& metadata = context.client_metadata();
  std::optional<std::string> authorization;
  std::optional<std::string> tenant;
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization.emplace(it->second.data(), it->second.size());
  }
  if (!tenant_header_.empty()) {
    if (auto it = metadata.find(tenant_header_); it != metadata.end()) {
      tenant.emplace(it->second.data(), it->second.size());
    }
  }
  return AuthenticateHeaders(authorization, tenant);
}

StatusOr<std::string> BearerAuth::AuthenticateHeaders(
    const std::optional<std::string>& authorization,
    const std::optional<std::string>& tenant_value) const {
  std::string principal;
  if (!tokens_.empty()) {
    if (!authorization.has_value()) {
      return UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
    }
    const std::string& value = *authorization;
    constexpr char kPrefix[] = "Bearer ";
    if (value.rfind(kPrefix, 0) != 0) {
      return UnauthenticatedError("the authorization metadata must be 'Bearer <token>'");
    }
    const std::string token = value.substr(sizeof(kPrefix) - 1);
    const Token* match = nullptr;
    // Every token is compared (no early exit), so timing does not tell which one matched.
    for (const Token& t : tokens_) {
      if (ConstantTimeEquals(token, t.secret) && match == nullptr) match = &t;
    }
    if (match == nullptr) return UnauthenticatedError("the bearer token is not valid");
    principal = match->principal;
  }
  if (tenant_header_.empty() || !tenant_value.has_value()) return principal;
  const std::string& tenant = *tenant_value;
  if (!tokens_.empty() && std::find(tenant_proxies_.begin(), tenant_proxies_.end(), principal) ==
                              tenant_proxies_.end()) {
    return PermissionDeniedError("only a trusted proxy may set the '{}' metadata", tenant_header_);
  }
  if (!IsValidPrincipal(tenant)) {
    return InvalidArgumentError("{}: '{}' is not a tenant name ([A-Za-z0-9._@:-]{{1,128}})",
                                tenant_header_, ClientText(tenant));
  }
  return tenant;
}

}  // namespace framezip::server
