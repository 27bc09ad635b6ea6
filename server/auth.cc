#include "server/auth.h"

#include <fstream>

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

}  // namespace

StatusOr<BearerAuth> BearerAuth::FromTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("auth token file '{}' cannot be read", path);
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    tokens.push_back(line);
  }
  if (tokens.empty()) return InvalidArgumentError("auth token file '{}' holds no token", path);
  return FromTokens(std::move(tokens));
}

BearerAuth BearerAuth::FromTokens(std::vector<std::string> tokens) {
  BearerAuth auth;
  auth.tokens_ = std::move(tokens);
  return auth;
}

Status BearerAuth::Check(const grpc::ServerContextBase& context) const {
  if (tokens_.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  const std::string value(it->second.data(), it->second.size());
  constexpr char kPrefix[] = "Bearer ";
  if (value.rfind(kPrefix, 0) != 0) {
    return UnauthenticatedError("the authorization metadata must be 'Bearer <token>'");
  }
  const std::string token = value.substr(sizeof(kPrefix) - 1);
  bool ok = false;
  for (const std::string& t : tokens_) ok |= ConstantTimeEquals(token, t);
  if (!ok) return UnauthenticatedError("the bearer token is not valid");
  return absl::OkStatus();
}

}  // namespace framezip::server
