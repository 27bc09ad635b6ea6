// framezip run: one chat turn in-process — decode the video/image (media/), load the model
// (engine::runtime::Engine), prefill, and stream the answer to stdout. With --json the last line
// is one JSON object with the answer and the turn's stats.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/runtime/engine.h"
#include "media/media.h"
#include "server/preprocess_spec.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"
#include "tools/framezip/video_frames.h"

namespace framezip::cli {
namespace {

std::atomic<bool> g_cancel{false};
void OnSigint(int) { g_cancel.store(true); }

}  // namespace

int RunRun(const std::vector<std::string>& args) {
  std::string model_dir, video, image, prompt, policy = "none", kv_format = "f16", device = "cpu",
                                               weight_format = "bf16",
                                               vision_weight_format = "bf16";
  int max_tokens = 128, frames = 32, threads = 0;  // 32 frames: LLaVA-OneVision's default
  bool json = false, sample = false;
  double temperature = 1.0, top_p = 1.0, repetition_penalty = 1.0;
  int top_k = 0;
  int64_t seed = 0;
  FlagSet flags("framezip run",
                "Runs one chat turn in-process on a video or image and streams the answer.");
  flags.String("model", &model_dir, "model directory (Hugging Face LLaVA-OneVision layout)", "DIR");
  flags.String("video", &video, "video file", "FILE");
  flags.String("image", &image, "image file (base-resolution path, 730 visual tokens)", "FILE");
  flags.String("prompt", &prompt, "the question", "TEXT");
  flags.Int("max-tokens", &max_tokens, "tokens to generate at most");
  flags.Int("frames", &frames, "video frames sampled uniformly");
  flags.Int("threads", &threads, "compute threads (0 = all CPUs)");
  flags.String("policy", &policy,
               "KV compression policy, NAME[:KEY=VALUE,...] (options: docs/api.md)", "P");
  flags.String("kv-format", &kv_format, "KV page format: f16 or f32", "F");
  flags.String("device", &device, "where the engine runs: cpu, cuda or cuda:N", "DEVICE");
  flags.String("weight-format", &weight_format,
               "decoder projection weights: bf16 (as stored) or int8 (quantised at load, CPU)",
               "F");
  flags.String("vision-weight-format", &vision_weight_format,
               "vision tower projection weights: bf16 (as stored) or int8 (quantised at load, CPU)",
               "F");
  flags.Bool("sample", &sample, "sample instead of greedy decoding");
  flags.Double("temperature", &temperature, "sampling temperature");
  flags.Int("top-k", &top_k, "sampling top-k (0 = off)");
  flags.Double("top-p", &top_p, "sampling top-p (1 = off)");
  flags.Double("repetition-penalty", &repetition_penalty, "HF repetition penalty (1 = off)");
  flags.Int("seed", &seed, "sampling seed");
  flags.Bool("json", &json, "print one JSON object with the answer and stats as the last line");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (model_dir.empty() || prompt.empty() || (!video.empty() && !image.empty())) {
    std::fprintf(stderr,
                 "framezip run: --model and --prompt are required, and at most one of "
                 "--video/--image\n");
    return 2;
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip run: %s\n", MessageOf(s).c_str());
    return 1;
  };
  engine::runtime::EngineOptions options;
  options.threads = threads;
  options.default_policy = policy;
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
  auto eng = engine::runtime::Engine::Load(model_dir, options);
  if (!eng.ok()) return fail(Annotate(eng.status(), "loading the model"));

  engine::runtime::Message message;
  message.text = prompt;
  if (!video.empty()) {
    const auto spec = server::PreprocessSpecFor((*eng)->preprocessor(), (*eng)->image_size());
    auto pixels = DecodeVideoFrames(video, frames, spec);
    if (!pixels.ok()) return fail(Annotate(pixels.status(), "decoding the video"));
    engine::runtime::VisualInput v;
    v.kind = engine::runtime::VisualInput::Kind::kVideo;
    v.pixels = *pixels;
    message.visuals.push_back(v);
  } else if (!image.empty()) {
    // The prompt's only image: anyres tiles, as the model's processor cuts them.
    const auto spec = server::ImagePreprocessSpecFor((*eng)->preprocessor(), (*eng)->config(),
                                                     /*sole_image=*/true);
    auto input = DecodeImageInput(image, spec);
    if (!input.ok()) return fail(Annotate(input.status(), "decoding the image"));
    message.visuals.push_back(*std::move(input));
  }
  auto conv = (*eng)->NewConversation();
  if (!conv.ok()) return fail(conv.status());
  engine::runtime::TurnOptions turn;
  turn.sampling.max_new_tokens = max_tokens;
  turn.sampling.do_sample = sample;
  turn.sampling.temperature = static_cast<float>(temperature);
  turn.sampling.top_k = top_k;
  turn.sampling.top_p = static_cast<float>(top_p);
  turn.sampling.repetition_penalty = static_cast<float>(repetition_penalty);
  turn.sampling.seed = static_cast<uint64_t>(seed);

  std::signal(SIGINT, OnSigint);
  auto result = (*eng)->RunTurn(
      **conv, std::span<const engine::runtime::Message>(&message, 1), turn,
      [](std::string_view delta) {
        std::fwrite(delta.data(), 1, delta.size(), stdout);
        std::fflush(stdout);
      },
      &g_cancel);
  std::printf("\n");
  std::fflush(stdout);
  if (!result.ok()) return fail(result.status());
  const auto& st = result->stats;
  std::fprintf(stderr,
               "[%lld prompt tokens (%lld visual), vision %.0f ms, prefill %.0f ms, TTFT %.0f ms, "
               "%lld tokens at %.2f tok/s, KV %.1f MiB, stop: %s]\n",
               static_cast<long long>(st.prompt_tokens), static_cast<long long>(st.visual_tokens),
               st.vision_ms, st.prefill_ms, st.ttft_ms, static_cast<long long>(st.generated_tokens),
               st.decode_tokens_per_s, st.kv_bytes / 1048576.0,
               std::string(engine::llm::StopReasonName(st.stop_reason)).c_str());
  if (json) {
    nlohmann::json j = {
        {"text", result->text},
        {"tokens", result->token_ids},
        {"policy", st.policy},
        {"stats",
         {{"prompt_tokens", st.prompt_tokens},
          {"prefilled_tokens", st.prefilled_tokens},
          {"visual_tokens", st.visual_tokens},
          {"generated_tokens", st.generated_tokens},
          {"vision_ms", st.vision_ms},
          {"prefill_ms", st.prefill_ms},
          {"ttft_ms", st.ttft_ms},
          {"decode_tokens_per_s", st.decode_tokens_per_s},
          {"kv_bytes", st.kv_bytes},
          {"stop_reason", std::string(engine::llm::StopReasonName(st.stop_reason))}}}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace framezip::cli
