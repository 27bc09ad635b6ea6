// `framezip chat` against the real framezip-server on the shipped model, as `make demo` runs it:
// --frames asks the upload for that many uniform frames, later questions reuse the session's KV,
// a --frames past the server's --max-frames is refused with the field named, and --policy takes
// the options by their one name (attentionpack:factors=int4); --raw-size uploads a file of RGB24
// frames.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/testing/child_process.h"
#include "tests/testing/cli_run.h"
#include "tests/testing/temp_dir.h"

namespace framezip {
namespace {

using namespace std::chrono_literals;

const std::string kClip =
    (testing::SourceDir() / "tests/data/synthvid/demo-v2-test-000022.mp4").string();

TEST_CASE("framezip chat samples --frames from the upload and reuses the KV in later turns",
          "[integration][cli]") {
  testing::TempDir dir;
  const auto port_file = dir / "port";
  auto server = testing::ChildProcess::Start(
      {(testing::BinaryDir() / "bin" / "framezip-server").string(), "--model",
       (testing::SourceDir() / "models/framezip-tiny-video").string(), "--listen", "127.0.0.1:0",
       "--port-file", port_file.string(), "--metrics-listen", "", "--max-frames", "64"},
      dir / "server.log");
  REQUIRE(server);
  const auto port = testing::WaitForFile(port_file, 60s);
  REQUIRE(port);
  const std::string address = "127.0.0.1:" + port->substr(0, port->size() - 1);
  const auto questions = dir / "questions.txt";
  std::ofstream(questions) << "What color is the first object to appear?\n"
                              "Which way does it move?\n";

  const testing::CliRun run =
      testing::RunFramezipCli("chat --server " + address + " --video " + kClip +
                              " --frames 48 --max-tokens 4 --json < " + questions.string());
  INFO(run.stderr_text << run.stdout_text);
  REQUIRE(run.exit_code == 0);
  // 48 frames of the 256: 4 tokens each after the 2×2 pooling, plus the video's newline.
  CHECK(run.stderr_text.find("48 frames -> 193 visual tokens") != std::string::npos);
  const nlohmann::json report = nlohmann::json::parse(testing::LastLine(run.stdout_text));
  const auto& turns = report["turns"];
  REQUIRE(turns.size() == 2);
  CHECK(turns[0]["cached_tokens"] == 0);
  CHECK(turns[1]["cached_tokens"].get<int>() > 193);  // the video's KV, computed once

  // The engine's own ratio: AttentionPack's factors and the rows Dynamic-LLaVA removed count
  // (the store's tiers alone would call both uncompressed).
  // Options by their one name, the API's field and the engine's option: factors=int4.
  std::map<std::string, double> ratio;
  for (const std::string policy :
       {"attentionpack", "attentionpack:factors=int4", "dynamic_llava"}) {
    const testing::CliRun compressed = testing::RunFramezipCli(
        "chat --server " + address + " --video " + kClip + " --frames 48 --policy " + policy +
        " --max-tokens 4 --json < " + questions.string());
    INFO(policy << ": " << compressed.stderr_text);
    REQUIRE(compressed.exit_code == 0);
    const nlohmann::json r = nlohmann::json::parse(testing::LastLine(compressed.stdout_text));
    ratio[policy] = r["turns"][0]["compression_ratio"].get<double>();
    CHECK(ratio[policy] > 1.2);
  }
  CHECK(ratio["attentionpack:factors=int4"] > ratio["attentionpack"]);  // 4-bit factors
  const testing::CliRun unknown_option = testing::RunFramezipCli(
      "chat --server " + address + " --policy attentionpack:rank=4 < /dev/null");
  CHECK(unknown_option.exit_code != 0);
  CHECK(unknown_option.stderr_text.find("policy 'attentionpack' has no option 'rank' (it has: "
                                        "rank_k, rank_v") != std::string::npos);

  // --raw-size: a file of RGB24 frames (as ffmpeg -f rawvideo writes them), uploaded as raw
  // frames that no codec decodes; a size that is not whole frames is refused naming the flag.
  const auto raw = dir / "frames.rgb24";
  {
    std::string pixels(6 * 32 * 32 * 3, '\0');
    for (size_t i = 0; i < pixels.size(); ++i)
      pixels[i] = static_cast<char>((i * 7 + i / 97) % 251);
    std::ofstream(raw, std::ios::binary) << pixels;
  }
  const testing::CliRun raw_run = testing::RunFramezipCli(
      "chat --server " + address + " --video " + raw.string() +
      " --raw-size 32x32 --raw-fps 5 --max-tokens 2 --json < " + questions.string());
  INFO(raw_run.stderr_text);
  CHECK(raw_run.exit_code == 0);
  CHECK(raw_run.stderr_text.find("rawvideo 32x32, 1.2 s, 6 frames") != std::string::npos);
  const testing::CliRun torn = testing::RunFramezipCli(
      "chat --server " + address + " --video " + raw.string() + " --raw-size 32x31 < /dev/null");
  CHECK(torn.exit_code != 0);
  CHECK(torn.stderr_text.find("is not a whole number of 32x31 RGB24 frames") != std::string::npos);

  const testing::CliRun refused = testing::RunFramezipCli("chat --server " + address + " --video " +
                                                          kClip + " --frames 65 < /dev/null");
  CHECK(refused.exit_code != 0);
  CHECK(refused.stderr_text.find("num_frames: 65 is not in [1, 64]") != std::string::npos);

  const testing::CliRun negative = testing::RunFramezipCli("chat --frames -1 < /dev/null");
  CHECK(negative.exit_code == 2);
  CHECK(negative.stderr_text.find("--frames must be 0 or more") != std::string::npos);
}

}  // namespace
}  // namespace framezip
