// framezip-eval-frames: `framezip eval` of a frame pack (tools/eval/frame_pack.h) on any device,
// with no media stage: the GPU check's way to score the shipped model on a GPU machine that has
// neither FFmpeg nor OpenCV. Each item is asked as `framezip eval` asks it (a fresh conversation,
// greedy, at most --max-tokens, reply stripped and matched exactly) and reported by the same
// EvalReport. With --reference-device, the same items also run on a second engine (the CPU), and
// the report's agreement is the device's teacher-forced next-token agreement with it: both are fed
// the reference's greedy reply and their logits compared at every answer position.
//
//   framezip-eval-frames --model models/framezip-tiny-video --pack test.frames --device cuda
//       --reference-device cpu --max-accuracy-gap 0.5 --min-top1 0.99 --json
//
// Exit status: 0 done (and within the bounds given); 1 an error, or a bound missed; 2 usage.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/flags.h"
#include "common/logging.h"
#include "engine/core/device.h"
#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tools/eval/agreement.h"
#include "tools/eval/answer_match.h"
#include "tools/eval/eval_report.h"
#include "tools/eval/frame_pack.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/eval_turn_stats.h"
#include "tools/framezip/eval_turns.h"

namespace framezip::cli {
namespace {

using engine::runtime::Engine;
using engine::runtime::Message;

struct Options {
  std::string model_dir, pack_path, device = "cpu", reference_device, policy = "none";
  int max_tokens = 6, limit = 0, threads = 0;
  double max_accuracy_gap = -1, min_top1 = -1;
  bool json = false, items = false;
};

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

StatusOr<std::unique_ptr<Engine>> LoadOn(const Options& opt, const std::string& device) {
  FZ_ASSIGN_OR_RETURN(const engine::Device parsed, engine::ParseDevice(device));
  engine::runtime::EngineOptions options;
  options.threads = opt.threads;
  options.device = parsed;
  FZ_ASSIGN_OR_RETURN(auto eng, Engine::Load(opt.model_dir, options));
  // Refuses an unknown policy before any item runs.
  FZ_RETURN_IF_ERROR(eng->NewConversation(opt.policy).status());
  return eng;
}

StatusOr<Message> ItemMessage(const eval::FramePack& pack, size_t i) {
  const eval::FramePackItem& item = pack.items()[i];
  const eval::FrameGeometry& g = pack.geometry();
  FZ_ASSIGN_OR_RETURN(
      engine::Tensor pixels,
      engine::Tensor::Empty({item.num_frames, g.channels, g.height, g.width}, engine::DType::kF32));
  FZ_RETURN_IF_ERROR(pack.ReadPixels(
      i, std::span<float>(pixels.data<float>(), static_cast<size_t>(pixels.numel()))));
  return VideoQuestion(item.question, std::move(pixels));
}

StatusOr<eval::ItemResult> EvaluateItem(Engine& eng, Engine* reference, const Options& opt,
                                        const eval::FramePack& pack, size_t i) {
  const eval::FramePackItem& item = pack.items()[i];
  const double start = NowMs();
  FZ_ASSIGN_OR_RETURN(const Message message, ItemMessage(pack, i));
  eval::ItemResult r;
  r.id = item.id;
  r.task = item.task;
  r.num_frames = item.num_frames;
  r.answer = item.answer;
  r.media_ms = NowMs() - start;
  const engine::runtime::TurnOptions turn = GreedyTurn(opt.max_tokens);
  FZ_ASSIGN_OR_RETURN(const engine::runtime::TurnResult reply,
                      AnswerInFreshConversation(eng, opt.policy, message, turn));
  r.pred = eval::StripLikePython(reply.text);
  r.correct = eval::AnswerMatches(reply.text, item.answer);
  FillTurnStats(reply.stats, r);
  if (reference != nullptr) {
    const double t0 = NowMs();
    FZ_ASSIGN_OR_RETURN(const engine::runtime::TurnResult ref,
                        AnswerInFreshConversation(*reference, opt.policy, message, turn));
    r.reference_correct = eval::AnswerMatches(ref.text, item.answer);
    FZ_ASSIGN_OR_RETURN(r.agreement,
                        TeacherForcedAgreement({reference, opt.policy}, {&eng, opt.policy}, message,
                                               ref.token_ids));
    r.agreement_ms = NowMs() - t0;
  }
  r.item_ms = NowMs() - start;
  return r;
}

// The bounds of --max-accuracy-gap and --min-top1 against the report's JSON; prints each verdict.
bool WithinBounds(const Options& opt, const nlohmann::json& j) {
  bool ok = true;
  if (!j.contains("agreement")) return true;
  const double gap = 100 * std::abs(j["accuracy"].get<double>() -
                                    j["agreement"]["reference_accuracy"].get<double>());
  const double top1 = j["agreement"]["top1"].get<double>();
  if (opt.max_accuracy_gap >= 0) {
    const bool pass = gap <= opt.max_accuracy_gap + 1e-9;
    std::fprintf(
        stderr, "framezip-eval-frames: accuracy %s vs %s differs by %.2f points (bound %.2f): %s\n",
        opt.device.c_str(), opt.reference_device.c_str(), gap, opt.max_accuracy_gap,
        pass ? "PASS" : "FAIL");
    ok = ok && pass;
  }
  if (opt.min_top1 >= 0) {
    const bool pass = top1 >= opt.min_top1;
    std::fprintf(stderr, "framezip-eval-frames: top-1 agreement %.4f (bound >= %.4f): %s\n", top1,
                 opt.min_top1, pass ? "PASS" : "FAIL");
    ok = ok && pass;
  }
  return ok;
}

int Run(const std::vector<std::string>& args) {
  Options opt;
  FlagSet flags(
      "framezip-eval-frames",
      "framezip eval on a frame pack (framezip eval --save-frames), with no media stage,\n"
      "on --device; with --reference-device also the device's teacher-forced top-1\n"
      "agreement with that device and both accuracies. Prints framezip eval's table;\n"
      "--json adds its JSON object as the last line of stdout.");
  flags.String("model", &opt.model_dir, "model directory (Hugging Face LLaVA-OneVision layout)",
               "DIR");
  flags.String("pack", &opt.pack_path, "frame pack written by framezip eval --save-frames", "FILE");
  flags.String("device", &opt.device, "where the engine runs: cpu, cuda or cuda:N", "DEVICE");
  flags.String("reference-device", &opt.reference_device,
               "also run every item here and compare (empty = no comparison)", "DEVICE");
  flags.String("policy", &opt.policy, "KV compression policy (both engines)", "P");
  flags.Int("max-tokens", &opt.max_tokens, "tokens generated at most per answer");
  flags.Int("limit", &opt.limit, "evaluate the first N items only (0 = all)");
  flags.Int("threads", &opt.threads, "compute threads (0 = all CPUs)");
  flags.Double("max-accuracy-gap", &opt.max_accuracy_gap,
               "with --reference-device: exit 1 when the accuracies differ by more points");
  flags.Double("min-top1", &opt.min_top1,
               "with --reference-device: exit 1 when top-1 agreement is lower (a fraction)");
  flags.Bool("json", &opt.json, "print one JSON object with the results as the last line");
  flags.Bool("items", &opt.items, "with --json, include every item's result");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (opt.model_dir.empty() || opt.pack_path.empty() || opt.limit < 0 || opt.max_tokens < 1) {
    std::fprintf(stderr,
                 "framezip-eval-frames: --model and --pack are required, --limit >= 0, "
                 "--max-tokens >= 1\n");
    return 2;
  }
  (void)InitLogging(LoggingOptions{});
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip-eval-frames: %s\n", MessageOf(s).c_str());
    return 1;
  };
  auto pack = eval::FramePack::Open(opt.pack_path);
  if (!pack.ok()) return fail(pack.status());
  auto eng = LoadOn(opt, opt.device);
  if (!eng.ok()) return fail(Annotate(eng.status(), "--device " + opt.device));
  std::unique_ptr<Engine> reference;
  if (!opt.reference_device.empty()) {
    auto ref = LoadOn(opt, opt.reference_device);
    if (!ref.ok())
      return fail(Annotate(ref.status(), "--reference-device " + opt.reference_device));
    reference = std::move(*ref);
  }
  const nlohmann::json& source = pack->source();
  eval::EvalReport report(eval::EvalRunInfo{.suite = source.value("suite", "synthvid"),
                                            .split = source.value("split", ""),
                                            .model = opt.model_dir,
                                            .policy = opt.policy,
                                            .data_dir = opt.pack_path,
                                            .threads = engine::ComputeThreads(),
                                            .agreement_reference = opt.reference_device});
  const size_t n = opt.limit > 0
                       ? std::min<size_t>(static_cast<size_t>(opt.limit), pack->items().size())
                       : pack->items().size();
  const double start = NowMs();
  for (size_t i = 0; i < n; ++i) {
    auto r = EvaluateItem(**eng, reference.get(), opt, *pack, i);
    if (!r.ok()) return fail(Annotate(r.status(), "item " + pack->items()[i].id));
    report.Add(std::move(*r));
    if ((i + 1) % 50 == 0 || i + 1 == n) {
      std::fprintf(stderr, "framezip-eval-frames: %zu/%zu items, accuracy %.1f%%, %.1f s\n", i + 1,
                   n, 100 * report.Accuracy(), (NowMs() - start) / 1000);
    }
  }
  report.SetSeconds((NowMs() - start) / 1000);
  const nlohmann::json j = report.Json(opt.items);
  std::fputs(report.Table().c_str(), stdout);
  if (opt.json) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
  return WithinBounds(opt, j) ? 0 : 1;
}

}  // namespace
}  // namespace framezip::cli

int main(int argc, char** argv) {
  return framezip::cli::Run(std::vector<std::string>(argv + 1, argv + argc));
}
