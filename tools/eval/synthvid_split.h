// A synthvid split as tools/synthvid/synthvid.py writes it (tools/synthvid/README.md):
//   <dir>/<split>.jsonl   one item per line: id, video (mp4 path relative to <dir>), num_frames,
//                         task, question, answer, followups [{task, question, answer}], ...
//   <dir>/videos/<id>.mp4
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace framezip::eval {

struct SynthvidQuestion {
  std::string task;
  std::string question;
  std::string answer;
};

struct SynthvidItem {
  std::string id;
  std::filesystem::path video;  // absolute, or relative to the current directory
  int num_frames = 0;           // frames in the file = frames the model is given
  SynthvidQuestion main;        // the item's task question
  std::vector<SynthvidQuestion> followups;
};

// The split's items in file order, at most `limit` of them (0 = all). NOT_FOUND when
// <dir>/<split>.jsonl is missing; INVALID_ARGUMENT naming the line for a malformed item.
StatusOr<std::vector<SynthvidItem>> LoadSynthvidSplit(const std::filesystem::path& dir,
                                                      std::string_view split, int limit = 0);

// One JSONL line; `dir` is the folder the item's video path is relative to.
StatusOr<SynthvidItem> ParseSynthvidItem(std::string_view line, const std::filesystem::path& dir);

// evaluate.py --turn2: the first follow-up that differs from the item's own question, or nullptr.
const SynthvidQuestion* SecondTurnQuestion(const SynthvidItem& item);

}  // namespace framezip::eval
