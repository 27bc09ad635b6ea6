#include "common/flags.h"

#include <charconv>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_replace.h"

namespace framezip {
namespace {

constexpr char kHelp[] = "help requested";

template <typename T>
Status ParseNumber(std::string_view name, std::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  if (ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(fmt::format("--{}: '{}' is not a valid number", name, text));
  }
  return absl::OkStatus();
}

}  // namespace

FlagSet::FlagSet(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

FlagSet::Flag& FlagSet::Add(std::string name, std::string help, std::string value_name,
                            std::string default_text, bool is_bool,
                            std::function<Status(std::string_view)> assign) {
  flags_.push_back(Flag{std::move(name), std::move(help), std::move(value_name),
                        std::move(default_text), is_bool, false, std::move(assign)});
  return flags_.back();
}

void FlagSet::String(std::string name, std::string* target, std::string help,
                     std::string value_name) {
  Add(name, std::move(help), std::move(value_name), *target, false, [target](std::string_view v) {
    *target = std::string(v);
    return absl::OkStatus();
  });
}

void FlagSet::Int(std::string name, int64_t* target, std::string help) {
  Add(name, std::move(help), "N", std::to_string(*target), false,
      [target, name](std::string_view v) { return ParseNumber(name, v, target); });
}

void FlagSet::Int(std::string name, int* target, std::string help) {
  Add(name, std::move(help), "N", std::to_string(*target), false,
      [target, name](std::string_view v) { return ParseNumber(name, v, target); });
}

void FlagSet::Double(std::string name, double* target, std::string help) {
  Add(name, std::move(help), "X", fmt::format("{}", *target), false,
      [target, name](std::string_view v) -> Status {
        char* end = nullptr;
        const std::string s(v);
        const double d = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) {
          return absl::InvalidArgumentError(fmt::format("--{}: '{}' is not a number", name, v));
        }
        *target = d;
        return absl::OkStatus();
      });
}

void FlagSet::Bool(std::string name, bool* target, std::string help) {
  Add(name, std::move(help), "", *target ? "true" : "false", true,
      [target, name](std::string_view v) -> Status {
        if (v.empty() || v == "true" || v == "1") {
          *target = true;
        } else if (v == "false" || v == "0") {
          *target = false;
        } else {
          return absl::InvalidArgumentError(
              fmt::format("--{}: '{}' is not true or false", name, v));
        }
        return absl::OkStatus();
      });
}

FlagSet::Flag* FlagSet::Find(std::string_view name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(std::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

Status FlagSet::ApplyEnvironment(std::string_view env_prefix) {
  for (Flag& f : flags_) {
    const std::string var = fmt::format(
        "{}{}", env_prefix, absl::AsciiStrToUpper(absl::StrReplaceAll(f.name, {{"-", "_"}})));
    if (const char* value = std::getenv(var.c_str()); value != nullptr) {
      if (Status s = f.assign(value); !s.ok()) {
        return absl::InvalidArgumentError(fmt::format("environment {}: {}", var, MessageOf(s)));
      }
      f.set = true;
    }
  }
  return absl::OkStatus();
}

Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") return absl::CancelledError(kHelp);
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string_view body = std::string_view(arg).substr(2);
    std::string_view name = body;
    std::string_view value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string_view::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("unknown flag --{} (see {} --help)", name, program_));
    }
    if (!has_value && !flag->is_bool) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(fmt::format("--{} needs a value", name));
      }
      value = args[++i];
    }
    FZ_RETURN_IF_ERROR(flag->assign(value));
    flag->set = true;
  }
  return absl::OkStatus();
}

bool FlagSet::IsHelp(const Status& status) {
  return status.code() == absl::StatusCode::kCancelled && MessageOf(status) == kHelp;
}

std::string FlagSet::Help() const {
  std::string out = fmt::format("usage: {} [flags]\n{}\n\nflags:\n", program_, summary_);
  for (const Flag& f : flags_) {
    std::string left =
        fmt::format("  --{}{}{}", f.name, f.value_name.empty() ? "" : " ", f.value_name);
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&out, left, " ", f.help);
    if (!f.default_text.empty()) absl::StrAppend(&out, " (default: ", f.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help                       this text\n");
  return out;
}

std::vector<std::string> ArgsFrom(int argc, char** argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return args;
}

}  // namespace framezip
