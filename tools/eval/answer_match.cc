#include "tools/eval/answer_match.h"

#include <cstdint>

namespace framezip::eval {
namespace {

bool IsPythonSpace(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Length (1-3) of the whitespace code point that starts at text[i], or 0 when there is none.
size_t SpaceAt(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const size_t left = text.size() - i;
  if (b(0) < 0x80) return IsPythonSpace(b(0)) ? 1 : 0;
  if ((b(0) & 0xe0) == 0xc0 && left >= 2 && (b(1) & 0xc0) == 0x80) {
    return IsPythonSpace(((b(0) & 0x1fu) << 6) | (b(1) & 0x3fu)) ? 2 : 0;
  }
  if ((b(0) & 0xf0) == 0xe0 && left >= 3 && (b(1) & 0xc0) == 0x80 && (b(2) & 0xc0) == 0x80) {
    return IsPythonSpace(((b(0) & 0x0fu) << 12) | ((b(1) & 0x3fu) << 6) | (b(2) & 0x3fu)) ? 3 : 0;
  }
  return 0;  // 4-byte sequences hold no whitespace; invalid bytes are not whitespace either
}

// Length of the whitespace code point that ends just before text[end], or 0.
size_t SpaceBefore(std::string_view text, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; ++len) {
    if (SpaceAt(text, end - len) == len) return len;
  }
  return 0;
}

}  // namespace

std::string StripLikePython(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end) {
    const size_t n = SpaceAt(text.substr(0, end), begin);
    if (n == 0) break;
    begin += n;
  }
  while (end > begin) {
    const size_t n = SpaceBefore(text.substr(0, end), end);
    if (n == 0) break;
    end -= n;
  }
  return std::string(text.substr(begin, end - begin));
}

bool AnswerMatches(std::string_view reply, std::string_view answer) {
  return StripLikePython(reply) == answer;
}

}  // namespace framezip::eval
