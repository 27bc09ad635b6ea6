#include "tools/eval/synthvid_split.h"

#include <nlohmann/json.hpp>

#include "tools/eval/jsonl_split.h"

namespace framezip::eval {
namespace {

SynthvidQuestion QuestionFrom(const nlohmann::json& j) {
  return {j.at("task").get<std::string>(), j.at("question").get<std::string>(),
          j.at("answer").get<std::string>()};
}

}  // namespace

StatusOr<SynthvidItem> ParseSynthvidItem(std::string_view line, const std::filesystem::path& dir) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    SynthvidItem item;
    item.id = j.at("id").get<std::string>();
    item.video = dir / j.at("video").get<std::string>();
    item.num_frames = j.at("num_frames").get<int>();
    item.main = QuestionFrom(j);
    if (j.contains("followups")) {
      for (const auto& f : j.at("followups")) item.followups.push_back(QuestionFrom(f));
    }
    if (item.num_frames < 1 || item.num_frames > kMaxSplitFrames) {
      return InvalidArgumentError("item {}: num_frames {} outside [1, {}]", item.id,
                                  item.num_frames, kMaxSplitFrames);
    }
    return item;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError("not a synthvid item ({})", e.what());
  }
}

StatusOr<std::vector<SynthvidItem>> LoadSynthvidSplit(const std::filesystem::path& dir,
                                                      std::string_view split, int limit) {
  return LoadJsonlSplit(dir, split, limit, ParseSynthvidItem);
}

const SynthvidQuestion* SecondTurnQuestion(const SynthvidItem& item) {
  for (const SynthvidQuestion& f : item.followups) {
    if (f.question != item.main.question) return &f;
  }
  return nullptr;
}

}  // namespace framezip::eval
