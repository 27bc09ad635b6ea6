#include "engine/model/onig_regex.h"

#include <oniguruma.h>

#include <mutex>

namespace framezip::engine::model {

namespace {
void InitOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string OnigMessage(int code, OnigErrorInfo* info) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n =
      info != nullptr ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
  return std::string(reinterpret_cast<const char*>(buf), n > 0 ? static_cast<size_t>(n) : 0);
}
}  // namespace

StatusOr<std::unique_ptr<OnigRegex>> OnigRegex::Compile(std::string_view pattern) {
  InitOnce();
  std::unique_ptr<OnigRegex> r(new OnigRegex());
  r->pattern_ = std::string(pattern);
  regex_t* reg = nullptr;
  OnigErrorInfo info{};
  const auto* p = reinterpret_cast<const OnigUChar*>(r->pattern_.data());
  const int rc = onig_new(&reg, p, p + r->pattern_.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                          ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    return InvalidArgumentError("regex '{}' does not compile: {}", pattern, OnigMessage(rc, &info));
  }
  r->regex_ = reg;
  return r;
}

OnigRegex::~OnigRegex() {
  if (regex_ != nullptr) onig_free(static_cast<regex_t*>(regex_));
}

std::vector<std::pair<size_t, size_t>> OnigRegex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* reg = static_cast<regex_t*>(regex_);
  OnigRegion* region = onig_region_new();
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  size_t pos = 0;
  while (pos <= text.size()) {
    const int r = onig_search(reg, begin, end, begin + pos, end, region, ONIG_OPTION_NONE);
    if (r < 0) break;  // ONIG_MISMATCH (or an error: treat as no further match)
    const auto b = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    out.emplace_back(b, e);
    if (e > b) {
      pos = e;
    } else {
      // Empty match: step over one whole character so the search always progresses.
      if (e >= text.size()) break;
      size_t step = 1;
      while (e + step < text.size() && (static_cast<uint8_t>(text[e + step]) & 0xC0) == 0x80) {
        ++step;
      }
      pos = e + step;
    }
    onig_region_clear(region);
  }
  onig_region_free(region, 1);
  return out;
}

}  // namespace framezip::engine::model
