#include "common/client_text.h"

#include "fmt/format.h"

namespace framezip {
namespace {

// Length of the UTF-8 sequence that starts at `s[i]` (1..4), or 0 when it is not a valid one.
size_t Utf8Length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  if (c < 0x80) {
    n = 1;
  } else if ((c >> 5) == 0x6) {
    n = 2;
  } else if ((c >> 4) == 0xE) {
    n = 3;
  } else if ((c >> 3) == 0x1E) {
    n = 4;
  }
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string ClientText(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = Utf8Length(text, i);
    const auto c = static_cast<unsigned char>(text[i]);
    const bool control = n == 1 && (c < 0x20 || c == 0x7F);
    const size_t take = (n == 0 || control) ? 1 : n;
    if (i + take > max_bytes) break;
    if (n == 0 || control) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.append(text.substr(i, n));
    }
    i += take;
  }
  if (i < text.size()) out += fmt::format("\u2026 ({} bytes)", text.size());
  return out;
}

}  // namespace framezip
