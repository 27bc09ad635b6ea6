#include "tools/framezip/cli_util.h"

#include <cstdio>

namespace framezip::cli {

std::optional<int> ParseOrExit(FlagSet& flags, const std::vector<std::string>& args) {
  Status status = flags.ApplyEnvironment();
  if (status.ok()) status = flags.Parse(args);
  if (FlagSet::IsHelp(status)) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "framezip: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace framezip::cli
