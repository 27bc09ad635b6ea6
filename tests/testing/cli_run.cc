#include "tests/testing/cli_run.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "tests/testing/temp_dir.h"

namespace framezip::testing {

CliRun RunFramezipCli(const std::string& args, const std::string& env) {
  return RunBuiltProgram("framezip", args, env);
}

CliRun RunBuiltProgram(const std::string& program, const std::string& args,
                       const std::string& env) {
  TempDir tmp;
  const std::string err = (tmp / "stderr").string();
  const std::string cmd =
      env + " " + (BinaryDir() / "bin" / program).string() + " " + args + " 2>" + err;
  CliRun run;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed for: " + cmd);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) run.stdout_text.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  run.stderr_text.assign(std::istreambuf_iterator<char>(in), {});
  return run;
}

std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

}  // namespace framezip::testing
