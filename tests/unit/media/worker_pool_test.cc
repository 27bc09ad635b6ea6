// The sandboxed media workers (media/worker/worker_pool.h): they decode exactly what the media
// stage decodes in process, pass its errors through, run under their limits and syscall filter,
// and a worker that crashes, hangs, spins, hogs memory or lies fails only its own request.
#include "media/worker/worker_pool.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "media/media.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media::worker {
namespace {

using testing::Generate;
using testing::RawPixels;
using testing::ReadFileBytes;

WorkerPoolOptions Options(const char* binary = "bin/framezip-media-worker") {
  WorkerPoolOptions options;
  options.worker_binary = framezip::testing::BinaryDir() / binary;
  options.max_workers = 2;
  options.memory_bytes = 1ull << 30;
  options.cpu_seconds = 20;
  options.reply_grace = std::chrono::milliseconds(500);
  return options;
}

std::unique_ptr<WorkerPool> StartPool(const WorkerPoolOptions& options) {
  StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  INFO((pool.ok() ? "" : MessageOf(pool.status())));
  REQUIRE(pool.ok());
  return *std::move(pool);
}

std::vector<uint8_t> Fault(const std::string& mode) {
  const std::string text = "FZFAULT:" + mode + "\n";
  return {text.begin(), text.end()};
}

TEST_CASE("media workers decode exactly what the media stage decodes in process",
          "[unit][media]") {
  auto pool = StartPool(Options());
  const auto video = ReadFileBytes(Generate(
      "pool.mp4", {"-f", "lavfi", "-i", "testsrc2=s=96x64:r=10:d=2", "-c:v", "libx264", "-pix_fmt",
                   "yuv420p"}));
  const auto image = ReadFileBytes(Generate(
      "pool.png", {"-f", "lavfi", "-i", "testsrc2=s=40x30:r=1:d=1", "-frames:v", "1"}));
  FrameSamplingSpec sampling;
  sampling.num_frames = 6;
  PreprocessSpec siglip;  // 384x384 bicubic, the shipped model's
  for (const auto* bytes : {&video, &image}) {
    const MediaSource source = MediaSource::FromBytes(*bytes);
    for (const PreprocessSpec& spec : {RawPixels(), siglip}) {
      StatusOr<DecodedMedia> here = DecodeMedia(source, sampling, spec, MediaLimits{});
      StatusOr<DecodedMedia> there = pool->Decode(source, sampling, spec, MediaLimits{});
      REQUIRE(here.ok());
      INFO((there.ok() ? "" : MessageOf(there.status())));
      REQUIRE(there.ok());
      CHECK(there->frames.num_frames == here->frames.num_frames);
      CHECK(there->frames.height == here->frames.height);
      CHECK(there->frames.width == here->frames.width);
      CHECK(there->frames.data == here->frames.data);  // bit for bit
      CHECK(there->timestamps_s == here->timestamps_s);
      CHECK(there->targets_s == here->targets_s);
      CHECK(there->info.content_hash == here->info.content_hash);
      CHECK(there->info.codec == here->info.codec);
      CHECK(there->stats.frames_decoded == here->stats.frames_decoded);
    }
    StatusOr<MediaInfo> probed_here = ProbeMedia(source, MediaLimits{});
    StatusOr<MediaInfo> probed_there = pool->Probe(source, MediaLimits{});
    REQUIRE(probed_there.ok());
    CHECK(probed_there->width == probed_here->width);
    CHECK(probed_there->duration_s == probed_here->duration_s);
    CHECK(probed_there->mime_type == probed_here->mime_type);
    StatusOr<DecodedMedia> verified = pool->Verify(source, sampling, MediaLimits{});
    REQUIRE(verified.ok());
    CHECK(verified->frames.data.empty());
    CHECK(verified->timestamps_s == DecodeMedia(source, sampling, RawPixels(), {})->timestamps_s);
  }
  SECTION("from a file under a root and from a descriptor") {
    const auto path = Generate("pool_file.webm", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1",
                                                  "-c:v", "libvpx-vp9", "-deadline", "realtime"});
    StatusOr<DecodedMedia> from_file = pool->Decode(
        MediaSource::FromFile(path.parent_path(), path.filename().string()), sampling, siglip, {});
    REQUIRE(from_file.ok());
    CHECK(from_file->frames.data ==
          DecodeMedia(MediaSource::FromBytes(ReadFileBytes(path)), sampling, siglip, {})
              ->frames.data);
    // Nothing outside the root, even through the pool.
    StatusOr<DecodedMedia> escape =
        pool->Decode(MediaSource::FromFile(path.parent_path(), "../../etc/passwd"), sampling,
                     siglip, {});
    CHECK(escape.status().code() == absl::StatusCode::kPermissionDenied);
  }
  // Every request ran in a fresh process.
  CHECK(pool->stats().started >= pool->stats().requests);
}

