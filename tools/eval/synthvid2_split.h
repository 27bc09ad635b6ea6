// A synthvid v2 split as tools/synthvid/synthvid2.py writes it (tools/synthvid/README.md, "v2"):
//   <dir>/<split>.jsonl           one item per line: id, task, video, num_frames, length_bucket,
//                                 turns [{question, answer, kind}], facts (describe only), ...
//   <dir>/<split>.manifest.json   generator, version, package versions, every file's sha256
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tools/eval/describe_score.h"

namespace framezip::eval {

struct Synthvid2Turn {
  std::string question;
  std::string answer;  // the exact expected reply
  std::string kind;    // the task, or for multiturn items what the turn asks
};

struct Synthvid2Item {
  std::string id;
  std::string task;  // needle, after, order_far, count_long, multiturn, describe
  std::filesystem::path video;
  int num_frames = 0;
  int length_bucket = 0;
  std::vector<Synthvid2Turn> turns;  // the session's user turns; the video comes with turn 1
  std::vector<DescribeFact> facts;   // describe only
};

// What a split's manifest says of where it came from (reported with the results).
struct Synthvid2Provenance {
  std::string generator;
  int generator_version = 0;
  std::string jsonl_sha256;  // of <split>.jsonl, as the manifest records it
};

// The split's items in file order, at most `limit` (0 = all). NOT_FOUND when the JSONL is
// missing; INVALID_ARGUMENT naming the line for a malformed item.
StatusOr<std::vector<Synthvid2Item>> LoadSynthvid2Split(const std::filesystem::path& dir,
                                                        std::string_view split, int limit = 0);
StatusOr<Synthvid2Item> ParseSynthvid2Item(std::string_view line,
                                           const std::filesystem::path& dir);

// From <dir>/<split>.manifest.json; NOT_FOUND without one.
StatusOr<Synthvid2Provenance> LoadSynthvid2Provenance(const std::filesystem::path& dir,
                                                      std::string_view split);

}  // namespace framezip::eval
