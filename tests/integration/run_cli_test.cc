// `framezip run --image` end to end with the shipped model: the image goes through the media
// stage's anyres tiles and the engine's tile reassembly, and the prompt and the greedy answer are
// transformers' (tests/data/golden/framezip-tiny-video-image,
// tools/golden/gen_image_turn_golden.py).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/testing/cli_run.h"
#include "tests/testing/temp_dir.h"

namespace framezip {
namespace {

TEST_CASE("framezip run --image answers a single image as transformers does",
          "[integration][cli][golden]") {
  const auto dir = testing::SourceDir() / "tests/data/golden/framezip-tiny-video-image";
  std::ifstream in(dir / "turn.json");
  REQUIRE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  const testing::CliRun run = testing::RunFramezipCli(
      "run --threads 2 --max-tokens 8 --model " +
      (testing::SourceDir() / "models/framezip-tiny-video").string() + " --image " +
      (dir / "input.png").string() + " --prompt '" + golden["question"].get<std::string>() + "'");
  INFO(run.stderr_text << run.stdout_text);
  REQUIRE(run.exit_code == 0);
  // The stats line: the whole prompt (text, the tiles' placeholders) and the visual part of it.
  std::ostringstream stats;
  stats << "[" << golden["input_ids"].size() << " prompt tokens ("
        << golden["image_tokens"].get<int>() << " visual)";
  CHECK_THAT(run.stderr_text, Catch::Contains(stats.str()));
  // The answer is the last line of stdout (the engine logs its loading before it).
  CHECK(testing::LastLine(run.stdout_text) == golden["reply_text"].get<std::string>());
}

}  // namespace
}  // namespace framezip
