// `framezip bench server` end to end on the shipped model with the server's code started in
// process: the JSON carries every level's figures, two rounds give a scaling whose median lies
// between its min and max, --protocol http runs the same load over the OpenAI API, and a bad
// --rounds is refused with a message that names it.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/testing/cli_run.h"
#include "tests/testing/temp_dir.h"

namespace framezip {
namespace {

std::string BenchOnShippedModel() {
  return "bench server --model " + (testing::SourceDir() / "models/framezip-tiny-video").string() +
         " --video " +
         (testing::SourceDir() / "tests/data/synthvid/demo-test-000011.mp4").string() +
         " --frames 8 --max-tokens 4";
}

TEST_CASE("bench server reports every level and the median scaling over rounds",
          "[integration][bench]") {
  const testing::CliRun run =
      testing::RunFramezipCli(BenchOnShippedModel() + " --concurrency 1,2 --rounds 2 --json");
  INFO(run.stderr_text << run.stdout_text);
  REQUIRE(run.exit_code == 0);
  const nlohmann::json report = nlohmann::json::parse(testing::LastLine(run.stdout_text));
  CHECK(report["suite"] == "server");
  std::map<std::string, double> value;
  for (const auto& r : report["results"]) value[r["name"].get<std::string>()] = r["value"];
  for (const std::string c : {"1", "2"}) {
    INFO("concurrency " << c);
    CHECK(value["ttft_p50_c" + c] > 0);
    CHECK(value["ttft_p99_c" + c] >= value["ttft_p50_c" + c]);
    CHECK(value["itl_p99_c" + c] >= value["itl_p50_c" + c]);
    CHECK(value["decode_tok_s_c" + c] > 0);
  }
  // Each round runs every level and says so as it finishes it.
  for (const std::string line : {"round 1/2, 1 sessions", "round 1/2, 2 sessions",
                                 "round 2/2, 1 sessions", "round 2/2, 2 sessions"}) {
    CHECK(run.stderr_text.find(line) != std::string::npos);
  }
  const double median = value["decode_scaling_c2_over_c1"];
  CHECK(median > 0);
  CHECK(value["decode_scaling_c2_over_c1_min"] <= median);
  CHECK(median <= value["decode_scaling_c2_over_c1_max"]);
  // Turn 2 reuses the session's KV of the video: its first token comes sooner than turn 1's.
  CHECK(value["turn1_over_turn2_ttft"] > 1);
}

TEST_CASE("bench server --protocol http runs the sessions over the OpenAI API",
          "[integration][bench]") {
  const testing::CliRun run =
      testing::RunFramezipCli(BenchOnShippedModel() + " --concurrency 1,2 --protocol http --json");
  INFO(run.stderr_text << run.stdout_text);
  REQUIRE(run.exit_code == 0);
  const nlohmann::json report = nlohmann::json::parse(testing::LastLine(run.stdout_text));
  CHECK(report["suite"] == "server_http");
  std::map<std::string, double> value;
  for (const auto& r : report["results"]) value[r["name"].get<std::string>()] = r["value"];
  for (const std::string c : {"1", "2"}) {
    INFO("concurrency " << c);
    CHECK(value["turn1_ttft_p50_c" + c] > 0);
    CHECK(value["turn2_ttft_p50_c" + c] > 0);
    CHECK(value["decode_tok_s_c" + c] > 0);
  }
  // Turn 2 resends the conversation and the video, yet the server reuses the conversation's KV
  // and the video's check: its first token comes sooner than turn 1's.
  CHECK(value["turn1_over_turn2_ttft"] > 1);
}

TEST_CASE("bench server refuses --rounds below 1, naming the flag", "[integration][bench]") {
  const testing::CliRun run = testing::RunFramezipCli(BenchOnShippedModel() + " --rounds 0");
  CHECK(run.exit_code == 2);
  CHECK(run.stderr_text.find("--rounds must be at least 1") != std::string::npos);
}

}  // namespace
}  // namespace framezip
