// Content hash of media bytes: the identity of a video or image in KV cache keys. Two uploads of
// the same bytes share KV blocks; different bytes never collide (SHA-256).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace framezip::media {

using ContentHash = std::array<uint8_t, 32>;

ContentHash HashBytes(std::span<const uint8_t> bytes);

// Incremental SHA-256, for media read in chunks (a file too large to hold in memory). Gives the
// same hash as HashBytes over the concatenated chunks.
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  void Update(std::span<const uint8_t> bytes);
  ContentHash Finish();  // call once

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Lower-case hex, 64 characters.
std::string ToHex(const ContentHash& hash);

}  // namespace framezip::media
