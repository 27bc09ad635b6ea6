// Content hash of media bytes: the identity of a video or image in KV cache keys. Two uploads of
// the same bytes share KV blocks; different bytes never collide (SHA-256).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace framezip::media {

using ContentHash = std::array<uint8_t, 32>;

ContentHash HashBytes(std::span<const uint8_t> bytes);

// Lower-case hex, 64 characters.
std::string ToHex(const ContentHash& hash);

}  // namespace framezip::media
