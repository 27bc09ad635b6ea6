// How `framezip eval` scores a reply, exactly as tools/train/evaluate.py does: the reply text
// (special tokens skipped, the stop token excluded) is stripped of surrounding whitespace with
// Python's str.strip() semantics and must then equal the item's answer byte for byte. No case
// folding, no punctuation removal: a reply of "Blue" or "blue." is wrong, as it is in Python.
#pragma once

#include <string>
#include <string_view>

namespace framezip::eval {

// `text` without leading and trailing whitespace as Python's str.strip() defines it: ASCII
// \t \n \v \f \r, space, \x1c-\x1f, and the Unicode White_Space code points (U+0085, U+00A0,
// U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000) encoded as UTF-8.
std::string StripLikePython(std::string_view text);

// Whether a model's reply counts as `answer` (evaluate.py: `pred.strip() == r["answer"]`).
bool AnswerMatches(std::string_view reply, std::string_view answer);

}  // namespace framezip::eval
