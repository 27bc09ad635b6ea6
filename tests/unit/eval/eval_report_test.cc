// The report's arithmetic on a known answer set: accuracy per task, per frame count and overall,
// token and kept-ratio means, agreement totals, and the JSON keys docs/architecture.md §6 names.
#include "tools/eval/eval_report.h"

#include <catch2/catch.hpp>

#include "tools/eval/answer_match.h"

namespace framezip::eval {
namespace {

ItemResult Item(std::string task, int frames, std::string answer, std::string reply) {
  ItemResult r;
  r.id = task + std::to_string(frames);
  r.task = std::move(task);
  r.num_frames = frames;
  r.answer = std::move(answer);
  r.pred = StripLikePython(reply);
  r.correct = AnswerMatches(reply, r.answer);
  r.prompt_tokens = 10 + frames;
  r.generated_tokens = 2;
  r.item_ms = 4;
  return r;
}

EvalRunInfo ZipvlRun() { return EvalRunInfo{"synthvid", "test", "m", "zipvl", "data", 2}; }

TEST_CASE("EvalReport aggregates a known answer set", "[unit][eval]") {
  EvalReport report(ZipvlRun());
  // color 2/3, count 1/2, needle 0/1 -> 3/6 overall; 8 frames 2/3, 16 frames 1/3.
  report.Add(Item("color", 8, "blue", " blue"));
  report.Add(Item("color", 8, "red", "red\n"));
  report.Add(Item("color", 16, "green", "Green"));
  report.Add(Item("count", 8, "3", "2"));
  report.Add(Item("count", 16, "4", "4"));
  ItemResult gated = Item("needle", 16, "cyan", "cyan.");
  gated.text_tokens_gated = 1;  // one of its two generated tokens was not stored in later layers
  report.Add(gated);
  report.SetSeconds(1.5);

  CHECK(report.items() == 6);
  CHECK(report.Accuracy() == Approx(0.5));
  CHECK(report.TaskAccuracy("color") == Approx(2.0 / 3));
  CHECK(report.TaskAccuracy("needle") == 0);
  CHECK(report.TaskAccuracy("no-such-task") == 0);

  const nlohmann::json j = report.Json(/*with_items=*/true);
  for (const char* key : {"suite", "split", "model", "policy", "items", "accuracy", "tasks",
                          "per_task", "per_num_frames", "tokens", "time", "seconds"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  CHECK(j["suite"] == "synthvid");
  CHECK(j["policy"] == "zipvl");
  CHECK(j["weight_format"] == "bf16");  // the default: the checkpoint's weights as stored
  CHECK(j["vision_weight_format"] == "bf16");
  CHECK(j["items"] == 6);
  CHECK(j["accuracy"].get<double>() == Approx(0.5));
  CHECK(j["tasks"]["color"].get<double>() == Approx(2.0 / 3));
  CHECK(j["tasks"]["count"].get<double>() == Approx(0.5));
  CHECK(j["tasks"]["needle"].get<double>() == 0);
  CHECK(j["per_task"]["count"]["correct"] == 1);
  CHECK(j["per_task"]["count"]["items"] == 2);
  CHECK(j["per_num_frames"]["8"]["accuracy"].get<double>() == Approx(2.0 / 3));
  CHECK(j["per_num_frames"]["16"]["accuracy"].get<double>() == Approx(1.0 / 3));
  CHECK(j["tokens"]["prompt"] == 3 * 18 + 3 * 26);
  CHECK(j["tokens"]["generated"] == 12);
  CHECK(j["tokens"]["generated_per_item"].get<double>() == Approx(2));
  CHECK(j["tokens"]["text_gated"] == 1);
  CHECK(j["per_task"]["needle"]["text_tokens_gated"] == 1);
  CHECK(j["per_task"]["color"]["text_tokens_gated"] == 0);
  CHECK(j["seconds"].get<double>() == Approx(1.5));
  CHECK(j["time"]["per_item_ms"].get<double>() == Approx(4));
  // Nothing reported what only policies, --turn2 or --agreement produce.
  CHECK_FALSE(j.contains("kept_ratio_per_layer"));
  CHECK_FALSE(j.contains("agreement"));
  CHECK_FALSE(j.contains("turn2"));
  REQUIRE(j["item_results"].size() == 6);
  CHECK(j["item_results"][2]["pred"] == "Green");
  CHECK(j["item_results"][2]["ok"] == false);
  CHECK_FALSE(report.Json(false).contains("item_results"));

  const std::string table = report.Table();
  CHECK(table.find("overall") != std::string::npos);
  CHECK(table.find("50.0%") != std::string::npos);
  CHECK(table.find("66.7%") != std::string::npos);
}

TEST_CASE("EvalReport averages kept ratios per task and layer, and sums agreement",
          "[unit][eval]") {
  EvalReport report(ZipvlRun());
  ItemResult a = Item("color", 8, "blue", "blue");
  a.kept_ratio = {1.0, 0.5, 0.25};
  a.agreement = AgreementCounts{.positions = 2, .matches = 2, .kl_sum = 0.02};
  a.reference_correct = true;
  a.turn2_correct = true;
  ItemResult b = Item("color", 8, "red", "blue");
  b.kept_ratio = {1.0, 0.3, 0.15};
  b.agreement = AgreementCounts{.positions = 2, .matches = 1, .kl_sum = 0.5};
  b.reference_correct = true;
  b.turn2_correct = false;
  ItemResult c = Item("needle", 32, "cyan", "cyan");
  c.kept_ratio = {0.9, 0.2, 0.1};
  c.agreement = AgreementCounts{.positions = 1, .matches = 1, .kl_sum = 0};
  c.reference_correct = false;
  a.compression_ratio = 4;
  b.compression_ratio = 2;
  c.compression_ratio = 6;
  c.kv_bytes = 300;
  report.Add(a);
  report.Add(b);
  report.Add(c);
  const nlohmann::json j = report.Json(false);
  const auto color = j["per_task"]["color"]["kept_ratio_per_layer"].get<std::vector<double>>();
  REQUIRE(color.size() == 3);
  CHECK(color[0] == Approx(1.0));
  CHECK(color[1] == Approx(0.4));
  CHECK(color[2] == Approx(0.2));
  const auto all = j["kept_ratio_per_layer"].get<std::vector<double>>();
  REQUIRE(all.size() == 3);
  CHECK(all[1] == Approx((0.5 + 0.3 + 0.2) / 3));
  CHECK(j["agreement"]["positions"] == 5);
  CHECK(j["agreement"]["top1"].get<double>() == Approx(0.8));
  CHECK(j["agreement"]["kl"].get<double>() == Approx(0.52 / 5));
  CHECK(j["agreement"]["reference_accuracy"].get<double>() == Approx(2.0 / 3));
  CHECK(j["per_task"]["color"]["top1_agreement"].get<double>() == Approx(0.75));
  CHECK(j["per_task"]["color"]["compression_ratio"].get<double>() == Approx(3));
  CHECK(j["kv"]["compression_ratio"].get<double>() == Approx(4));
  CHECK(j["kv"]["bytes_per_item"].get<double>() == Approx(100));
  CHECK(j["turn2"]["items"] == 2);
  CHECK(j["turn2"]["accuracy"].get<double>() == Approx(0.5));
  CHECK(report.Table().find("kept ratio per layer") != std::string::npos);
}

TEST_CASE("EvalReport gives prefill time, visual tokens and KV bytes per length bucket and turn",
          "[unit][eval]") {
  EvalReport report(ZipvlRun());
  auto row = [](int frames, int turn, bool ok, double prefill, int64_t visual, int64_t f16,
                int64_t low_rank) {
    ItemResult r;
    r.task = turn == 1 ? "multiturn_t1" : "multiturn_t2+";
    r.num_frames = frames;
    r.turn = turn;
    r.correct = ok;
    r.prefill_ms = prefill;
    r.visual_tokens = visual;
    r.kv_bytes = f16 + low_rank;
    r.kv_bytes_by_format["f16"] = f16;
    if (low_rank > 0) r.kv_bytes_by_format["low_rank"] = low_rank;
    return r;
  };
  report.Add(row(64, 1, true, 10, 257, 1000, 300));
  report.Add(row(64, 2, false, 2, 0, 1100, 300));
  report.Add(row(512, 1, true, 90, 2049, 5000, 0));
  const nlohmann::json j = report.Json(false);
  const nlohmann::json& b64 = j["per_num_frames"]["64"];
  CHECK(b64["items"] == 2);
  CHECK(b64["accuracy"].get<double>() == Approx(0.5));
  CHECK(b64["prefill_ms"].get<double>() == Approx(6));
  CHECK(b64["visual_tokens"].get<double>() == Approx(128.5));
  CHECK(b64["kv_bytes_per_item"].get<double>() == Approx(1350));
  CHECK(b64["kv_bytes_by_format"]["f16"].get<double>() == Approx(1050));
  CHECK(b64["kv_bytes_by_format"]["low_rank"].get<double>() == Approx(300));
  CHECK_FALSE(j["per_num_frames"]["512"]["kv_bytes_by_format"].contains("low_rank"));
  REQUIRE(j.contains("per_turn"));
  CHECK(j["per_turn"]["1"]["items"] == 2);
  CHECK(j["per_turn"]["1"]["prefill_ms"].get<double>() == Approx(50));
  CHECK(j["per_turn"]["2"]["accuracy"].get<double>() == 0);
  // Single-turn reports have no per-turn block.
  EvalReport single(ZipvlRun());
  single.Add(row(64, 1, true, 10, 257, 1000, 0));
  CHECK_FALSE(single.Json(false).contains("per_turn"));
}

}  // namespace
}  // namespace framezip::eval
