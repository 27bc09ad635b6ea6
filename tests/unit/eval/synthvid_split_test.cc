// Reading a synthvid split (the JSONL synthvid.py writes) and picking the turn-2 question.
#include "tools/eval/synthvid_split.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "tests/testing/temp_dir.h"
#include "tools/eval/synthvid_generate.h"

namespace framezip::eval {
namespace {

constexpr char kLine[] =
    R"({"id": "test-000003", "video": "videos/test-000003.mp4", "num_frames": 8, "fps": 8, )"
    R"("task": "count", "question": "How many times does the blue circle appear?", "answer": "2", )"
    R"("followups": [{"task": "color", "question": "What color is the circle?", "answer": "blue"}], )"
    R"("objects": [], "meta": {}})";

TEST_CASE("ParseSynthvidItem reads synthvid.py's JSONL fields", "[unit][eval]") {
  auto item = ParseSynthvidItem(kLine, "/data");
  REQUIRE(item.ok());
  CHECK(item->id == "test-000003");
  CHECK(item->video == std::filesystem::path("/data/videos/test-000003.mp4"));
  CHECK(item->num_frames == 8);
  CHECK(item->main.task == "count");
  CHECK(item->main.answer == "2");
  REQUIRE(item->followups.size() == 1);
  CHECK(item->followups[0].answer == "blue");
  REQUIRE(SecondTurnQuestion(*item) != nullptr);
  CHECK(SecondTurnQuestion(*item)->question == "What color is the circle?");

  CHECK(ParseSynthvidItem("{\"id\": \"x\"}", "/").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ParseSynthvidItem("not json", "/").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("SecondTurnQuestion skips a follow-up equal to the item's question", "[unit][eval]") {
  SynthvidItem item;
  item.main = {"color", "What color is the cross?", "green"};
  item.followups = {{"color", "What color is the cross?", "green"},
                    {"shape", "What shape is the green object?", "cross"}};
  REQUIRE(SecondTurnQuestion(item) != nullptr);
  CHECK(SecondTurnQuestion(item)->answer == "cross");
  item.followups.pop_back();
  CHECK(SecondTurnQuestion(item) == nullptr);
}

TEST_CASE("LoadSynthvidSplit reads a split directory with a limit", "[unit][eval]") {
  testing::TempDir dir;
  {
    std::ofstream out(dir / "test.jsonl");
    out << kLine << "\n" << kLine << "\n\n" << kLine << "\n";
  }
  auto all = LoadSynthvidSplit(dir.path(), "test");
  REQUIRE(all.ok());
  CHECK(all->size() == 3);
  CHECK(all->front().video == dir.path() / "videos/test-000003.mp4");
  auto two = LoadSynthvidSplit(dir.path(), "test", 2);
  REQUIRE(two.ok());
  CHECK(two->size() == 2);
  CHECK(LoadSynthvidSplit(dir.path(), "val").status().code() == absl::StatusCode::kNotFound);
  {
    std::ofstream out(dir / "val.jsonl");
    out << kLine << "\n{broken\n";
  }
  auto bad = LoadSynthvidSplit(dir.path(), "val");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("val.jsonl:2") != std::string::npos);
}

TEST_CASE("FindOrGenerateSynthvidSplit prefers an existing split and explains a missing one",
          "[unit][eval]") {
  testing::TempDir dir;
  {
    std::ofstream out(dir / "test.jsonl");
    out << kLine << "\n";
  }
  // Present: used as it is, whatever its length.
  auto found = FindOrGenerateSynthvidSplit(dir.path(), "test", 600, dir / "unused");
  REQUIRE(found.ok());
  CHECK(*found == dir.path());
  // A cache that already holds enough items is used without generating.
  auto cached = FindOrGenerateSynthvidSplit(dir / "absent", "test", 1, dir.path());
  REQUIRE(cached.ok());
  CHECK(*cached == dir.path());
  // Absent with no way to generate (FRAMEZIP_PYTHON, when set, is the only Python tried):
  // FAILED_PRECONDITION saying how to make the data.
  const char* old_python = std::getenv("FRAMEZIP_PYTHON");
  const std::string saved = old_python != nullptr ? old_python : "";
  setenv("FRAMEZIP_PYTHON", "/nonexistent/python", 1);
  auto missing = FindOrGenerateSynthvidSplit(dir / "absent", "val", 5, dir / "gen");
  if (old_python != nullptr) {
    setenv("FRAMEZIP_PYTHON", saved.c_str(), 1);
  } else {
    unsetenv("FRAMEZIP_PYTHON");
  }
  CHECK(missing.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(missing.status().message()).find("synthvid.py --split val --count 5") !=
        std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "gen" / "val.jsonl"));
}

}  // namespace
}  // namespace framezip::eval
