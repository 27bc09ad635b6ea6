#include "tools/eval/eval_report.h"

#include <algorithm>

#include "fmt/format.h"

namespace framezip::eval {
namespace {

// synthvid's task order (TASKS in synthvid.py); tasks it does not know follow alphabetically.
const std::vector<std::string>& KnownTaskOrder() {
  static const std::vector<std::string> order = {"color", "shape", "direction",
                                                 "count", "order", "needle"};
  return order;
}

template <typename Map>
std::vector<std::string> TasksInOrder(const Map& by_task) {
  std::vector<std::string> out;
  for (const std::string& t : KnownTaskOrder()) {
    if (by_task.count(t) != 0) out.push_back(t);
  }
  for (const auto& [t, g] : by_task) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

// Accuracy, prefill time, visual tokens and KV bytes (in total and per format) of some rows,
// means over them.
nlohmann::json BucketJson(const std::vector<const ItemResult*>& rows) {
  int64_t correct = 0;
  double prefill = 0, visual = 0, kv = 0, cached = 0;
  std::map<std::string, double> by_format;
  for (const ItemResult* r : rows) {
    correct += r->correct ? 1 : 0;
    prefill += r->prefill_ms;
    visual += static_cast<double>(r->visual_tokens);
    cached += static_cast<double>(r->cached_tokens);
    kv += static_cast<double>(r->kv_bytes);
    for (const auto& [format, bytes] : r->kv_bytes_by_format) {
      by_format[format] += static_cast<double>(bytes);
    }
  }
  const double n = static_cast<double>(std::max<size_t>(1, rows.size()));
  nlohmann::json formats = nlohmann::json::object();
  for (const auto& [format, bytes] : by_format) formats[format] = bytes / n;
  return {{"items", rows.size()},
          {"correct", correct},
          {"accuracy", static_cast<double>(correct) / n},
          {"prefill_ms", prefill / n},
          {"visual_tokens", visual / n},
          {"cached_tokens", cached / n},
          {"kv_bytes_per_item", kv / n},
          {"kv_bytes_by_format", formats}};
}

std::string Ratios(const std::vector<double>& r) {
  std::string s;
  for (double x : r) s += fmt::format("{}{:.3f}", s.empty() ? "" : " ", x);
  return s;
}

}  // namespace

void EvalReport::Group::Add(const ItemResult& r) {
  ++items;
  correct += r.correct ? 1 : 0;
  prompt_tokens += r.prompt_tokens;
  generated_tokens += r.generated_tokens;
  text_tokens_gated += r.text_tokens_gated;
  compression_ratio_sum += r.compression_ratio;
  if (!r.kept_ratio.empty()) {
    if (kept_ratio_sum.size() < r.kept_ratio.size()) kept_ratio_sum.resize(r.kept_ratio.size());
    for (size_t l = 0; l < r.kept_ratio.size(); ++l) kept_ratio_sum[l] += r.kept_ratio[l];
    ++kept_ratio_items;
  }
  if (r.agreement) {
    agreement.Add(*r.agreement);
    ++agreement_items;
  }
}

std::vector<double> EvalReport::Group::MeanKeptRatio() const {
  std::vector<double> mean = kept_ratio_sum;
  for (double& x : mean) x /= static_cast<double>(std::max<int64_t>(1, kept_ratio_items));
  return mean;
}

std::map<std::string, EvalReport::Group> EvalReport::ByTask() const {
  std::map<std::string, Group> groups;
  for (const ItemResult& r : items_) groups[r.task].Add(r);
  return groups;
}

EvalReport::Group EvalReport::Overall() const {
  Group g;
  for (const ItemResult& r : items_) g.Add(r);
  return g;
}

double EvalReport::Accuracy() const { return Overall().accuracy(); }

double EvalReport::TaskAccuracy(const std::string& task) const {
  const auto groups = ByTask();
  const auto it = groups.find(task);
  return it == groups.end() ? 0 : it->second.accuracy();
}

nlohmann::json EvalReport::Json(bool with_items) const {
  const Group all = Overall();
  const auto by_task = ByTask();
  nlohmann::json j = {{"suite", info_.suite},   {"split", info_.split},
                      {"model", info_.model},   {"policy", info_.policy},
                      {"data", info_.data_dir}, {"threads", info_.threads},
                      {"items", all.items},     {"accuracy", all.accuracy()}};
  j["weight_format"] = info_.weight_format;
  j["vision_weight_format"] = info_.vision_weight_format;
  j["tasks"] = nlohmann::json::object();
  j["per_task"] = nlohmann::json::object();
  for (const auto& [task, g] : by_task) {
    j["tasks"][task] = g.accuracy();
    nlohmann::json t = {{"items", g.items},
                        {"correct", g.correct},
                        {"accuracy", g.accuracy()},
                        {"prompt_tokens", g.prompt_tokens},
                        {"generated_tokens", g.generated_tokens},
                        {"text_tokens_gated", g.text_tokens_gated},
                        {"compression_ratio", g.compression_ratio()}};
    if (g.kept_ratio_items > 0) t["kept_ratio_per_layer"] = g.MeanKeptRatio();
    if (g.agreement_items > 0) {
      t["top1_agreement"] = g.agreement.top1();
      t["kl"] = g.agreement.mean_kl();
    }
    j["per_task"][task] = t;
  }
  std::map<int, std::vector<const ItemResult*>> by_frames, by_turn;
  for (const ItemResult& r : items_) {
    by_frames[r.num_frames].push_back(&r);
    by_turn[r.turn].push_back(&r);
  }
  j["per_num_frames"] = nlohmann::json::object();
  for (const auto& [frames, rows] : by_frames) {
    j["per_num_frames"][std::to_string(frames)] = BucketJson(rows);
  }
  if (by_turn.size() > 1) {
    j["per_turn"] = nlohmann::json::object();
    for (const auto& [turn, rows] : by_turn) j["per_turn"][std::to_string(turn)] = BucketJson(rows);
  }
  int64_t visual = 0;
  double media = 0, vision = 0, prefill = 0, decode = 0, item_ms = 0, agreement_ms = 0,
         selection = 0, kv_bytes = 0;
  for (const ItemResult& r : items_) {
    visual += r.visual_tokens;
    media += r.media_ms;
    vision += r.vision_ms;
    prefill += r.prefill_ms;
    decode += r.decode_ms;
    item_ms += r.item_ms;
    agreement_ms += r.agreement_ms;
    selection += r.selection_ms;
    kv_bytes += static_cast<double>(r.kv_bytes);
  }
  const double n = static_cast<double>(std::max<int64_t>(1, all.items));
  j["tokens"] = {{"prompt", all.prompt_tokens},
                 {"visual", visual},
                 {"generated", all.generated_tokens},
                 {"prompt_per_item", all.prompt_tokens / n},
                 {"generated_per_item", all.generated_tokens / n},
                 {"text_gated", all.text_tokens_gated}};
  j["time"] = {{"seconds", seconds_},           {"per_item_ms", item_ms / n},
               {"media_ms", media / n},         {"vision_ms", vision / n},
               {"prefill_ms", prefill / n},     {"decode_ms", decode / n},
               {"selection_ms", selection / n}, {"agreement_ms", agreement_ms / n}};
  j["kv"] = {{"bytes_per_item", kv_bytes / n}, {"compression_ratio", all.compression_ratio()}};
  j["seconds"] = seconds_;
  if (all.kept_ratio_items > 0) j["kept_ratio_per_layer"] = all.MeanKeptRatio();

  int64_t turn2_items = 0, turn2_correct = 0, ref_items = 0, ref_correct = 0;
  for (const ItemResult& r : items_) {
    if (r.turn2_correct) {
      ++turn2_items;
      turn2_correct += *r.turn2_correct ? 1 : 0;
    }
    if (r.reference_correct) {
      ++ref_items;
      ref_correct += *r.reference_correct ? 1 : 0;
    }
  }
  int64_t describe_items = 0;
  double precision = 0, recall = 0, f1 = 0;
  for (const ItemResult& r : items_) {
    if (!r.describe) continue;
    ++describe_items;
    precision += r.describe->precision;
    recall += r.describe->recall;
    f1 += r.describe->f1;
  }
  if (describe_items > 0) {
    const double d = static_cast<double>(describe_items);
    j["describe"] = {{"items", describe_items},
                     {"precision", precision / d},
                     {"recall", recall / d},
                     {"f1", f1 / d}};
  }
  if (!info_.data_manifest.is_null()) j["data_manifest"] = info_.data_manifest;
  if (!info_.scoring.empty()) j["scoring"] = info_.scoring;
  if (info_.sessions) j["sessions"] = true;
  if (turn2_items > 0) {
    j["turn2"] = {{"items", turn2_items},
                  {"accuracy", static_cast<double>(turn2_correct) / turn2_items}};
  }
  if (all.agreement_items > 0) {
    j["agreement"] = {
        {"reference", info_.agreement_reference},
        {"positions", all.agreement.positions},
        {"top1", all.agreement.top1()},
        {"kl", all.agreement.mean_kl()},
        {"reference_accuracy", ref_items > 0 ? static_cast<double>(ref_correct) / ref_items : 0.0}};
  }
  if (with_items) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ItemResult& r : items_) {
      nlohmann::json row = {{"id", r.id},
                            {"task", r.task},
                            {"num_frames", r.num_frames},
                            {"answer", r.answer},
                            {"pred", r.pred},
                            {"ok", r.correct},
                            {"prompt_tokens", r.prompt_tokens},
                            {"generated_tokens", r.generated_tokens},
                            {"ms", r.item_ms}};
      if (r.turn2_correct) {
        row["turn2_answer"] = r.turn2_answer;
        row["turn2_pred"] = r.turn2_pred;
        row["turn2_ok"] = *r.turn2_correct;
      }
      if (r.agreement) {
        row["agreement_positions"] = r.agreement->positions;
        row["agreement_matches"] = r.agreement->matches;
        row["kl"] = r.agreement->mean_kl();
      }
      if (!r.kept_ratio.empty()) row["kept_ratio_per_layer"] = r.kept_ratio;
      if (r.describe) row["describe_f1"] = r.describe->f1;
      rows.push_back(std::move(row));
    }
    j["item_results"] = std::move(rows);
  }
  return j;
}

