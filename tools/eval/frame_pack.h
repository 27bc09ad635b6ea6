// A frame pack: the model-ready frames of an eval split's items, written by `framezip eval
// --save-frames` (which has the media stage) and read by framezip-eval-frames (which has only the
// engine). It lets the GPU check evaluate the shipped model on a machine without FFmpeg or OpenCV
// and still feed the engine exactly the floats `framezip eval` fed it.
//
// The media stage's output takes at most 256 distinct float values per channel (it normalises a
// u8 image: docs/architecture.md §3), so a frame is stored as one byte per value, a code into
// that channel's table of floats (kept as their bit patterns). Reading expands the codes back to
// the identical floats; a writer that meets a 257th value in a channel refuses rather than round.
//
// Layout (little-endian):
//   "FZPACK01"                 8 bytes
//   codes                      each item's num_frames × C × H × W bytes, channel-first per frame
//   trailer                    JSON: {"version": 1, "channels", "height", "width",
//                                     "values": [[u32 float bits, ...] per channel],
//                                     "source": {...}, "items": [{"id", "task", "question",
//                                     "answer", "num_frames", "offset"}, ...]}
//   trailer length             u64
//   "FZPACK01"                 8 bytes
// The trailer comes last so frames stream to disk as they are decoded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace framezip::eval {

// What an item needs to be asked and scored without its JSONL line.
struct FramePackItem {
  std::string id;
  std::string task;
  std::string question;
  std::string answer;
  int num_frames = 0;
};

struct FrameGeometry {
  int channels = 0;
  int height = 0;
  int width = 0;
  int64_t frame_values() const { return int64_t{channels} * height * width; }
};

class FramePackWriter {
 public:
  // Opens `path` for writing (truncating it). `source` is stored as the trailer's "source" (what
  // split and model the frames came from).
  static StatusOr<std::unique_ptr<FramePackWriter>> Create(const std::filesystem::path& path,
                                                           nlohmann::json source);

  // Appends one item: `pixels` holds item.num_frames frames of `geometry`, channel-first. Every
  // item of a pack has the same geometry. INVALID_ARGUMENT for a size or geometry mismatch or a
  // channel with more than 256 distinct values (nothing of the item is written then).
  Status Add(const FramePackItem& item, const FrameGeometry& geometry,
             std::span<const float> pixels);

  // Writes the trailer and closes the file; the pack is readable only after this.
  Status Finish();

 private:
  FramePackWriter() = default;

  std::filesystem::path path_;
  std::ofstream out_;
  nlohmann::json source_;
  FrameGeometry geometry_;
  std::vector<std::vector<uint32_t>> values_;  // per channel: code -> float bits
  std::vector<std::unordered_map<uint32_t, uint8_t>> codes_;
  nlohmann::json items_ = nlohmann::json::array();
  uint64_t offset_ = 8;
  bool finished_ = false;
};

class FramePack {
 public:
  // Reads and checks the trailer. NOT_FOUND for a missing file; DATA_LOSS naming the file for a
  // bad magic, a truncated file, a malformed trailer, or items outside the code area.
  static StatusOr<FramePack> Open(const std::filesystem::path& path);

  const std::vector<FramePackItem>& items() const { return items_; }
  const FrameGeometry& geometry() const { return geometry_; }
  const nlohmann::json& source() const { return source_; }

  // Item `index`'s frames as floats, channel-first: num_frames × C × H × W of them into `out`.
  // DATA_LOSS for a code outside its channel's table or a short read.
  Status ReadPixels(size_t index, std::span<float> out) const;

 private:
  std::filesystem::path path_;
  FrameGeometry geometry_;
  std::vector<std::vector<float>> values_;  // per channel: code -> float
  std::vector<FramePackItem> items_;
  std::vector<uint64_t> offsets_;
  nlohmann::json source_;
};

}  // namespace framezip::eval
