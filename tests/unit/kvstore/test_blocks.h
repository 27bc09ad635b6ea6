// Helpers for kvstore tests: deterministic keys and block contents, so a test can check that
// what comes back is exactly what went in.
#pragma once

#include <cstdint>
#include <string>

#include "kvstore/block_key.h"

namespace framezip::kvstore::test {

inline BlockKey KeyOf(uint64_t n) {
  BlockKey key{};
  for (int i = 0; i < 8; ++i) key[i] = static_cast<uint8_t>(n >> (8 * i));
  key[31] = 0xA5;  // never the root key
  return key;
}

// `size` bytes that depend on `seed` everywhere (xorshift), so a swapped or torn block differs.
inline std::string BytesOf(uint64_t seed, size_t size) {
  std::string s(size, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

}  // namespace framezip::kvstore::test