TEST_CASE("a media worker's errors come back as the media stage's", "[unit][media]") {
  auto pool = StartPool(Options());
  const std::vector<uint8_t> junk(4096, 0x5a);
  const MediaSource source = MediaSource::FromBytes(junk);
  StatusOr<MediaInfo> here = ProbeMedia(source, MediaLimits{});
  StatusOr<MediaInfo> there = pool->Probe(source, MediaLimits{});
  REQUIRE_FALSE(here.ok());
  CHECK(there.status() == here.status());
  MediaLimits small;
  small.max_bytes = 100;
  CHECK(pool->Probe(source, small).status().code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("a worker that crashes, hangs, spins, hogs memory or lies fails only its request",
          "[unit][media]") {
  WorkerPoolOptions options = Options("tests/media_fault_worker");
  options.cpu_seconds = 1;
  options.memory_bytes = 512ull << 20;
  auto pool = StartPool(options);
  const auto video = ReadFileBytes(Generate(
      "fault_ok.mp4", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-c:v", "libx264"}));
  MediaLimits limits;
  limits.max_decode_s = 1.0;
  FrameSamplingSpec sampling;
  sampling.num_frames = 3;
  auto decode = [&](const std::vector<uint8_t>& bytes) {
    return pool->Decode(MediaSource::FromBytes(bytes), sampling, RawPixels(), limits);
  };
  auto still_serves = [&] {
    StatusOr<DecodedMedia> ok = decode(video);
    INFO((ok.ok() ? "" : MessageOf(ok.status())));
    CHECK(ok.ok());
  };
  still_serves();

  SECTION("crash") {
    const Status s = decode(Fault("crash")).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(s), Catch::Contains("crashed") && Catch::Contains("SIGSEGV"));
    CHECK(pool->stats().crashes == 1);
  }
  SECTION("hang") {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = decode(Fault("hang")).status();
    CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CHECK(pool->stats().timeouts == 1);
  }
  SECTION("spin past the CPU limit") {
    limits.max_decode_s = 30;  // the CPU limit (1 s) ends it first
    const Status s = decode(Fault("spin")).status();
    CHECK(s.code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(MessageOf(s), Catch::Contains("CPU-time limit"));
  }
  SECTION("allocate past the memory limit") {
    if (!pool->sandbox().memory_limit) {
      WARN("SKIPPED: no address-space limit in this (sanitizer) build");
    } else {
      const Status s = decode(Fault("hog")).status();
      CHECK(s.code() == absl::StatusCode::kResourceExhausted);
      CHECK_THAT(MessageOf(s), Catch::Contains("allocation refused"));
    }
  }
  SECTION("a malformed reply") {
    const Status s = decode(Fault("garbage")).status();
    CHECK(s.code() == absl::StatusCode::kInternal);
    CHECK_THAT(MessageOf(s), Catch::Contains("malformed reply"));
  }
  SECTION("frames claimed but not sent") {
    const Status s = decode(Fault("frames")).status();
    CHECK(s.code() == absl::StatusCode::kInternal);
  }
  SECTION("cancelled while it hangs") {
    std::atomic<bool> cancel{false};
    limits.max_decode_s = 60;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      cancel = true;
    });
    DecodeOptions o;
    o.cancel = &cancel;
    const auto fault = Fault("hang");
    const Status s =
        pool->Decode(MediaSource::FromBytes(fault), sampling, RawPixels(), limits, o).status();
    canceller.join();
    CHECK(s.code() == absl::StatusCode::kCancelled);
  }
  still_serves();
}

TEST_CASE("media workers run under their limits and syscall filter", "[unit][media]") {
  auto pool = StartPool(Options("tests/media_fault_worker"));
  CHECK(pool->sandbox().seccomp);
  CHECK(pool->sandbox().cpu_limit);
  const auto fault = Fault("sandbox");
  const Status s = pool->Probe(MediaSource::FromBytes(fault), MediaLimits{}).status();
  REQUIRE(s.code() == absl::StatusCode::kFailedPrecondition);
  // What an exploited decoder would try first: each one refused by the filter.
  CHECK(MessageOf(s) ==
        "socket=EPERM open=EPERM creat=EPERM fork=EPERM exec=EPERM kill=EPERM");
}

// The processes whose parent is `parent` (from /proc/PID/stat's fourth field).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // it ended meanwhile
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') children.push_back(std::stoi(name));
  }
  return children;
}

TEST_CASE("workers are forked from one zygote, and a zygote that dies is replaced",
          "[unit][media]") {
  auto pool = StartPool(Options());
  const auto video = ReadFileBytes(Generate(
      "zygote.mp4", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-c:v", "libx264"}));
  FrameSamplingSpec sampling;
  sampling.num_frames = 2;
  auto decode = [&] {
    return pool->Decode(MediaSource::FromBytes(video), sampling, RawPixels(), MediaLimits{});
  };
  for (int i = 0; i < 3; ++i) REQUIRE(decode().ok());
  CHECK(pool->stats().zygotes_started == 1);
  CHECK(pool->stats().started >= 4);  // the first worker, and one for each request

  // The zygote is this process's one child; the workers waiting for requests are its children.
  const std::vector<pid_t> zygotes = ChildrenOf(getpid());
  REQUIRE(zygotes.size() == 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ChildrenOf(zygotes[0]).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::vector<pid_t> idle_workers = ChildrenOf(zygotes[0]);
  CHECK_FALSE(idle_workers.empty());

  // Killed, it takes its idle workers with it; the next request gets a fresh zygote's worker.
  REQUIRE(::kill(zygotes[0], SIGKILL) == 0);
  auto gone = [](pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    return !std::getline(stat, line) || line.find(") Z") != std::string::npos;
  };
  for (pid_t pid : idle_workers) {
    while (!gone(pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(gone(pid));
  }
  StatusOr<DecodedMedia> after = decode();
  INFO((after.ok() ? "" : MessageOf(after.status())));
  CHECK(after.ok());
  CHECK(pool->stats().zygotes_started == 2);
  CHECK(pool->stats().crashes == 0);
}

TEST_CASE("a worker binary that cannot start is a clear error", "[unit][media]") {
  WorkerPoolOptions options = Options();
  options.worker_binary = "/nonexistent/framezip-media-worker";
  StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  REQUIRE_FALSE(pool.ok());
  CHECK(pool.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(MessageOf(pool.status()), Catch::Contains("/nonexistent/framezip-media-worker"));
}

}  // namespace
}  // namespace framezip::media::worker
