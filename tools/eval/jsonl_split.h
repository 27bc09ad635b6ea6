// Reading a split's JSONL (<dir>/<split>.jsonl), one item per non-empty line, for the synthvid
// suites: the file handling and the error context live here, the item parsing with each suite.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace framezip::eval {

// Videos longer than this are refused when a split is read: a frame count is an allocation of
// frames × 3 × S × S floats, and no synthvid item comes near it (v2's longest is 512).
inline constexpr int kMaxSplitFrames = 4096;

// The items parse(line, dir) makes of the file's lines, in order, at most `limit` (0 = all).
// NOT_FOUND when the file is missing; a parse error comes back annotated with file:line;
// INVALID_ARGUMENT for a file without items.
template <class Parse>
auto LoadJsonlSplit(const std::filesystem::path& dir, std::string_view split, int limit,
                    Parse parse)
    -> StatusOr<std::vector<typename decltype(parse(std::string_view(), dir))::value_type>> {
  using Item = typename decltype(parse(std::string_view(), dir))::value_type;
  const std::filesystem::path file = dir / (std::string(split) + ".jsonl");
  std::ifstream in(file);
  if (!in) return NotFoundError("{} does not exist or cannot be read", file.string());
  std::vector<Item> items;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    if (limit > 0 && static_cast<int>(items.size()) >= limit) break;
    StatusOr<Item> item = parse(line, dir);
    if (!item.ok()) return Annotate(item.status(), fmt::format("{}:{}", file.string(), line_no));
    items.push_back(std::move(*item));
  }
  if (items.empty()) return InvalidArgumentError("{} holds no items", file.string());
  return items;
}

}  // namespace framezip::eval
