// Scoring of synthvid v2's describe task (tools/synthvid/README.md, "describe: grammar and
// scoring"): the reply is parsed into clauses "a|an COLOR SHAPE moves DIRECTION." or
// "a|an COLOR SHAPE stays still.", and matched in order against the item's facts (one per object,
// by onset) by the longest common subsequence. The same rule as synthvid2.py's score_describe,
// so a reply scores alike in Python and here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace framezip::eval {

struct DescribeFact {
  int order = 0;       // 1, 2, ... by onset
  std::string color;
  std::string shape;
  std::string motion;  // left, right, up, down or still
};

struct DescribeScore {
  double precision = 0;  // matched / clauses in the reply (malformed ones included)
  double recall = 0;     // matched / facts
  double f1 = 0;
};

// Lowercases `reply`, splits it on '.', then each piece on whitespace (empty pieces dropped); a
// piece that is not exactly one of the two clause forms matches nothing but still counts.
DescribeScore ScoreDescribe(std::string_view reply, const std::vector<DescribeFact>& facts);

}  // namespace framezip::eval