std::string EvalReport::Table() const {
  const Group all = Overall();
  const auto by_task = ByTask();
  const bool agreement = all.agreement_items > 0;
  // synthvid2 reports one row per turn of its sessions.
  const char* unit = info_.suite == "synthvid2" ? "turns" : "items";
  std::string out = fmt::format("{} {} split, {} {}, policy {}, model {}\n\n", info_.suite,
                                info_.split, all.items, unit, info_.policy, info_.model);
  out += fmt::format("{:<13} {:>6} {:>9} {:>11} {:>9} {:>7}", "task", unit, "accuracy",
                     "prompt tok", "gen tok", "KV x");
  if (agreement) out += fmt::format(" {:>7} {:>9}", "top-1", "KL");
  out += "\n";
  auto row = [&](const std::string& name, const Group& g) {
    const double n = static_cast<double>(std::max<int64_t>(1, g.items));
    out += fmt::format("{:<13} {:>6} {:>8.1f}% {:>11.1f} {:>9.2f} {:>7.2f}", name, g.items,
                       100 * g.accuracy(), g.prompt_tokens / n, g.generated_tokens / n,
                       g.compression_ratio());
    if (agreement) {
      out += fmt::format(" {:>6.2f}% {:>9.2e}", 100 * g.agreement.top1(), g.agreement.mean_kl());
    }
    out += "\n";
  };
  for (const std::string& task : TasksInOrder(by_task)) row(task, by_task.at(task));
  row("overall", all);

  std::map<int, std::pair<int64_t, int64_t>> by_frames;
  for (const ItemResult& r : items_) {
    auto& [n, ok] = by_frames[r.num_frames];
    ++n;
    ok += r.correct ? 1 : 0;
  }
  out += "\nby frames: ";
  for (const auto& [frames, c] : by_frames) {
    out += fmt::format(" {}f {:.1f}% ({})", frames, 100.0 * c.second / c.first, c.first);
  }
  out += "\n";
  const nlohmann::json j = Json(false);
  if (j.contains("describe")) {
    const auto& d = j["describe"];
    out += fmt::format("describe: {} replies, per-fact precision {:.3f} recall {:.3f} F1 {:.3f}\n",
                       d["items"].get<int64_t>(), d["precision"].get<double>(),
                       d["recall"].get<double>(), d["f1"].get<double>());
  }
  if (j.contains("turn2")) {
    out +=
        fmt::format("turn 2 (follow-up question, same conversation): {:.1f}% of {}\n",
                    100 * j["turn2"]["accuracy"].get<double>(), j["turn2"]["items"].get<int64_t>());
  }
  if (agreement) {
    const std::string against =
        info_.agreement_reference == "none" ? "full attention" : info_.agreement_reference;
    out += fmt::format(
        "teacher-forced agreement with {}: top-1 {:.2f}% over {} answer positions, mean KL "
        "{:.3e}; {}'s own accuracy {:.1f}%\n",
        against, 100 * all.agreement.top1(), all.agreement.positions, all.agreement.mean_kl(),
        against, 100 * j["agreement"]["reference_accuracy"].get<double>());
  }
  if (all.kept_ratio_items > 0 && info_.policy != "none") {  // "none" keeps everything
    out += "kept ratio per layer:\n";
    for (const std::string& task : TasksInOrder(by_task)) {
      const Group& g = by_task.at(task);
      if (g.kept_ratio_items > 0)
        out += fmt::format("  {:<10} {}\n", task, Ratios(g.MeanKeptRatio()));
    }
    out += fmt::format("  {:<10} {}\n", "overall", Ratios(all.MeanKeptRatio()));
  }
  const auto& t = j["time"];
  out += fmt::format(
      "time: {:.1f} s, {:.1f} ms per item (media {:.1f}, vision {:.1f}, prefill {:.1f}, decode "
      "{:.1f}{})\n",
      seconds_, t["per_item_ms"].get<double>(), t["media_ms"].get<double>(),
      t["vision_ms"].get<double>(), t["prefill_ms"].get<double>(), t["decode_ms"].get<double>(),
      agreement ? fmt::format(", agreement {:.1f}", t["agreement_ms"].get<double>()) : "");
  return out;
}

}  // namespace framezip::eval
