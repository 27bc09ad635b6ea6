#include "tools/eval/synthvid2_split.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "tools/eval/jsonl_split.h"

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
    if (item.num_frames < 1 || item.num_frames > kMaxSplitFrames) {
      return InvalidArgumentError("item {}: num_frames {} outside [1, {}]", item.id,
                                  item.num_frames, kMaxSplitFrames);
    }
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
  return LoadJsonlSplit(dir, split, limit, ParseSynthvid2Item);
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
