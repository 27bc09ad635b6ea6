// The results of `framezip eval`: one ItemResult per evaluated item, aggregated into accuracy per
// task, per frame count and overall, token and time totals, kept ratios and teacher-forced
// agreement, and rendered as a readable table or as the one-line JSON object of --json.
//
// JSON schema (docs/architecture.md §6; fractions in [0, 1], times in ms unless named seconds):
//   {"suite", "split", "model", "policy", "items", "accuracy",
//    "tasks": {task: accuracy},
//    "per_task": {task: {"items", "correct", "accuracy", "prompt_tokens", "generated_tokens",
//                        "text_tokens_gated", "compression_ratio", "kept_ratio_per_layer"?: [L],
//                        "top1_agreement"?, "kl"?}},
//    "per_num_frames": {"8": {"items", "correct", "accuracy", "prefill_ms", "visual_tokens",
//                             "cached_tokens", "kv_bytes_per_item",
//                             "kv_bytes_by_format": {format: bytes}}, ...}
//                      (means over the bucket's rows),
//    "per_turn"?: {"1": {... as per_num_frames}, "2": ...}  when some row is a later turn,
//    "tokens": {"prompt", "visual", "generated", "prompt_per_item", "generated_per_item",
//               "text_gated"}  (text_gated: generated tokens whose K/V a policy did not store
//               in its later layers, Dynamic-LLaVA's output-text gating),
//    "kv": {"bytes_per_item", "compression_ratio"}   means over items (after the answer),
//    "time": {"seconds", "per_item_ms", "media_ms", "vision_ms", "prefill_ms", "decode_ms",
//             "selection_ms", "agreement_ms"},
//    "seconds",
//    "kept_ratio_per_layer"?: [L]            mean over items (policies that report it),
//    "turn2"?: {"items", "accuracy"}          with --turn2,
//    "agreement"?: {"reference", "positions", "top1", "kl",
//                   "reference_accuracy"}    with --agreement ("reference": "none", full
//                                            attention) or framezip-eval-frames
//                                            --reference-device (the device's name),
//    "describe"?: {"items", "precision", "recall", "f1"}   means over describe replies,
//    "data_manifest"?: {"generator", "generator_version", "jsonl_sha256"},
//    "scoring"?: "free_running" | "teacher_forced"  (synthvid2),
//    "sessions"?: true  (synthvid2 --sessions),
//    "item_results"?: [{"id", "task", "num_frames", "answer", "pred", "ok", ...}]  with --items}
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/eval/agreement.h"
#include "tools/eval/describe_score.h"

namespace framezip::eval {

struct ItemResult {
  std::string id;
  std::string task;
  int num_frames = 0;
  std::string answer;  // the truth
  std::string pred;    // the reply, stripped (what is compared)
  bool correct = false;
  int64_t prompt_tokens = 0;
  int64_t visual_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t text_tokens_gated = 0;  // of generated_tokens, those not stored in later layers
  double media_ms = 0;  // decode + sample + preprocess (a worker thread, overlapping the engine)
  double vision_ms = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  double item_ms = 0;  // wall time the item held the engine (its video was decoded ahead)
  std::vector<double> kept_ratio;     // per layer; empty when the policy does not report it
  int64_t kv_bytes = 0;               // KV held after the answer
  double compression_ratio = 1;       // f16 bytes of the same tokens over kv_bytes
  double selection_ms = 0;            // the policy's token selection during prefill
  std::optional<bool> turn2_correct;  // --turn2, when the item has a follow-up
  std::string turn2_answer, turn2_pred;
  std::optional<AgreementCounts> agreement;  // --agreement
  std::optional<bool> reference_correct;     // --agreement: the full model's greedy answer
  std::optional<DescribeScore> describe;     // synthvid2's describe task
  double agreement_ms = 0;
  int turn = 1;  // synthvid2: the turn of its session this row scores (1 = the video's)
  int64_t cached_tokens = 0;  // tokens already in the KV cache when the turn began
  // KV held after the answer by page format name ("f16", "int4", "int2", "low_rank", ...).
  std::map<std::string, int64_t> kv_bytes_by_format;
};

struct EvalRunInfo {
  std::string suite = "synthvid";
  std::string split;
  std::string model;
  std::string policy;
  std::string data_dir;
  int threads = 0;
  // Where the data came from (synthvid2: the split manifest's generator, version and JSONL
  // hash); reported as "data_manifest" when set.
  nlohmann::json data_manifest = nullptr;
  // How later turns were scored (synthvid2): "free_running" or "teacher_forced"; reported as
  // "scoring" when set.
  std::string scoring = {};
  // synthvid2 --sessions: every turn after the first ran on a conversation restored from the
  // committed KV segments; reported as "sessions": true.
  bool sessions = false;
  // How the decoder's projections were held (engine/runtime/weight_format.h): "bf16" or "int8";
  // reported as "weight_format".
  std::string weight_format = "bf16";
  // The vision tower's projections, likewise; reported as "vision_weight_format".
  std::string vision_weight_format = "bf16";
  // What the items' agreement was measured against: "none" (full attention, framezip eval
  // --agreement) or a device ("cpu": framezip-eval-frames --reference-device). Reported as the
  // agreement's "reference".
  std::string agreement_reference = "none";
};

class EvalReport {
 public:
  explicit EvalReport(EvalRunInfo info) : info_(std::move(info)) {}

  void Add(ItemResult item) { items_.push_back(std::move(item)); }
  // Wall time of the whole run (set once at the end); reported as "seconds".
  void SetSeconds(double seconds) { seconds_ = seconds; }

  int64_t items() const { return static_cast<int64_t>(items_.size()); }
  double Accuracy() const;
  // Accuracy of the items of one task (0 when there are none).
  double TaskAccuracy(const std::string& task) const;

  // The object described at the top of this file; per-item rows only with `with_items`.
  nlohmann::json Json(bool with_items) const;
  // A per-task table with totals, frame counts, time, kept ratios and agreement.
  std::string Table() const;

 private:
  struct Group {
    int64_t items = 0, correct = 0, prompt_tokens = 0, generated_tokens = 0, text_tokens_gated = 0;
    double compression_ratio_sum = 0;
    std::vector<double> kept_ratio_sum;
    int64_t kept_ratio_items = 0;
    AgreementCounts agreement;
    int64_t agreement_items = 0;
    void Add(const ItemResult& r);
    double accuracy() const { return items > 0 ? static_cast<double>(correct) / items : 0; }
    double compression_ratio() const { return items > 0 ? compression_ratio_sum / items : 1; }
    std::vector<double> MeanKeptRatio() const;
  };
  std::map<std::string, Group> ByTask() const;
  Group Overall() const;

  EvalRunInfo info_;
  std::vector<ItemResult> items_;
  double seconds_ = 0;
};

}  // namespace framezip::eval
