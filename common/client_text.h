// Client-supplied strings quoted in error messages: at most kClientTextBytes bytes of the text,
// cut on a UTF-8 boundary, control characters and invalid bytes shown as \xNN, and the full
// length said when it was cut. So a 64 KiB model name cannot turn a NOT_FOUND into a
// metadata-size error, and a message never carries a client's terminal escapes into a log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace framezip {

inline constexpr size_t kClientTextBytes = 64;

// "abc", or "abcd…" + " (70000 bytes)" when longer than `max_bytes`.
std::string ClientText(std::string_view text, size_t max_bytes = kClientTextBytes);

}  // namespace framezip
