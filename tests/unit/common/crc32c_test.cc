#include "common/crc32c.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/unit/kvstore/test_blocks.h"

namespace framezip {
namespace {

// RFC 3720 appendix B.4 test vectors, plus the classic "123456789" check value.
TEST_CASE("crc32c matches RFC 3720 vectors on both paths", "[unit][common]") {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  const std::vector<uint8_t> iscsi_read = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
      0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  struct Vector {
    const std::vector<uint8_t>* data;
    uint32_t crc;
  };
  for (const Vector& v : {Vector{&zeros, 0x8A9136AAu}, Vector{&ones, 0x62A8AB43u},
                          Vector{&inc, 0x46DD794Eu}, Vector{&dec, 0x113FDB5Cu},
                          Vector{&iscsi_read, 0xD9963A56u}}) {
    CHECK(Crc32c(v.data->data(), v.data->size()) == v.crc);
    CHECK(Crc32cExtendPortable(0, v.data->data(), v.data->size()) == v.crc);
  }
  CHECK(Crc32c(std::string_view("123456789")) == 0xE3069283u);
  CHECK(Crc32c(nullptr, 0) == 0u);
  INFO("hardware path: " << Crc32cUsesHardware());
}

TEST_CASE("crc32c hardware and table paths agree at every length and alignment",
          "[unit][common]") {
  const std::string data = kvstore::test::BytesOf(7, 4096 + 17);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4096}) {
      const char* p = data.data() + offset;
      REQUIRE(Crc32cExtend(0, p, len) == Crc32cExtendPortable(0, p, len));
    }
  }
  // Extending in pieces equals one pass.
  const uint32_t whole = Crc32c(data);
  uint32_t crc = 0;
  for (size_t i = 0; i < data.size(); i += 333) {
    crc = Crc32cExtend(crc, data.data() + i, std::min<size_t>(333, data.size() - i));
  }
  CHECK(crc == whole);
  std::string flipped = data;
  flipped[100] ^= 1;
  CHECK(Crc32c(flipped) != whole);
}

}  // namespace
}  // namespace framezip
