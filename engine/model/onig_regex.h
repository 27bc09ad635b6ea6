// A compiled Oniguruma regular expression (UTF-8, Oniguruma syntax): the engine huggingface
// tokenizers uses for Split patterns, so \p{L}, \s, (?i:...) and lookaheads behave identically.
// RAII over regex_t; FindAll is const and safe to call from several threads (each call has its
// own match region).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace framezip::engine::model {

class OnigRegex {
 public:
  // INVALID_ARGUMENT with Oniguruma's message when `pattern` does not compile.
  static StatusOr<std::unique_ptr<OnigRegex>> Compile(std::string_view pattern);
  ~OnigRegex();
  OnigRegex(const OnigRegex&) = delete;
  OnigRegex& operator=(const OnigRegex&) = delete;

  // Byte ranges [begin, end) of successive non-overlapping matches, left to right, like the
  // onig crate's find_iter: after an empty match the search resumes one character later.
  // `text` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  OnigRegex() = default;
  void* regex_ = nullptr;  // regex_t*, kept opaque so oniguruma.h stays out of this header
  std::string pattern_;
};

}  // namespace framezip::engine::model
