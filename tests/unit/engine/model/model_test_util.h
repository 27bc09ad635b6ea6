// Shared helpers of the engine/model tests: paths of the checked-in tiny models and goldens,
// file writing, and JSON loading.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/model/config.h"
#include "engine/model/json_util.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine::model::test {

inline std::filesystem::path ModelDir(const std::string& name) {
  return testing::SourceDir() / "tests/data/models" / name;
}
inline std::filesystem::path GoldenDir(const std::string& name) {
  return testing::SourceDir() / "tests/data/golden" / name;
}

inline void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline Json LoadJson(const std::filesystem::path& path) {
  auto text = ReadFileToString(path);
  REQUIRE(text.ok());
  auto j = ParseJson(*text, path.string());
  REQUIRE(j.ok());
  return *j;
}

}  // namespace framezip::engine::model::test
