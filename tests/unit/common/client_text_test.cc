// ClientText (common/client_text.h): client strings quoted in messages are short, cut on a
// character boundary, and carry no control characters.
#include <catch2/catch.hpp>

#include "common/client_text.h"

namespace framezip {
namespace {

TEST_CASE("client text is quoted short, whole characters, no control bytes", "[unit][common]") {
  CHECK(ClientText("model-a") == "model-a");
  const std::string huge(65536, 'm');
  const std::string quoted = ClientText(huge);
  CHECK(quoted.size() < 100);
  CHECK(quoted.rfind(std::string(kClientTextBytes, 'm'), 0) == 0);
  CHECK(quoted.find("(65536 bytes)") != std::string::npos);
  // A multi-byte character straddling the cut is dropped whole, never split.
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xc3\xa9";  // é
  const std::string cut = ClientText(accents);
  CHECK(cut.rfind(std::string(accents, 0, 64), 0) == 0);
  CHECK(cut.find("(80 bytes)") != std::string::npos);
  // Escapes and invalid UTF-8 come out as \xNN.
  CHECK(ClientText("a\x1b[2Jb") == "a\\x1b[2Jb");
  CHECK(ClientText("\xff\xfe") == "\\xff\\xfe");
  CHECK(ClientText("") == "");
}

}  // namespace
}  // namespace framezip
