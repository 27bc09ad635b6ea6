// A small command-line flag parser shared by framezip's binaries and subcommands.
//
//   FlagSet flags("framezip run", "Runs one turn in-process.");
//   std::string model;
//   flags.String("model", &model, "model directory", "DIR");
//   int max_tokens = 64;
//   flags.Int("max-tokens", &max_tokens, "tokens to generate at most");
//   if (auto s = flags.Parse(args); !s.ok()) ...   // --help is reported as kHelpRequested
//
// Accepts "--name value" and "--name=value"; bool flags take no value ("--json") or "=true/false".
// An environment variable FRAMEZIP_<NAME> (upper case, '-' -> '_') sets a flag's default when
// `env_prefix` is given, so configuration can come from flags or the environment.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace framezip {

class FlagSet {
 public:
  FlagSet(std::string program, std::string summary);

  void String(std::string name, std::string* target, std::string help,
              std::string value_name = "S");
  void Int(std::string name, int64_t* target, std::string help);
  void Int(std::string name, int* target, std::string help);
  void Double(std::string name, double* target, std::string help);
  void Bool(std::string name, bool* target, std::string help);

  // Reads FRAMEZIP_<NAME> variables for every flag (call before Parse so flags win).
  Status ApplyEnvironment(std::string_view env_prefix = "FRAMEZIP_");

  // Parses `args` (without the program name). Positional arguments are collected in
  // positional(). Returns INVALID_ARGUMENT naming the flag for unknown flags or bad values, and
  // a status with message "help" (see IsHelp) when --help or -h is present.
  Status Parse(const std::vector<std::string>& args);

  static bool IsHelp(const Status& status);

  const std::vector<std::string>& positional() const { return positional_; }
  // Was this flag given on the command line or in the environment?
  bool WasSet(std::string_view name) const;
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string value_name;
    std::string default_text;
    bool is_bool = false;
    bool set = false;
    std::function<Status(std::string_view)> assign;
  };
  Flag* Find(std::string_view name);
  Flag& Add(std::string name, std::string help, std::string value_name, std::string default_text,
            bool is_bool, std::function<Status(std::string_view)> assign);

  std::string program_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
};

// argv[first..argc) as strings.
std::vector<std::string> ArgsFrom(int argc, char** argv, int first = 1);

}  // namespace framezip
