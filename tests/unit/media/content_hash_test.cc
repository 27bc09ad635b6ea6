#include "media/content_hash.h"

#include <catch2/catch.hpp>
#include <string_view>

namespace framezip::media {
namespace {

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST_CASE("content hash is SHA-256 of the bytes", "[unit][media]") {
  // FIPS 180-2 test vectors.
  CHECK(ToHex(HashBytes(Bytes(""))) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(ToHex(HashBytes(Bytes("abc"))) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(HashBytes(Bytes("video-a")) != HashBytes(Bytes("video-b")));
}

}  // namespace
}  // namespace framezip::media
