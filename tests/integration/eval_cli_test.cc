// `framezip eval` end to end on the committed six-item synthvid sample (tests/data/synthvid) with
// the shipped model: the JSON structure, the accuracy arithmetic recomputed from the per-item
// rows and the truth in the JSONL, every frame of each file fed to the model, teacher-forced
// agreement of full attention with itself (exactly 1, KL 0: ScoreTurn reproduces greedy decoding),
// and the message when the split is missing and cannot be generated.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/compress/policy.h"
#include "tests/testing/cli_run.h"
#include "tests/testing/temp_dir.h"

namespace framezip {
namespace {

nlohmann::json LastLineJson(const testing::CliRun& run) {
  INFO(run.stderr_text << run.stdout_text);
  REQUIRE(run.exit_code == 0);
  return nlohmann::json::parse(testing::LastLine(run.stdout_text));
}

std::string EvalOn(const std::filesystem::path& data) {
  return "eval --threads 2 --model " +
         (testing::SourceDir() / "models/framezip-tiny-video").string() + " --data " +
         data.string();
}

std::string ModelAndData() { return EvalOn(testing::SourceDir() / "tests/data/synthvid"); }

struct Truth {
  std::string task, answer;
  int frames = 0;
  bool has_turn2 = false;
};

std::map<std::string, Truth> SampleTruth() {
  std::ifstream in(testing::SourceDir() / "tests/data/synthvid/test.jsonl");
  std::map<std::string, Truth> truth;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    bool turn2 = false;
    for (const auto& f : j["followups"]) turn2 = turn2 || f["question"] != j["question"];
    truth[j["id"]] = {j["task"], j["answer"], j["num_frames"], turn2};
  }
  return truth;
}

TEST_CASE("framezip eval scores the committed synthvid sample", "[integration][eval]") {
  const auto truth = SampleTruth();
  REQUIRE(truth.size() == 6);
  const nlohmann::json j =
      LastLineJson(testing::RunFramezipCli(ModelAndData() + " --json --items --agreement --turn2"));

  CHECK(j["suite"] == "synthvid");
  CHECK(j["split"] == "test");
  CHECK(j["policy"] == "none");
  REQUIRE(j["items"] == 6);
  REQUIRE(j["item_results"].size() == 6);

  // Recompute every figure from the per-item rows and the JSONL's truth.
  int correct = 0, turn2 = 0;
  int64_t generated = 0, visual = 0;
  for (const auto& row : j["item_results"]) {
    const std::string id = row["id"];
    CAPTURE(id);
    REQUIRE(truth.count(id) == 1);
    const Truth& t = truth.at(id);
    CHECK(row["task"] == t.task);
    CHECK(row["answer"] == t.answer);
    CHECK(row["num_frames"] == t.frames);
    const std::string pred = row["pred"];
    CHECK(row["ok"] == (pred == t.answer));
    CHECK(j["tasks"][t.task].get<double>() == (pred == t.answer ? 1.0 : 0.0));
    correct += pred == t.answer ? 1 : 0;
    CHECK(row["generated_tokens"].get<int>() >= 1);
    CHECK(row["generated_tokens"].get<int>() <= 6);  // evaluate.py's max_new_tokens
    generated += row["generated_tokens"].get<int64_t>();
    visual += 4 * t.frames + 1;  // 2x2 pooled tokens per frame + image_newline: all frames fed
    CHECK(row.contains("turn2_ok") == t.has_turn2);
    turn2 += t.has_turn2 ? 1 : 0;
    // Full attention against itself, teacher-forced on its own greedy reply.
    CHECK(row["agreement_positions"] == row["generated_tokens"]);
    CHECK(row["agreement_matches"] == row["generated_tokens"]);
  }
  CHECK(j["accuracy"].get<double>() == Approx(correct / 6.0));
  CHECK(j["tasks"].size() == 6);
  CHECK(j["tokens"]["generated"] == generated);
  CHECK(j["tokens"]["visual"] == visual);
  CHECK(j["tokens"]["prompt"].get<int64_t>() > visual);
  CHECK(j["per_num_frames"]["8"]["items"] == 2);
  CHECK(j["per_num_frames"]["32"]["items"] == 1);
  CHECK(j["turn2"]["items"] == turn2);
  CHECK(j["agreement"]["top1"].get<double>() == 1.0);
  CHECK(j["agreement"]["kl"].get<double>() < 1e-12);
  CHECK(j["agreement"]["positions"] == generated);
  CHECK(j["agreement"]["reference_accuracy"].get<double>() == Approx(correct / 6.0));
  CHECK(j["seconds"].get<double>() > 0);
  CHECK(j["time"]["prefill_ms"].get<double>() > 0);
}

TEST_CASE("framezip eval runs every compression policy with agreement", "[integration][eval]") {
  for (const std::string& policy : engine::compress::PolicyNames()) {
    if (policy == "none") continue;
    CAPTURE(policy);
    const nlohmann::json j = LastLineJson(testing::RunFramezipCli(
        ModelAndData() + " --limit 2 --json --agreement --policy " + policy));
    CHECK(j["policy"] == policy);
    CHECK(j["items"] == 2);
    const double top1 = j["agreement"]["top1"].get<double>();
    CHECK(top1 >= 0);
    CHECK(top1 <= 1);
    CHECK(j["agreement"]["kl"].get<double>() >= 0);
  }
}

TEST_CASE(
    "framezip-eval-frames scores a saved frame pack exactly as framezip eval scores the videos",
    "[integration][eval]") {
  testing::TempDir dir;
  const std::string pack = (dir / "sample.frames").string();
  const nlohmann::json videos = LastLineJson(
      testing::RunFramezipCli(ModelAndData() + " --json --items --save-frames " + pack));
  const std::string model = (testing::SourceDir() / "models/framezip-tiny-video").string();
  const std::string args = "--threads 2 --model " + model + " --pack " + pack;
  const testing::CliRun run = testing::RunBuiltProgram(
      "framezip-eval-frames",
      args + " --reference-device cpu --json --items --max-accuracy-gap 0 --min-top1 1");
  const nlohmann::json frames = LastLineJson(run);
  CHECK(run.stderr_text.find("top-1 agreement 1.0000 (bound >= 1.0000): PASS") !=
        std::string::npos);

  // The same items, replies and token counts: the engine got the same floats.
  REQUIRE(frames["items"] == videos["items"]);
  CHECK(frames["accuracy"] == videos["accuracy"]);
  CHECK(frames["tokens"] == videos["tokens"]);
  for (size_t i = 0; i < videos["item_results"].size(); ++i) {
    const auto& want = videos["item_results"][i];
    const auto& got = frames["item_results"][i];
    CAPTURE(want["id"]);
    CHECK(got["id"] == want["id"]);
    CHECK(got["pred"] == want["pred"]);
    CHECK(got["prompt_tokens"] == want["prompt_tokens"]);
    CHECK(got["num_frames"] == want["num_frames"]);
  }
  // The CPU against itself: every position agrees, no divergence, the same accuracy.
  CHECK(frames["agreement"]["reference"] == "cpu");
  CHECK(frames["agreement"]["top1"].get<double>() == 1.0);
  CHECK(frames["agreement"]["kl"].get<double>() < 1e-12);
  CHECK(frames["agreement"]["reference_accuracy"] == videos["accuracy"]);

  // A bound that is missed makes the exit status 1, naming it.
  const testing::CliRun strict = testing::RunBuiltProgram(
      "framezip-eval-frames", args + " --limit 1 --reference-device cpu --min-top1 1.5");
  CHECK(strict.exit_code == 1);
  CHECK(strict.stderr_text.find("FAIL") != std::string::npos);
  // A file that is not a pack is refused by name.
  const testing::CliRun bad = testing::RunBuiltProgram(
      "framezip-eval-frames", "--model " + model + " --pack " + model + "/config.json");
  CHECK(bad.exit_code == 1);
  CHECK(bad.stderr_text.find("config.json") != std::string::npos);
}

TEST_CASE("framezip eval says how to generate a split it cannot find or make",
          "[integration][eval]") {
  testing::TempDir empty;
  const testing::CliRun run = testing::RunFramezipCli(EvalOn(empty.path()) + " --split val",
                                                      "FRAMEZIP_PYTHON=/nonexistent/python");
  CHECK(run.exit_code == 1);
  CHECK(run.stderr_text.find("synthvid.py --split val") != std::string::npos);
  CHECK(run.stderr_text.find("FRAMEZIP_PYTHON") != std::string::npos);
  CHECK(testing::RunFramezipCli(ModelAndData() + " --suite nope").exit_code == 2);
}

TEST_CASE("framezip eval generates and scores a synthvid2 split: sessions per turn, descriptions",
          "[integration][eval]") {
  if (std::system("/usr/bin/python3 -c 'import numpy, av, PIL' > /dev/null 2>&1") != 0) {
    std::cout << "SKIPPED: Debian's python3 lacks python3-numpy/av/pil (scripts/install-deps.sh "
                 "installs them), so the synthvid2 split cannot be generated"
              << std::endl;
    return;
  }
  testing::TempDir data;
  // 30 items: five of every task, each task through its length buckets 16..512 frames;
  // generated by synthvid2.py into --data because it is absent there.
  const nlohmann::json j = LastLineJson(
      testing::RunFramezipCli(EvalOn(data.path()) + " --suite synthvid2 --limit 30 --json --items",
                              "FRAMEZIP_PYTHON=/usr/bin/python3"));
  CHECK(j["suite"] == "synthvid2");
  CHECK(std::filesystem::exists(data.path() / "test.manifest.json"));
  CHECK(j["data_manifest"]["generator"] == "synthvid2");
  CHECK(j["data_manifest"]["generator_version"] == 2);
  CHECK(j["data_manifest"]["jsonl_sha256"].get<std::string>().size() == 64);

  std::map<std::string, std::vector<nlohmann::json>> by_task;
  for (const auto& row : j["item_results"]) by_task[row["task"]].push_back(row);
  for (const char* task : {"needle", "after", "order_far", "count_long", "describe", "multiturn_t1",
                           "multiturn_t2+"}) {
    CAPTURE(task);
    CHECK(!by_task[task].empty());
    CHECK(j["tasks"].contains(task));
  }
  // Every multiturn item has 2-4 turns: one t1 row and 1-3 later ones, ids "<item>#<turn>".
  CHECK(by_task["multiturn_t1"].size() == 5);
  CHECK(by_task["multiturn_t2+"].size() >= 5);
  CHECK(by_task["multiturn_t2+"].size() <= 15);
  for (const auto& row : by_task["multiturn_t2+"]) {
    CHECK(row["id"].get<std::string>().find('#') != std::string::npos);
  }
  // Describe replies carry their per-fact score; the mean is reported.
  REQUIRE(j.contains("describe"));
  CHECK(j["describe"]["items"] == 5);
  for (const auto& row : by_task["describe"]) {
    const double f1 = row["describe_f1"].get<double>();
    CHECK(f1 >= 0);
    CHECK(f1 <= 1);
    CHECK(row["ok"] == (f1 == 1.0));
  }
  // Rows are turns: the overall accuracy is their mean.
  int correct = 0;
  for (const auto& row : j["item_results"]) correct += row["ok"].get<bool>() ? 1 : 0;
  CHECK(j["items"] == j["item_results"].size());
  CHECK(j["accuracy"].get<double>() ==
        Approx(static_cast<double>(correct) / j["items"].get<double>()));
  // Every length bucket, up to 512 frames (2049 visual tokens of this model), is reported.
  for (const char* frames : {"16", "64", "128", "256", "512"}) {
    CAPTURE(frames);
    CHECK(j["per_num_frames"].contains(frames));
  }
  CHECK(j["scoring"] == "free_running");
  // Length buckets and turns carry prefill time, visual tokens and KV bytes by format.
  // (a mean over the bucket's rows: later turns of a session add no visual tokens)
  CHECK(j["per_num_frames"]["512"]["visual_tokens"].get<double>() > 1000);
  CHECK(j["per_num_frames"]["512"]["prefill_ms"].get<double>() > 0);
  CHECK(j["per_num_frames"]["512"]["kv_bytes_by_format"]["f16"].get<double>() > 0);
  CHECK(j["per_turn"]["1"]["items"].get<int>() == 30);
  CHECK(j["per_turn"].contains("2"));

  // Teacher-forced on the same split: a short answer is right exactly when greedy decoding would
  // say it and stop, so every first turn (same history either way) scores as free-running did,
  // and a right row's prediction is the answer itself.
  const nlohmann::json tf = LastLineJson(testing::RunFramezipCli(
      EvalOn(data.path()) + " --suite synthvid2 --limit 30 --json --items --teacher-forced",
      "FRAMEZIP_PYTHON=/usr/bin/python3"));
  CHECK(tf["scoring"] == "teacher_forced");
  REQUIRE(tf["item_results"].size() == j["item_results"].size());
  for (size_t i = 0; i < j["item_results"].size(); ++i) {
    const auto& free_row = j["item_results"][i];
    const auto& forced_row = tf["item_results"][i];
    CAPTURE(free_row["id"], free_row["pred"], forced_row["pred"], free_row["answer"]);
    REQUIRE(forced_row["id"] == free_row["id"]);
    if (free_row["task"] == "multiturn_t2+") continue;  // histories differ from turn 2 on
    CHECK(forced_row["ok"] == free_row["ok"]);
    if (free_row["task"] != "describe" && forced_row["ok"].get<bool>()) {
      CHECK(forced_row["pred"] == forced_row["answer"]);
    }
  }
  // Later turns reuse the session's KV: they start with the whole earlier conversation cached.
  CHECK(tf["per_turn"]["1"]["cached_tokens"].get<double>() == 0);
  CHECK(tf["per_turn"]["2"]["cached_tokens"].get<double>() > 2 * 16);

  // --sessions: each turn committed as a KV segment and the next run on the conversation
  // restored from the segments (the server's path after eviction) scores row for row alike.
  const nlohmann::json sessions = LastLineJson(testing::RunFramezipCli(
      EvalOn(data.path()) +
          " --suite synthvid2 --limit 30 --json --items --teacher-forced --sessions",
      "FRAMEZIP_PYTHON=/usr/bin/python3"));
  CHECK(sessions["sessions"] == true);
  REQUIRE(sessions["item_results"].size() == tf["item_results"].size());
  for (size_t i = 0; i < tf["item_results"].size(); ++i) {
    CAPTURE(tf["item_results"][i]["id"]);
    CHECK(sessions["item_results"][i]["pred"] == tf["item_results"][i]["pred"]);
    CHECK(sessions["item_results"][i]["ok"] == tf["item_results"][i]["ok"]);
  }
  CHECK(sessions["per_turn"]["2"]["cached_tokens"] == tf["per_turn"]["2"]["cached_tokens"]);
}

}  // namespace
}  // namespace framezip
