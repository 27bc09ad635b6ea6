// framezip bench media: what the media stage costs on realistic input.
//  - time to sample 32 frames (uniform, SigLIP 384x384 preprocessing) from a 1-minute and from a
//    30-minute 720p30 H.264 file, and their ratio (target <= 1.5: seeking makes the cost follow
//    the frames sampled, not the length of the video);
//  - frames/s of a full sequential decode of the 1-minute file;
//  - peak RSS while sampling the 30-minute file, above the process baseline (target < 200 MB);
//  - the same 32-frame sampling of the 1-minute file through the server's sandboxed media workers
//    (media/worker/worker_pool.h: a fresh process per request, the frames back through a memfd),
//    alternated with in-process runs, and the workers' overhead over in-process decoding
//    (target <= 10 %).
// The files are generated at bench time with the ffmpeg tool: one minute of testsrc2 encoded
// with libx264 (ultrafast, CRF 30, a keyframe every 2 s: about 5 Mbit/s, like a phone or screen
// recording), and the 30-minute file as that minute stream-copied 30 times (concat demuxer, no
// re-encoding, so it is ready in seconds).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/flags.h"
#include "media/media.h"
#include "media/worker/worker_pool.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

extern char** environ;

namespace framezip::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int Run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool MakeFiles(const fs::path& dir, int long_minutes, fs::path* one, fs::path* longer) {
  *one = dir / "bench_1min_720p.mp4";
  *longer = dir / ("bench_" + std::to_string(long_minutes) + "min_720p.mp4");
  if (!fs::exists(*one)) {
    std::printf("generating %s ...\n", one->c_str());
    std::fflush(stdout);
    if (Run({"ffmpeg",    "-nostdin",   "-v",
             "error",     "-y",         "-f",
             "lavfi",     "-i",         "testsrc2=s=1280x720:r=30:d=60",
             "-c:v",      "libx264",    "-preset",
             "ultrafast", "-crf",       "30",
             "-g",        "60",         "-pix_fmt",
             "yuv420p",   one->string()}) != 0) {
      return false;
    }
  }
  if (!fs::exists(*longer)) {
    std::printf("generating %s ...\n", longer->c_str());
    std::fflush(stdout);
    const fs::path list = dir / "concat.txt";
    {
      std::ofstream out(list);
      for (int i = 0; i < long_minutes; ++i) out << "file '" << one->filename().string() << "'\n";
    }
    if (Run({"ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i",
             list.string(), "-c", "copy", longer->string()}) != 0) {
      return false;
    }
  }
  return true;
}

// kB from a "Name:   123 kB" line of /proc/self/status.
double StatusMiB(const char* name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0) return std::stod(line.substr(std::strlen(name))) / 1024.0;
  }
  return 0;
}

