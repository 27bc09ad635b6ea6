// synthvid v2 on the C++ side: the describe scorer gives what synthvid2.py's score_describe gives
// (the expected triples below were printed by the Python function for these replies), and v2
// JSONL lines parse into turns and facts, malformed ones naming what is wrong.
#include <catch2/catch.hpp>

#include "tools/eval/describe_score.h"
#include "tools/eval/synthvid2_split.h"

namespace framezip::eval {
namespace {

const std::vector<DescribeFact> kFacts = {{1, "red", "circle", "left"},
                                          {2, "blue", "square", "still"},
                                          {3, "green", "cross", "up"}};

TEST_CASE("ScoreDescribe equals synthvid2.py's score_describe", "[unit][eval]") {
  struct Case {
    const char* reply;
    double precision, recall, f1;
  };
  const Case cases[] = {
      {"a red circle moves left. a blue square stays still. a green cross moves up.", 1, 1, 1},
      {"A Red circle moves left.  a blue square stays still.a green cross moves up", 1, 1, 1},
      {"a red circle moves left. a green cross moves up.", 1, 2.0 / 3, 0.8},
      {"a red circle moves left. a blue square stays still. a green cross moves up. a cyan "
       "triangle moves down.",
       0.75, 1, 0.8571428571428571},
      {"a blue square stays still. a red circle moves left. a green cross moves up.", 2.0 / 3,
       2.0 / 3, 2.0 / 3},
      {"a red circle moves right. a blue square is still. a green cross moves up.", 1.0 / 3,
       1.0 / 3, 1.0 / 3},
      {"", 0, 0, 0},
      {"red circle", 0, 0, 0},
      {"a red circle moves left. a red circle moves left.", 0.5, 1.0 / 3, 0.4},
  };
  for (const Case& c : cases) {
    CAPTURE(c.reply);
    const DescribeScore s = ScoreDescribe(c.reply, kFacts);
    CHECK(s.precision == Approx(c.precision).margin(1e-12));
    CHECK(s.recall == Approx(c.recall).margin(1e-12));
    CHECK(s.f1 == Approx(c.f1).margin(1e-12));
  }
  // Facts are matched in onset order whatever order the item lists them in.
  const std::vector<DescribeFact> shuffled = {kFacts[2], kFacts[0], kFacts[1]};
  CHECK(ScoreDescribe(cases[0].reply, shuffled).f1 == 1);
}

TEST_CASE("synthvid2 JSONL lines parse into turns and facts", "[unit][eval]") {
  auto multi = ParseSynthvid2Item(
      R"({"id": "v2-test-000004", "task": "multiturn", "video": "videos/v2-test-000004.mp4",
          "num_frames": 16, "length_bucket": 16,
          "turns": [{"question": "Which shape appears first?", "answer": "square",
                     "kind": "first_shape"},
                    {"question": "And what color was it?", "answer": "yellow", "kind": "color"}]})",
      "/data");
  REQUIRE(multi.ok());
  CHECK(multi->video == std::filesystem::path("/data/videos/v2-test-000004.mp4"));
  CHECK(multi->length_bucket == 16);
  REQUIRE(multi->turns.size() == 2);
  CHECK(multi->turns[1].answer == "yellow");
  CHECK(multi->turns[1].kind == "color");

  auto describe = ParseSynthvid2Item(
      R"({"id": "d", "task": "describe", "video": "v.mp4", "num_frames": 64,
          "turns": [{"question": "Describe the video.", "answer": "a red circle moves left."}],
          "facts": [{"order": 1, "color": "red", "shape": "circle", "motion": "left"}]})",
      "/data");
  REQUIRE(describe.ok());
  CHECK(describe->length_bucket == 64);  // defaults to the frame count
  REQUIRE(describe->facts.size() == 1);
  CHECK(describe->turns[0].kind == "describe");

  auto no_facts = ParseSynthvid2Item(
      R"({"id": "d", "task": "describe", "video": "v.mp4", "num_frames": 8,
          "turns": [{"question": "Describe the video.", "answer": "x"}]})",
      "/data");
  CHECK(!no_facts.ok());
  CHECK_THAT(MessageOf(no_facts.status()), Catch::Contains("without facts"));
  auto no_turns = ParseSynthvid2Item(
      R"({"id": "x", "task": "needle", "video": "v.mp4", "num_frames": 8, "turns": []})", "/d");
  CHECK(!no_turns.ok());
  CHECK(!ParseSynthvid2Item("{not json", "/d").ok());
}

TEST_CASE("Malformed synthvid2 lines are refused, naming the field, never crash",
          "[unit][eval]") {
  const std::string head = R"({"id": "x", "task": "needle", "video": "v.mp4", )";
  const std::string turns = R"("turns": [{"question": "q", "answer": "a"}])";
  struct Case {
    std::string line;
    const char* says;  // a piece of the message
  };
  const Case cases[] = {
      {head + R"("num_frames": -3, )" + turns + "}", "num_frames -3 outside"},
      {head + R"("num_frames": 0, )" + turns + "}", "num_frames 0 outside"},
      {head + R"("num_frames": 100000000, )" + turns + "}", "num_frames 100000000 outside"},
      {head + R"("num_frames": "many", )" + turns + "}", "not a synthvid v2 item"},
      {head + R"("num_frames": 8, "turns": "q?"})", "not a synthvid v2 item"},
      {head + R"("num_frames": 8, "turns": [{"question": 7, "answer": "a"}]})",
       "not a synthvid v2 item"},
      {head + R"("num_frames": 8, )" + turns + R"(, "facts": {"order": "x"}})",
       "not a synthvid v2 item"},
      {head + R"("num_frames": 8, )" + turns.substr(0, 20), "not a synthvid v2 item"},  // cut
      {"", "not a synthvid v2 item"},
      {"[]", "not a synthvid v2 item"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    auto item = ParseSynthvid2Item(c.line, "/d");
    REQUIRE(!item.ok());
    CHECK(item.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(item.status()), Catch::Contains(c.says));
  }
}

}  // namespace
}  // namespace framezip::eval
