// framezip eval: accuracy of a model on a synthvid split through the C++ media stage and engine,
// scored exactly as tools/train/evaluate.py scores the Hugging Face reference (greedy decoding, at
// most 6 new tokens, reply stripped and compared byte for byte with the answer; see
// tools/eval/answer_match.h). Each item runs in a fresh conversation; --turn2 asks the item's
// first different follow-up question as a second turn in the same conversation (evaluate.py
// --turn2). --agreement also measures teacher-forced agreement of the policy with full attention
// (tools/eval/agreement.h). The JSON object of --json is documented in tools/eval/eval_report.h.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "engine/core/device.h"
#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "media/media.h"
#include "server/preprocess_spec.h"
#include "tools/eval/agreement.h"
#include "tools/eval/answer_match.h"
#include "tools/eval/eval_report.h"
#include "tools/eval/frame_pack.h"
#include "tools/eval/synthvid2_split.h"
#include "tools/eval/synthvid_generate.h"
#include "tools/eval/synthvid_split.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/eval_synthvid2.h"
#include "tools/framezip/eval_turns.h"
#include "tools/framezip/eval_turn_stats.h"
#include "tools/framezip/subcommands.h"
#include "tools/framezip/video_frames.h"

namespace framezip::cli {
namespace {

namespace fs = std::filesystem;
using engine::runtime::Engine;
using engine::runtime::Message;
using engine::runtime::TurnOptions;

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct EvalOptions {
  std::string policy = "none";
  int frames = 0;      // 0 = every frame of the file (the synthvid convention)
  int max_tokens = 6;  // evaluate.py's max_new_tokens
  bool turn2 = false;
  bool agreement = false;
  bool teacher_forced = false;  // synthvid2 (eval_synthvid2.h)
  bool sessions = false;        // synthvid2 (eval_synthvid2.h)
  // With --agreement and a --weight-format or --vision-weight-format other than bf16: the same
  // model loaded with bf16 weights, the reference the agreement is measured against (else the
  // evaluated engine itself).
  Engine* reference = nullptr;
};

// The item's video as model input: `frames` frames sampled uniformly (for a synthvid file with
// exactly that many frames at constant rate, uniform sampling picks every frame, as evaluate.py
// feeds them), preprocessed to the model's spec.
StatusOr<engine::Tensor> DecodeVideo(const fs::path& file, int frames,
                                     const media::PreprocessSpec& spec) {
  FZ_ASSIGN_OR_RETURN(engine::Tensor t, DecodeVideoFrames(file, frames, spec));
  if (t.dim(0) != frames) {
    return InvalidArgumentError("{}: {} frames decoded, {} expected", file.string(), t.dim(0),
                                frames);
  }
  return t;
}

StatusOr<engine::runtime::TurnResult> Ask(Engine& eng, engine::runtime::Conversation& conv,
                                          const Message& message, const TurnOptions& turn) {
  return eng.RunTurn(conv, std::span<const Message>(&message, 1), turn);
}

// One item's video, decoded ahead on a worker thread while the engine runs the previous item.
struct DecodedVideo {
  StatusOr<engine::Tensor> pixels;
  double ms = 0;
};

std::future<DecodedVideo> DecodeAhead(const fs::path& video, int frames,
                                      const media::PreprocessSpec& spec) {
  return std::async(std::launch::async, [video, frames, &spec] {
    const double t0 = NowMs();
    StatusOr<engine::Tensor> pixels = DecodeVideo(video, frames, spec);
    return DecodedVideo{std::move(pixels), NowMs() - t0};
  });
}

std::future<DecodedVideo> DecodeAhead(const eval::SynthvidItem& item, const EvalOptions& opt,
                                      const media::PreprocessSpec& spec) {
  return DecodeAhead(item.video, opt.frames > 0 ? opt.frames : item.num_frames, spec);
}

// --save-frames: the item's decoded frames into the pack, as the engine is about to get them.
Status SaveFrames(eval::FramePackWriter& pack, const eval::SynthvidItem& item,
                  const DecodedVideo& video) {
  if (!video.pixels.ok()) return video.pixels.status();
  const engine::Tensor& t = *video.pixels;
  return pack.Add({.id = item.id,
                   .task = item.main.task,
                   .question = item.main.question,
                   .answer = item.main.answer,
                   .num_frames = static_cast<int>(t.dim(0))},
                  {.channels = static_cast<int>(t.dim(1)),
                   .height = static_cast<int>(t.dim(2)),
                   .width = static_cast<int>(t.dim(3))},
                  std::span<const float>(t.data<float>(), static_cast<size_t>(t.numel())));
}

// The table, then with --json the one-line JSON object as the last line of stdout.
void PrintReport(const eval::EvalReport& report, bool json, bool items) {
  std::fputs(report.Table().c_str(), stdout);
  if (json) {
    std::printf(
        "%s\n",
        report.Json(items).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
}

// synthvid2: every item a session, every turn scored (eval_synthvid2.h).
Status RunSynthvid2(Engine& eng, const std::vector<eval::Synthvid2Item>& items,
                    const EvalOptions& opt, const media::PreprocessSpec& spec,
                    eval::EvalReport& report) {
  const Synthvid2Options options{.policy = opt.policy,
                                 .max_tokens = opt.max_tokens,
                                 .teacher_forced = opt.teacher_forced,
                                 .sessions = opt.sessions};
  const double start = NowMs();
  const size_t n = items.size();
  std::future<DecodedVideo> next = DecodeAhead(items.front().video, items.front().num_frames, spec);
  for (size_t i = 0; i < n; ++i) {
    const eval::Synthvid2Item& item = items[i];
    DecodedVideo video = next.get();
    if (i + 1 < n) next = DecodeAhead(items[i + 1].video, items[i + 1].num_frames, spec);
    if (!video.pixels.ok()) return Annotate(video.pixels.status(), "item " + item.id);
    auto turns = EvaluateSynthvid2Item(eng, item, options, std::move(*video.pixels), video.ms);
    if (!turns.ok()) return Annotate(turns.status(), "item " + item.id);
    for (eval::ItemResult& r : *turns) report.Add(std::move(r));
    if ((i + 1) % 25 == 0 || i + 1 == n) {
      std::fprintf(stderr, "eval: %zu/%zu items (%lld turns), accuracy %.1f%%, %.1f s\n", i + 1, n,
                   static_cast<long long>(report.items()), 100 * report.Accuracy(),
                   (NowMs() - start) / 1000);
    }
  }
  report.SetSeconds((NowMs() - start) / 1000);
  return absl::OkStatus();
}

StatusOr<eval::ItemResult> EvaluateItem(Engine& eng, const eval::SynthvidItem& item,
                                        const EvalOptions& opt, DecodedVideo decoded) {
  const double start = NowMs();
  eval::ItemResult r;
  r.id = item.id;
  r.task = item.main.task;
  r.num_frames = opt.frames > 0 ? opt.frames : item.num_frames;
  r.answer = item.main.answer;

  if (!decoded.pixels.ok()) return decoded.pixels.status();
  r.media_ms = decoded.ms;
  const Message message = VideoQuestion(item.main.question, std::move(*decoded.pixels));
  const TurnOptions turn = GreedyTurn(opt.max_tokens);
  FZ_ASSIGN_OR_RETURN(auto conv, eng.NewConversation(opt.policy));
  FZ_ASSIGN_OR_RETURN(engine::runtime::TurnResult reply, Ask(eng, *conv, message, turn));
  r.pred = eval::StripLikePython(reply.text);
  r.correct = eval::AnswerMatches(reply.text, item.main.answer);
  FillTurnStats(reply.stats, r);

  if (const eval::SynthvidQuestion* next = opt.turn2 ? eval::SecondTurnQuestion(item) : nullptr) {
    Message followup;
    followup.text = next->question;
    FZ_ASSIGN_OR_RETURN(engine::runtime::TurnResult reply2, Ask(eng, *conv, followup, turn));
    r.turn2_answer = next->answer;
    r.turn2_pred = eval::StripLikePython(reply2.text);
    r.turn2_correct = eval::AnswerMatches(reply2.text, next->answer);
  }

  if (opt.agreement) {
    const double t0 = NowMs();
    std::vector<int32_t> reference = reply.token_ids;
    Engine& ref = opt.reference != nullptr ? *opt.reference : eng;
    if (opt.policy != "none" || &ref != &eng) {
      FZ_ASSIGN_OR_RETURN(const engine::runtime::TurnResult full,
                          AnswerInFreshConversation(ref, "none", message, turn));
      reference = full.token_ids;
      r.reference_correct = eval::AnswerMatches(full.text, item.main.answer);
    } else {
      r.reference_correct = r.correct;
    }
    // Teacher-forced agreement of the policy with full attention on the full model's reply.
    FZ_ASSIGN_OR_RETURN(r.agreement, TeacherForcedAgreement({&ref, "none"}, {&eng, opt.policy},
                                                            message, reference));
    r.agreement_ms = NowMs() - t0;
  }
  r.item_ms = NowMs() - start;
  return r;
}

}  // namespace

int RunEval(const std::vector<std::string>& args) {
  std::string model_dir, suite = "synthvid", split = "test", data_dir, kv_format = "f16";
  std::string device = "cpu", save_frames, weight_format = "bf16", vision_weight_format = "bf16";
  EvalOptions opt;
  int limit = 0, threads = 0;
  bool json = false, items = false;
  FlagSet flags(
      "framezip eval",
      "Accuracy of a model on a generated video-QA split, through the C++ media stage and engine,\n"
      "scored as tools/train/evaluate.py does (greedy, reply stripped, exact match). Prints a\n"
      "per-task table; --json adds one JSON object as the last line of stdout (schema in\n"
      "tools/eval/eval_report.h): {suite, split, model, policy, items, accuracy, tasks, per_task,\n"
      "per_num_frames, tokens, time, seconds, kept_ratio_per_layer?, turn2?, agreement?,\n"
      "item_results? (--items)}.\n"
      "The split is read from --data (<dir>/<split>.jsonl + videos/, as "
      "tools/synthvid/synthvid.py\n"
      "writes it); when it is absent, it is generated once with synthvid.py (needs a Python with\n"
      "numpy, av and pillow: .venv/, Debian's python3-numpy/av/pil, or FRAMEZIP_PYTHON) into "
      "--data\n"
      "when given, else into the cache ($FRAMEZIP_CACHE_DIR or ~/.cache/framezip/synthvid).");
  flags.String("model", &model_dir, "model directory (Hugging Face LLaVA-OneVision layout)", "DIR");
  flags.String("suite", &suite,
               "evaluation suite: synthvid, or synthvid2 (long videos, sessions, "
               "descriptions)",
               "NAME");
  flags.String("split", &split, "split of the suite: test, val or train", "NAME");
  flags.String("data", &data_dir, "directory of the split (default .data/synthvid)", "DIR");
  flags.String("policy", &opt.policy,
               "KV compression policy, NAME[:KEY=VALUE,...] (options: docs/api.md)", "P");
  flags.Int("limit", &limit, "evaluate the first N items only (0 = all)");
  flags.Int("frames", &opt.frames, "frames sampled uniformly per video (0 = every frame)");
  flags.Int("max-tokens", &opt.max_tokens, "tokens generated at most per answer");
  flags.Int("threads", &threads, "compute threads (0 = all CPUs)");
  flags.String("kv-format", &kv_format, "KV page format: f16 or f32", "F");
  flags.String("device", &device, "where the engine runs: cpu, cuda or cuda:N", "DEVICE");
  flags.String("weight-format", &weight_format,
               "decoder projection weights: bf16 (as stored) or int8 (quantised at load, CPU); "
               "with --agreement an int8 run is compared with the bf16 model",
               "F");
  flags.String("vision-weight-format", &vision_weight_format,
               "vision tower projection weights: bf16 (as stored) or int8 (quantised at load, "
               "CPU); with --agreement compared with the bf16 model as --weight-format is",
               "F");
  flags.Bool("turn2", &opt.turn2, "also ask a follow-up question as a second turn");
  flags.Bool("agreement", &opt.agreement,
             "teacher-forced top-1 agreement and KL of the policy against full attention");
  flags.Bool("teacher-forced", &opt.teacher_forced,
             "synthvid2: score short answers teacher-forced, so later turns see the expected "
             "answers in their history (default: free-running, the model's own replies)");
  flags.Bool("sessions", &opt.sessions,
             "synthvid2: commit each turn's KV as a session segment and run the next turn on the "
             "conversation restored from the segments (the server's session path after eviction)");
  flags.String("save-frames", &save_frames,
               "synthvid: also write every item's model-ready frames to this frame pack, for "
               "framezip-eval-frames (an evaluation with no media stage, as on a GPU machine)",
               "FILE");
  flags.Bool("json", &json, "print one JSON object with the results as the last line");
  flags.Bool("items", &items, "with --json, include every item's result");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (model_dir.empty()) {
    std::fprintf(stderr, "framezip eval: --model is required\n");
    return 2;
  }
  const bool v2 = suite == "synthvid2";
  if (suite != "synthvid" && !v2) {
    std::fprintf(stderr, "framezip eval: unknown suite '%s' (known: synthvid, synthvid2)\n",
                 suite.c_str());
    return 2;
  }
  if (v2 && (opt.turn2 || opt.agreement || opt.frames > 0)) {
    std::fprintf(stderr,
                 "framezip eval: --turn2, --agreement and --frames are synthvid (v1) options; "
                 "synthvid2 items carry their own turns and frame counts\n");
    return 2;
  }
  if (v2 && !save_frames.empty()) {
    std::fprintf(stderr, "framezip eval: --save-frames is a synthvid (v1) option\n");
    return 2;
  }
  if (!v2 && (opt.teacher_forced || opt.sessions)) {
    std::fprintf(stderr, "framezip eval: --teacher-forced and --sessions are synthvid2 options\n");
    return 2;
  }
  if (split != "test" && split != "val" && split != "train") {
    std::fprintf(stderr, "framezip eval: unknown split '%s' (test, val, train)\n", split.c_str());
    return 2;
  }
  if (limit < 0 || opt.frames < 0 || opt.max_tokens < 1) {
    std::fprintf(stderr, "framezip eval: --limit and --frames must be >= 0, --max-tokens >= 1\n");
    return 2;
  }
  // Logs go to stderr: stdout carries the table and the JSON line only.
  (void)InitLogging(LoggingOptions{});
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip eval: %s\n", MessageOf(s).c_str());
    return 1;
  };

  const bool data_given = !data_dir.empty();
  const fs::path data = data_given ? fs::path(data_dir) : fs::path(".data") / suite;
  const int count = limit > 0 ? limit : eval::SynthvidSplitSize(split);
  const fs::path cache = eval::DefaultSynthvidCacheDir().parent_path() / suite;
  auto dir = v2 ? eval::FindOrGenerateSynthvid2Split(data, split, count, data_given ? data : cache)
                : eval::FindOrGenerateSynthvidSplit(data, split, count, data_given ? data : cache);
  if (!dir.ok()) return fail(dir.status());
  StatusOr<std::vector<eval::SynthvidItem>> split_items = std::vector<eval::SynthvidItem>();
  StatusOr<std::vector<eval::Synthvid2Item>> v2_items = std::vector<eval::Synthvid2Item>();
  nlohmann::json data_manifest;
  if (v2) {
    v2_items = eval::LoadSynthvid2Split(*dir, split, limit);
    if (!v2_items.ok()) return fail(v2_items.status());
    if (auto p = eval::LoadSynthvid2Provenance(*dir, split); p.ok()) {
      data_manifest = {{"generator", p->generator},
                       {"generator_version", p->generator_version},
                       {"jsonl_sha256", p->jsonl_sha256}};
    }
  } else {
    split_items = eval::LoadSynthvidSplit(*dir, split, limit);
    if (!split_items.ok()) return fail(split_items.status());
  }

  engine::runtime::EngineOptions options;
  options.threads = threads;
  auto format = engine::kv::ParseKvFormat(kv_format);
  if (!format.ok()) return fail(format.status());
  options.kv_format = *format;
  auto parsed_device = engine::ParseDevice(device);
  if (!parsed_device.ok()) return fail(Annotate(parsed_device.status(), "--device"));
  options.device = *parsed_device;
  auto parsed_weights = engine::runtime::ParseWeightFormat(weight_format);
  if (!parsed_weights.ok()) return fail(Annotate(parsed_weights.status(), "--weight-format"));
  options.weight_format = *parsed_weights;
  auto parsed_vision = engine::runtime::ParseWeightFormat(vision_weight_format);
  if (!parsed_vision.ok()) return fail(Annotate(parsed_vision.status(), "--vision-weight-format"));
  options.vision_weight_format = *parsed_vision;
  auto eng = Engine::Load(model_dir, options);
  if (!eng.ok()) return fail(Annotate(eng.status(), "loading the model"));
  StatusOr<std::unique_ptr<Engine>> reference_engine = std::unique_ptr<Engine>();
  if (opt.agreement && (options.weight_format != engine::runtime::WeightFormat::kBf16 ||
                        options.vision_weight_format != engine::runtime::WeightFormat::kBf16)) {
    engine::runtime::EngineOptions reference_options = options;
    reference_options.weight_format = engine::runtime::WeightFormat::kBf16;
    reference_options.vision_weight_format = engine::runtime::WeightFormat::kBf16;
    reference_engine = Engine::Load(model_dir, reference_options);
    if (!reference_engine.ok()) {
      return fail(Annotate(reference_engine.status(), "loading the bf16 reference model"));
    }
    opt.reference = reference_engine->get();
  }
  if (auto probe = (*eng)->NewConversation(opt.policy); !probe.ok()) return fail(probe.status());
  const auto spec = server::PreprocessSpecFor((*eng)->preprocessor(), (*eng)->image_size());

  eval::EvalReport report(eval::EvalRunInfo{.suite = suite,
                                            .split = split,
                                            .model = model_dir,
                                            .policy = opt.policy,
                                            .data_dir = dir->string(),
                                            .threads = engine::ComputeThreads(),
                                            .data_manifest = data_manifest,
                                            .scoring = !v2                  ? ""
                                                       : opt.teacher_forced ? "teacher_forced"
                                                                            : "free_running",
                                            .sessions = v2 && opt.sessions,
                                            .weight_format = weight_format,
                                            .vision_weight_format = vision_weight_format});
  if (v2) {
    if (Status s = RunSynthvid2(**eng, *v2_items, opt, spec, report); !s.ok()) return fail(s);
    PrintReport(report, json, items);
    return 0;
  }
  std::unique_ptr<eval::FramePackWriter> pack;
  if (!save_frames.empty()) {
    auto writer = eval::FramePackWriter::Create(save_frames, {{"suite", suite},
                                                              {"split", split},
                                                              {"data", dir->string()},
                                                              {"frames", opt.frames},
                                                              {"model", model_dir}});
    if (!writer.ok()) return fail(writer.status());
    pack = std::move(*writer);
  }
  const double start = NowMs();
  const size_t n = split_items->size();
  std::future<DecodedVideo> next = DecodeAhead(split_items->front(), opt, spec);
  for (size_t i = 0; i < n; ++i) {
    const eval::SynthvidItem& item = (*split_items)[i];
    DecodedVideo video = next.get();
    if (i + 1 < n) next = DecodeAhead((*split_items)[i + 1], opt, spec);
    if (pack) {
      if (Status s = SaveFrames(*pack, item, video); !s.ok()) {
        return fail(Annotate(s, "--save-frames, item " + item.id));
      }
    }
    auto r = EvaluateItem(**eng, item, opt, std::move(video));
    if (!r.ok()) return fail(Annotate(r.status(), "item " + item.id));
    report.Add(std::move(*r));
    if ((i + 1) % 50 == 0 || i + 1 == n) {
      std::fprintf(stderr, "eval: %zu/%zu items, accuracy %.1f%%, %.1f s\n", i + 1, n,
                   100 * report.Accuracy(), (NowMs() - start) / 1000);
    }
  }
  report.SetSeconds((NowMs() - start) / 1000);
  if (pack) {
    if (Status s = pack->Finish(); !s.ok()) return fail(Annotate(s, "--save-frames"));
  }
  PrintReport(report, json, items);
  return 0;
}

}  // namespace framezip::cli
