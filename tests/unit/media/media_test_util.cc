#include "tests/unit/media/media_test_util.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>

#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::media::testing {

const std::filesystem::path& MediaDir() {
  static auto* dir = new framezip::testing::TempDir();  // leaked on purpose: lives to exit
  static const auto path = dir->path();
  return path;
}

std::filesystem::path Generate(const std::string& name, const std::vector<std::string>& args) {
  static std::mutex mu;
  static std::map<std::string, bool> done;
  std::lock_guard<std::mutex> lock(mu);
  const auto out = MediaDir() / name;
  if (done[name]) return out;
  std::vector<std::string> argv = {"ffmpeg", "-nostdin", "-v", "error", "-y"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(out.string());
  const int rc = framezip::testing::RunCommand(argv, MediaDir() / (name + ".log"));
  INFO("ffmpeg failed making " << name << " (log: " << (MediaDir() / (name + ".log")) << ")");
  REQUIRE(rc == 0);
  done[name] = true;
  return out;
}

std::vector<uint8_t> ReadFileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteFileBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

PreprocessSpec RawPixels() {
  PreprocessSpec spec;
  spec.resize = ResizeMode::kNone;
  spec.rescale_factor = 1.0;
  spec.mean = {0, 0, 0};
  spec.std = {1, 1, 1};
  return spec;
}

std::string ColourCodedSource(int width, int height, int rate, double seconds) {
  // geq evaluates per pixel with N = frame number; commas inside expressions are escaped.
  return "color=c=black:s=" + std::to_string(width) + "x" + std::to_string(height) +
         ":r=" + std::to_string(rate) + ":d=" + std::to_string(seconds) +
         ",format=gbrp,geq=r='30+mod(N*37\\,196)':g='30+mod(N*91\\,196)':b='30+mod(N*53\\,196)'";
}

std::array<int, 3> CodeColor(int64_t n) {
  return {static_cast<int>(30 + (n * 37) % 196), static_cast<int>(30 + (n * 91) % 196),
          static_cast<int>(30 + (n * 53) % 196)};
}

std::array<double, 3> MeanColour(const FrameBatch& frames, int i) {
  std::array<double, 3> mean{};
  const size_t plane = static_cast<size_t>(frames.height) * frames.width;
  const float* f = frames.Frame(i);
  for (int c = 0; c < 3; ++c) {
    double sum = 0;
    for (size_t p = 0; p < plane; ++p) sum += f[c * plane + p];
    mean[c] = sum / static_cast<double>(plane);
  }
  return mean;
}

std::pair<int64_t, double> NearestCode(const std::array<double, 3>& rgb, int64_t max_frames) {
  int64_t best = -1;
  double best_d = 1e9;
  for (int64_t n = 0; n < max_frames; ++n) {
    const auto c = CodeColor(n);
    double d = 0;
    for (int k = 0; k < 3; ++k) d = std::max(d, std::fabs(rgb[k] - c[k]));
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  return {best, best_d};
}

}  // namespace framezip::media::testing
