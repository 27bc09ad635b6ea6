// Runs the `framezip` command-line tool of this build (build/bin/framezip) as a person would, for
// the tests of its subcommands: stdout and stderr captured apart, the exit code kept.
#pragma once

#include <string>

namespace framezip::testing {

struct CliRun {
  int exit_code = -1;  // -1 when the program did not exit normally
  std::string stdout_text;
  std::string stderr_text;
};

// `env` (e.g. "FRAMEZIP_X=1") is put in front of the command line; `args` are shell words.
CliRun RunFramezipCli(const std::string& args, const std::string& env = "");

// The same for another program of this build's bin/ (e.g. "framezip-eval-frames").
CliRun RunBuiltProgram(const std::string& program, const std::string& args,
                       const std::string& env = "");

// The last non-empty line of `text`: where `--json` puts its object.
std::string LastLine(std::string text);

}  // namespace framezip::testing
