// The reply scoring of framezip eval against what tools/train/evaluate.py does in Python:
// `pred.strip() == answer`.
#include "tools/eval/answer_match.h"

#include <catch2/catch.hpp>

namespace framezip::eval {
namespace {

TEST_CASE("StripLikePython strips what Python's str.strip strips", "[unit][eval]") {
  CHECK(StripLikePython("blue") == "blue");
  CHECK(StripLikePython("  blue \n") == "blue");
  CHECK(StripLikePython("\t\r\n\v\fblue\x1c\x1d\x1e\x1f") == "blue");
  CHECK(StripLikePython("") == "");
  CHECK(StripLikePython(" \n\t ") == "");
  // Inner whitespace stays.
  CHECK(StripLikePython(" light blue ") == "light blue");
  // Unicode White_Space: NBSP U+00A0, NEL U+0085, EM SPACE U+2003, IDEOGRAPHIC SPACE U+3000.
  CHECK(StripLikePython("\xc2\xa0"
                        "blue\xc2\x85") == "blue");
  CHECK(StripLikePython("\xe2\x80\x83"
                        "blue\xe3\x80\x80") == "blue");
  // Not whitespace for Python: ZERO WIDTH SPACE U+200B, U+00E9 (é ends in 0xa9), a lone 0xa0
  // byte (invalid UTF-8), a 4-byte emoji.
  CHECK(StripLikePython("\xe2\x80\x8b"
                        "blue") ==
        "\xe2\x80\x8b"
        "blue");
  CHECK(StripLikePython("caf\xc3\xa9 ") == "caf\xc3\xa9");
  CHECK(StripLikePython("blue\xa0") == "blue\xa0");
  CHECK(StripLikePython(" \xf0\x9f\x94\xb5 ") == "\xf0\x9f\x94\xb5");
}

TEST_CASE("AnswerMatches is exact after stripping, like evaluate.py", "[unit][eval]") {
  CHECK(AnswerMatches("blue", "blue"));
  CHECK(AnswerMatches(" blue\n", "blue"));
  CHECK(AnswerMatches("3", "3"));
  // No case folding, punctuation removal or prefix matching.
  CHECK_FALSE(AnswerMatches("Blue", "blue"));
  CHECK_FALSE(AnswerMatches("blue.", "blue"));
  CHECK_FALSE(AnswerMatches("blue square", "blue"));
  CHECK_FALSE(AnswerMatches("blu", "blue"));
  CHECK_FALSE(AnswerMatches("", "blue"));
  CHECK_FALSE(AnswerMatches("33", "3"));
}

}  // namespace
}  // namespace framezip::eval
