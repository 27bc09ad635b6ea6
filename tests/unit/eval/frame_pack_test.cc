// The frame pack carries normalised u8 frames bit for bit and refuses what it cannot carry or
// read: fresh random frames each run (TestSeed), the floats made as the media stage makes them.
#include "tools/eval/frame_pack.h"

#include <bit>
#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <vector>

#include "tests/testing/random.h"
#include "tests/testing/temp_dir.h"

namespace framezip::eval {
namespace {

constexpr FrameGeometry kGeometry{3, 5, 7};

// Frames whose values are (u8 / 255 - mean) / std, as the media stage writes them.
std::vector<float> NormalisedFrames(std::mt19937_64& rng, int frames) {
  std::uniform_int_distribution<int> byte(0, 255);
  const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  const float inv_std[3] = {1 / 0.26862954f, 1 / 0.26130258f, 1 / 0.27577711f};
  std::vector<float> v(static_cast<size_t>(frames * kGeometry.frame_values()));
  const int64_t plane = int64_t{kGeometry.height} * kGeometry.width;
  for (size_t i = 0; i < v.size(); ++i) {
    const int c = static_cast<int>((static_cast<int64_t>(i) / plane) % 3);
    v[i] = (static_cast<float>(byte(rng)) * (1.0f / 255.0f) - mean[c]) * inv_std[c];
  }
  return v;
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

TEST_CASE("a frame pack returns every item's frames bit for bit", "[unit][eval]") {
  const uint64_t seed = testing::TestSeed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  const auto path = dir / "split.frames";
  const std::vector<FramePackItem> items = {{"a", "color", "What colour?", "red", 2},
                                            {"b", "count", "How many?", "3", 5},
                                            {"c", "order", "Which first?", "the ball", 1}};
  std::vector<std::vector<float>> frames;
  {
    auto writer = FramePackWriter::Create(path, {{"split", "test"}});
    REQUIRE(writer.ok());
    for (const FramePackItem& item : items) {
      frames.push_back(NormalisedFrames(rng, item.num_frames));
      REQUIRE((*writer)->Add(item, kGeometry, frames.back()).ok());
    }
    REQUIRE((*writer)->Finish().ok());
  }
  auto pack = FramePack::Open(path);
  REQUIRE(pack.ok());
  CHECK(pack->source()["split"] == "test");
  CHECK(pack->geometry().channels == 3);
  CHECK(pack->geometry().height == 5);
  CHECK(pack->geometry().width == 7);
  REQUIRE(pack->items().size() == items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    CAPTURE(i);
    CHECK(pack->items()[i].id == items[i].id);
    CHECK(pack->items()[i].task == items[i].task);
    CHECK(pack->items()[i].question == items[i].question);
    CHECK(pack->items()[i].answer == items[i].answer);
    CHECK(pack->items()[i].num_frames == items[i].num_frames);
    std::vector<float> got(frames[i].size());
    REQUIRE(pack->ReadPixels(i, got).ok());
    CHECK(Bits(got) == Bits(frames[i]));
  }
  std::vector<float> wrong_size(3);
  CHECK(pack->ReadPixels(0, wrong_size).code() == absl::StatusCode::kInvalidArgument);
  CHECK(pack->ReadPixels(3, wrong_size).code() == absl::StatusCode::kOutOfRange);
}

TEST_CASE("a frame pack refuses frames it could not return exactly", "[unit][eval]") {
  testing::TempDir dir;
  auto writer = FramePackWriter::Create(dir / "x.frames", nullptr);
  REQUIRE(writer.ok());
  // 257 distinct values in channel 0 of one frame: more than a u8 image can produce.
  const FrameGeometry g{1, 1, 257};
  std::vector<float> ramp(257);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i) / 300.f;
  const Status s = (*writer)->Add({"ramp", "t", "q", "a", 1}, g, ramp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(s), Catch::Contains("ramp") && Catch::Contains("256"));
  // A size that does not match the frame count, and a second item of another geometry.
  CHECK((*writer)->Add({"short", "t", "q", "a", 2}, kGeometry, std::vector<float>(10)).code() ==
        absl::StatusCode::kInvalidArgument);
  REQUIRE((*writer)->Add({"ok", "t", "q", "a", 1}, {1, 1, 2}, std::vector<float>{0.f, 1.f}).ok());
  CHECK(
      (*writer)->Add({"other", "t", "q", "a", 1}, {1, 2, 1}, std::vector<float>{0.f, 1.f}).code() ==
      absl::StatusCode::kInvalidArgument);
  REQUIRE((*writer)->Finish().ok());
  // The refused items left nothing: the pack holds the one accepted item.
  auto pack = FramePack::Open(dir / "x.frames");
  REQUIRE(pack.ok());
  REQUIRE(pack->items().size() == 1);
  std::vector<float> got(2);
  REQUIRE(pack->ReadPixels(0, got).ok());
  CHECK(got == std::vector<float>{0.f, 1.f});
}

TEST_CASE("opening a damaged frame pack names the file and the damage", "[unit][eval]") {
  testing::TempDir dir;
  const auto path = dir / "good.frames";
  {
    auto writer = FramePackWriter::Create(path, nullptr);
    REQUIRE(writer.ok());
    REQUIRE(
        (*writer)->Add({"a", "t", "q", "x", 1}, {1, 2, 2}, std::vector<float>{1, 2, 3, 4}).ok());
    REQUIRE((*writer)->Finish().ok());
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return dir / name;
  };
  CHECK(FramePack::Open(dir / "missing.frames").status().code() == absl::StatusCode::kNotFound);

  const Status truncated =
      FramePack::Open(write("cut.frames", bytes.substr(0, bytes.size() - 3))).status();
  CHECK(truncated.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(MessageOf(truncated), Catch::Contains("cut.frames"));

  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  CHECK(FramePack::Open(write("magic.frames", bad_magic)).status().code() ==
        absl::StatusCode::kDataLoss);

  // An item whose frames would run past the code area.
  std::string moved = bytes;
  const auto at = moved.find("\"num_frames\":1");
  REQUIRE(at != std::string::npos);
  moved.replace(at, 14, "\"num_frames\":9");
  const Status outside = FramePack::Open(write("outside.frames", moved)).status();
  CHECK(outside.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(MessageOf(outside), Catch::Contains("item a"));

  // The same pack with one edit of its trailer (and the trailer's length field to match).
  const size_t codes_end = 8 + 4;  // the magic, then one 1x2x2 frame of codes
  const auto with_trailer_edit = [&](const std::string& from, const std::string& to) {
    std::string trailer = bytes.substr(codes_end, bytes.size() - 16 - codes_end);
    const auto at = trailer.find(from);
    REQUIRE(at != std::string::npos);
    trailer.replace(at, from.size(), to);
    std::string edited = bytes.substr(0, codes_end) + trailer;
    for (int i = 0; i < 8; ++i) {
      edited.push_back(static_cast<char>((trailer.size() >> (8 * i)) & 0xff));
    }
    return edited + bytes.substr(bytes.size() - 8);
  };
  // Frame sizes no media stage makes (and whose products could overflow) are refused.
  const Status too_big =
      FramePack::Open(write("huge.frames", with_trailer_edit("\"height\":2", "\"height\":99999")))
          .status();
  CHECK(too_big.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(MessageOf(too_big), Catch::Contains("geometry"));
  // A pack whose trailer lists no items has nothing to evaluate.
  const auto items_at = bytes.find("\"items\":[");
  REQUIRE(items_at != std::string::npos);
  const auto items_end = bytes.find("],\"source\"", items_at);  // the trailer's keys are sorted
  REQUIRE(items_end != std::string::npos);
  const std::string item_list = bytes.substr(items_at, items_end + 1 - items_at);
  const Status no_items =
      FramePack::Open(write("none.frames", with_trailer_edit(item_list, "\"items\":[]"))).status();
  CHECK(no_items.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(MessageOf(no_items), Catch::Contains("no items"));

  // A code past its channel's table.
  std::string code = bytes;
  code[8] = static_cast<char>(200);
  auto pack = FramePack::Open(write("code.frames", code));
  REQUIRE(pack.ok());
  std::vector<float> got(4);
  CHECK(pack->ReadPixels(0, got).code() == absl::StatusCode::kDataLoss);

  // Finishing a pack with no items is refused: nothing could be read from it.
  auto empty = FramePackWriter::Create(dir / "empty.frames", nullptr);
  REQUIRE(empty.ok());
  CHECK((*empty)->Finish().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace framezip::eval
