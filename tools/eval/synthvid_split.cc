#include "tools/eval/synthvid_split.h"

#include <fstream>
#include <nlohmann/json.hpp>

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
    if (item.num_frames < 1) return InvalidArgumentError("item {}: num_frames < 1", item.id);
    return item;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError("not a synthvid item ({})", e.what());
  }
}

StatusOr<std::vector<SynthvidItem>> LoadSynthvidSplit(const std::filesystem::path& dir,
                                                      std::string_view split, int limit) {
  const std::filesystem::path file = dir / (std::string(split) + ".jsonl");
  std::ifstream in(file);
  if (!in) return NotFoundError("{} does not exist or cannot be read", file.string());
  std::vector<SynthvidItem> items;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    if (limit > 0 && static_cast<int>(items.size()) >= limit) break;
    auto item = ParseSynthvidItem(line, dir);
    if (!item.ok()) return Annotate(item.status(), fmt::format("{}:{}", file.string(), line_no));
    items.push_back(std::move(*item));
  }
  if (items.empty()) return InvalidArgumentError("{} holds no items", file.string());
  return items;
}

const SynthvidQuestion* SecondTurnQuestion(const SynthvidItem& item) {
  for (const SynthvidQuestion& f : item.followups) {
    if (f.question != item.main.question) return &f;
  }
  return nullptr;
}

}  // namespace framezip::eval
