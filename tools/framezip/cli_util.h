// Helpers shared by the CLI's subcommands.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/flags.h"

namespace framezip::cli {

// Parses `args` into `flags`. Returns an exit code when the subcommand must stop now (0 after
// printing --help, 2 after printing a usage error), or nullopt to go on.
std::optional<int> ParseOrExit(FlagSet& flags, const std::vector<std::string>& args);

}  // namespace framezip::cli
