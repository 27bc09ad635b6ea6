#include "media/content_hash.h"

#include <openssl/sha.h>

namespace framezip::media {

ContentHash HashBytes(std::span<const uint8_t> bytes) {
  ContentHash out;
  SHA256(bytes.data(), bytes.size(), out.data());
  return out;
}

std::string ToHex(const ContentHash& hash) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(hash.size() * 2, '0');
  for (size_t i = 0; i < hash.size(); ++i) {
    s[2 * i] = kHex[hash[i] >> 4];
    s[2 * i + 1] = kHex[hash[i] & 0xf];
  }
  return s;
}

}  // namespace framezip::media
