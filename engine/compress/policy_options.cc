#include "engine/compress/policy_options.h"

#include <charconv>
#include <cstdlib>

namespace framezip::engine::compress {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

StatusOr<PolicyOptions> PolicyOptions::Parse(std::string_view spec) {
  PolicyOptions o;
  const size_t colon = spec.find(':');
  o.name_ = std::string(Trim(spec.substr(0, colon)));
  if (colon == std::string_view::npos) return o;
  std::string_view rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view pair = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || Trim(pair.substr(0, eq)).empty()) {
      return InvalidArgumentError("policy '{}': option '{}' is not key=value", o.name_, pair);
    }
    const std::string key(Trim(pair.substr(0, eq)));
    if (!o.values_.emplace(key, std::string(Trim(pair.substr(eq + 1)))).second) {
      return InvalidArgumentError("policy '{}': option '{}' given twice", o.name_, key);
    }
  }
  return o;
}

StatusOr<double> PolicyOptions::Double(const std::string& key, double fallback, double lo,
                                       double hi) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(v >= lo && v <= hi)) {
    return InvalidArgumentError("policy '{}': {}='{}' is not a number in [{}, {}]", name_, key,
                                it->second, lo, hi);
  }
  return v;
}

StatusOr<int64_t> PolicyOptions::Int(const std::string& key, int64_t fallback, int64_t lo,
                                     int64_t hi) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  const std::string& s = it->second;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
    return InvalidArgumentError("policy '{}': {}='{}' is not an integer in [{}, {}]", name_, key, s,
                                lo, hi);
  }
  return v;
}

StatusOr<int> PolicyOptions::Choice(const std::string& key,
                                    std::initializer_list<const char*> allowed) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return 0;
  int index = 0;
  for (const char* a : allowed) {
    if (it->second == a) return index;
    ++index;
  }
  return InvalidArgumentError("policy '{}': {}='{}' is not one of {}", name_, key, it->second,
                              fmt::join(allowed, "|"));
}

Status PolicyOptions::CheckAllUsed() const {
  for (const auto& [key, value] : values_) {
    if (!used_.contains(key)) {
      return InvalidArgumentError("policy '{}' has no option '{}'", name_, key);
    }
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::compress
