#include "engine/model/byte_level.h"

#include <array>

namespace framezip::engine::model {

namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 0x144> cp_to_byte{};  // every alphabet code point is < U+0144
  std::array<std::string, 256> byte_to_utf8;
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    t.cp_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next++;
      t.byte_to_cp[b] = cp;
      t.cp_to_byte[cp] = static_cast<int16_t>(b);
      AppendUtf8(cp, t.byte_to_utf8[b]);
    }
    return t;
  }();
  return tables;
}

// Length of the UTF-8 sequence led by `b`, and the valid range of its second byte
// (Unicode Table 3-7). 0 for bytes that cannot start a sequence.
struct Lead {
  int len;
  uint8_t lo, hi;
};
Lead LeadInfo(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return GetTables().byte_to_cp[b]; }

int UnicodeToByte(char32_t cp) { return cp < 0x144 ? GetTables().cp_to_byte[cp] : -1; }

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> len);
  for (int k = 1; k < len && i + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  }
  i += len;
  return cp;
}

std::string ByteLevelEncode(std::string_view bytes) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

void ByteLevelDecodeToken(std::string_view token, std::string& out) {
  const size_t start = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const int b = UnicodeToByte(NextCodePoint(token, i));
    if (b < 0) {
      // tokenizers: a token with any char outside the alphabet contributes its raw bytes.
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(b));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    const Lead l = LeadInfo(b);
    if (l.len == 0 || i + l.len > s.size()) return false;
    if (l.len > 1) {
      const auto b1 = static_cast<uint8_t>(s[i + 1]);
      if (b1 < l.lo || b1 > l.hi) return false;
      for (int k = 2; k < l.len; ++k) {
        if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
      }
    }
    i += l.len;
  }
  return true;
}

std::string Utf8Lossy(std::string_view s, bool hold_incomplete_tail, size_t* held) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  if (held != nullptr) *held = 0;
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    const Lead l = LeadInfo(b);
    if (l.len == 1) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    if (l.len == 0) {  // not a lead byte: one replacement for this byte
      out.append(kReplacement);
      ++i;
      continue;
    }
    // Consume the longest valid prefix of a sequence (the "maximal subpart").
    size_t k = 1;
    while (k < static_cast<size_t>(l.len) && i + k < s.size()) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      const bool ok = k == 1 ? (c >= l.lo && c <= l.hi) : (c & 0xC0) == 0x80;
      if (!ok) break;
      ++k;
    }
    if (k == static_cast<size_t>(l.len)) {
      out.append(s.substr(i, k));
    } else if (i + k == s.size() && hold_incomplete_tail) {
      if (held != nullptr) *held = k;  // an incomplete character at the very end: keep it
      break;
    } else {
      out.append(kReplacement);
    }
    i += k;
  }
  return out;
}

}  // namespace framezip::engine::model