void ResetPeakRss() {
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS (Linux >= 4.0)
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

int RunBenchMedia(const std::vector<std::string>& args) {
  bool json = false;
  std::string dir = (fs::temp_directory_path() / "framezip-bench-media").string();
  int long_minutes = 30;
  int frames = 32;
  int repeats = 3;
  int threads = 0;
  std::string worker;
  FlagSet flags("framezip bench media",
                "Times frame sampling on 1-minute and long 720p H.264 files (generated with ffmpeg "
                "on first use and kept in --dir), full sequential decode, and peak memory.");
  flags.Bool("json", &json, "print one JSON object as the last line");
  flags.String("dir", &dir, "where the generated videos are kept", "DIR");
  flags.Int("long-minutes", &long_minutes, "length of the long video in minutes");
  flags.Int("frames", &frames, "frames to sample");
  flags.Int("repeats", &repeats, "timed runs per figure (the median is reported)");
  flags.Int("threads", &threads, "decoder threads (0: min(cores, 8))");
  flags.String("worker", &worker,
               "framezip-media-worker for the sandboxed runs (default: beside this binary)",
               "FILE");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (long_minutes < 1 || frames < 1 || repeats < 1) {
    std::fprintf(stderr,
                 "framezip bench media: --long-minutes, --frames, --repeats must be >= 1\n");
    return 2;
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::path one, longer;
  if (!MakeFiles(dir, long_minutes, &one, &longer)) {
    std::fprintf(stderr, "framezip bench media: generating the videos with ffmpeg failed\n");
    return 1;
  }

  media::MediaLimits limits;
  limits.decode_threads = threads;
  limits.max_decode_s = 600;
  media::FrameSamplingSpec sampling;
  sampling.num_frames = frames;
  const media::PreprocessSpec siglip;  // 384x384 bicubic, mean/std 0.5 (LLaVA-OneVision)
  media::DecodeOptions options;
  options.known_content_hash = media::ContentHash{};  // hashed once at upload, not per turn

  auto sample = [&](const fs::path& file, media::DecodedMedia* out) -> double {
    const auto start = Clock::now();
    auto r = media::DecodeMedia(
        media::MediaSource::FromFile(file.parent_path(), file.filename().string()), sampling,
        siglip, limits, options);
    const double s = Seconds(start);
    if (!r.ok()) {
      std::fprintf(stderr, "sampling %s failed: %s\n", file.c_str(), MessageOf(r.status()).c_str());
      return -1;
    }
    if (out != nullptr) *out = std::move(*r);
    return s;
  };
  auto median = [&](const fs::path& file, media::DecodedMedia* out) -> double {
    std::vector<double> t;
    for (int i = 0; i < repeats; ++i) {
      const double s = sample(file, i == 0 ? out : nullptr);
      if (s < 0) return -1;
      t.push_back(s);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };

  bench::Machine machine = bench::DetectMachine();
  machine.threads = threads > 0
                        ? threads
                        : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  bench::Report report("media", machine);

  // Memory first, on a fresh peak: everything the 30-minute sampling needs above the baseline.
  const double baseline = StatusMiB("VmRSS:");
  ResetPeakRss();
  media::DecodedMedia long_result;
  if (sample(longer, &long_result) < 0) return 1;
  const double peak = StatusMiB("VmHWM:");

  media::DecodedMedia short_result;
  const double t_short = median(one, &short_result);
  const double t_long = median(longer, nullptr);
  if (t_short < 0 || t_long < 0) return 1;

  const auto decode_start = Clock::now();
  auto decoded = media::DecodeAllFrames(
      media::MediaSource::FromFile(one.parent_path(), one.filename().string()), limits);
  const double decode_s = Seconds(decode_start);
  if (!decoded.ok()) {
    std::fprintf(stderr, "sequential decode failed: %s\n", MessageOf(decoded.status()).c_str());
    return 1;
  }

  std::printf("1-min file: %.1f s, %lld frames decoded for %d samples, %d seeks\n",
              short_result.info.duration_s,
              static_cast<long long>(short_result.stats.frames_decoded), frames,
              short_result.stats.seeks);
  std::printf("%d-min file: %.1f s, %lld frames decoded for %d samples, %d seeks\n", long_minutes,
              long_result.info.duration_s, static_cast<long long>(long_result.stats.frames_decoded),
              frames, long_result.stats.seeks);
  const std::string long_name =
      "sample_" + std::to_string(frames) + "_frames_" + std::to_string(long_minutes) + "min_720p_s";
  report.Add({"sample_" + std::to_string(frames) + "_frames_1min_720p_s", t_short, "s", {}, true});
  report.Add({long_name, t_long, "s", {}, true});
  report.Add({"sample_time_ratio_long_vs_1min", t_long / t_short, "x", 1.5, true});
  report.Add({"sequential_decode_720p_fps",
              static_cast<double>(*decoded) / decode_s,
              "frames/s",
              {},
              false});
  report.Add({"peak_rss_above_baseline_long_MB", (peak - baseline) * 1.048576, "MB", 200.0, true});
  report.Add({"frames_decoded_for_long_sample",
              static_cast<double>(long_result.stats.frames_decoded),
              "frames",
              {},
              true});

  // Sandboxed workers vs this process, alternated (same file, same sampling, same threads).
  media::worker::WorkerPoolOptions pool_options;
  pool_options.worker_binary =
      worker.empty() ? fs::read_symlink("/proc/self/exe", ec).parent_path() / "framezip-media-worker"
                     : fs::path(worker);
  pool_options.max_workers = 1;
  auto pool = media::worker::WorkerPool::Start(pool_options);
  if (!pool.ok()) {
    std::fprintf(stderr, "framezip bench media: %s\n", MessageOf(pool.status()).c_str());
    return 1;
  }
  const media::MediaSource one_source =
      media::MediaSource::FromFile(one.parent_path(), one.filename().string());
  std::vector<double> t_here, t_worker;
  for (int i = 0; i < std::max(repeats, 5); ++i) {
    const auto w0 = Clock::now();
    auto w = (*pool)->Decode(one_source, sampling, siglip, limits, options);
    const double tw = Seconds(w0);
    const auto h0 = Clock::now();
    auto h = media::DecodeMedia(one_source, sampling, siglip, limits, options);
    const double th = Seconds(h0);
    if (!w.ok() || !h.ok()) {
      std::fprintf(stderr, "sampling through the workers failed: %s\n",
                   MessageOf(w.ok() ? h.status() : w.status()).c_str());
      return 1;
    }
    if (w->frames.data != h->frames.data) {
      std::fprintf(stderr, "the workers' frames differ from the in-process frames\n");
      return 1;
    }
    t_worker.push_back(tw);
    t_here.push_back(th);
    // Let the pool start the next worker before the next timed request, as a server between
    // requests would.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::sort(t_here.begin(), t_here.end());
  std::sort(t_worker.begin(), t_worker.end());
  const double med_here = t_here[t_here.size() / 2];
  const double med_worker = t_worker[t_worker.size() / 2];
  std::printf("1-min file, %d frames: %.3f s in process, %.3f s in a sandboxed worker\n", frames,
              med_here, med_worker);
  report.Add({"sample_" + std::to_string(frames) + "_frames_1min_720p_in_process_s", med_here,
              "s", {}, true});
  report.Add({"sample_" + std::to_string(frames) + "_frames_1min_720p_worker_s", med_worker,
              "s", {}, true});
  report.Add({"media_worker_overhead_fraction", med_worker / med_here - 1.0, "fraction", 0.10,
              true});
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
