// Policy specs: "name" or "name:key=value,key=value" (the --policy flag, the server's default
// policy, EngineOptions::default_policy). Each policy reads its keys through PolicyOptions and
// then calls CheckAllUsed(), so a misspelt key is an INVALID_ARGUMENT that names it instead of
// being silently ignored.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace framezip::engine::compress {

class PolicyOptions {
 public:
  // Splits "name:k=v,k=v". INVALID_ARGUMENT for an empty key, a pair without '=', or a key given
  // twice.
  static StatusOr<PolicyOptions> Parse(std::string_view spec);

  const std::string& name() const { return name_; }
  bool empty() const { return values_.empty(); }

  // The value of `key` or `fallback` when absent; INVALID_ARGUMENT naming the key when the value
  // does not parse or lies outside [lo, hi].
  StatusOr<double> Double(const std::string& key, double fallback, double lo, double hi);
  StatusOr<int64_t> Int(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  // The index in `allowed` of the value (0, the first, when absent).
  StatusOr<int> Choice(const std::string& key, std::initializer_list<const char*> allowed);

  // INVALID_ARGUMENT naming the first key no getter asked for.
  Status CheckAllUsed() const;

 private:
  std::string name_;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
};

}  // namespace framezip::engine::compress
