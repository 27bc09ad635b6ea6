#include "engine/compress/policy.h"

namespace framezip::engine::compress {

std::vector<std::string> PolicyNames() { return {"none"}; }

StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(std::string_view name) {
  if (name.empty() || name == "none") return std::unique_ptr<CompressionPolicy>(new NonePolicy());
  return InvalidArgumentError("unknown compression policy '{}' (known: {})", name,
                              fmt::join(PolicyNames(), ", "));
}

}  // namespace framezip::engine::compress
