#include "tools/eval/synthvid2_split.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace framezip::eval {

StatusOr<Synthvid2Item> ParseSynthvid2Item(std::string_view line,
                                           const std::filesystem::path& dir) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    Synthvid2Item item;
    item.id = j.at("id").get<std::string>();
    item.task = j.at("task").get<std::string>();
    item.video = dir / j.at("video").get<std::string>();
    item.num_frames = j.at("num_frames").get<int>();
    item.length_bucket = j.value("length_bucket", item.num_frames);
    for (const auto& t : j.at("turns")) {
      item.turns.push_back({t.at("question").get<std::string>(), t.at("answer").get<std::string>(),
                            t.value("kind", item.task)});
    }
    if (j.contains("facts")) {
      for (const auto& f : j.at("facts")) {
        item.facts.push_back({f.at("order").get<int>(), f.at("color").get<std::string>(),
                              f.at("shape").get<std::string>(), f.at("motion").get<std::string>()});
      }
    }
    if (item.num_frames < 1) return InvalidArgumentError("item {}: num_frames < 1", item.id);
    if (item.turns.empty()) return InvalidArgumentError("item {}: no turns", item.id);
    if (item.task == "describe" && item.facts.empty()) {
      return InvalidArgumentError("item {}: a describe item without facts", item.id);
    }
    return item;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError("not a synthvid v2 item ({})", e.what());
  }
}

StatusOr<std::vector<Synthvid2Item>> LoadSynthvid2Split(const std::filesystem::path& dir,
                                                        std::string_view split, int limit) {
  const std::filesystem::path file = dir / (std::string(split) + ".jsonl");
  std::ifstream in(file);
  if (!in) return NotFoundError("{} does not exist or cannot be read", file.string());
  std::vector<Synthvid2Item> items;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    if (limit > 0 && static_cast<int>(items.size()) >= limit) break;
    auto item = ParseSynthvid2Item(line, dir);
    if (!item.ok()) return Annotate(item.status(), fmt::format("{}:{}", file.string(), line_no));
    items.push_back(std::move(*item));
  }
  if (items.empty()) return InvalidArgumentError("{} holds no items", file.string());
  return items;
}

StatusOr<Synthvid2Provenance> LoadSynthvid2Provenance(const std::filesystem::path& dir,
                                                      std::string_view split) {
  const std::filesystem::path file = dir / (std::string(split) + ".manifest.json");
  std::ifstream in(file);
  if (!in) return NotFoundError("{} does not exist or cannot be read", file.string());
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    Synthvid2Provenance p;
    p.generator = j.value("generator", "");
    p.generator_version = j.value("generator_version", 0);
    const std::string jsonl = std::string(split) + ".jsonl";
    if (j.contains("files") && j.at("files").contains(jsonl)) {
      p.jsonl_sha256 = j.at("files").at(jsonl).get<std::string>();
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError("{}: {}", file.string(), e.what());
  }
}

}  // namespace framezip::eval
