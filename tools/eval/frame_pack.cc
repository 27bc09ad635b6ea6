#include "tools/eval/frame_pack.h"

#include <bit>
#include <cstring>
#include <system_error>

namespace framezip::eval {
namespace {

constexpr char kMagic[8] = {'F', 'Z', 'P', 'A', 'C', 'K', '0', '1'};
constexpr int kVersion = 1;
constexpr int kMaxCodes = 256;

void PutU64(std::ofstream& out, uint64_t v) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.write(bytes, 8);
}

uint64_t GetU64(const char* bytes) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return v;
}

bool SameGeometry(const FrameGeometry& a, const FrameGeometry& b) {
  return a.channels == b.channels && a.height == b.height && a.width == b.width;
}

}  // namespace

StatusOr<std::unique_ptr<FramePackWriter>> FramePackWriter::Create(
    const std::filesystem::path& path, nlohmann::json source) {
  std::unique_ptr<FramePackWriter> w(new FramePackWriter());
  w->path_ = path;
  w->source_ = std::move(source);
  w->out_.open(path, std::ios::binary | std::ios::trunc);
  if (!w->out_) {
    return InvalidArgumentError("frame pack {}: cannot open for writing: {}", path.string(),
                                std::strerror(errno));
  }
  w->out_.write(kMagic, sizeof kMagic);
  return w;
}

Status FramePackWriter::Add(const FramePackItem& item, const FrameGeometry& geometry,
                            std::span<const float> pixels) {
  if (finished_) return FailedPreconditionError("frame pack {}: already finished", path_.string());
  if (geometry.channels <= 0 || geometry.height <= 0 || geometry.width <= 0 ||
      item.num_frames <= 0 ||
      static_cast<int64_t>(pixels.size()) != item.num_frames * geometry.frame_values()) {
    return InvalidArgumentError("frame pack {}: item {}: {} values for {} frames of {}x{}x{}",
                                path_.string(), item.id, pixels.size(), item.num_frames,
                                geometry.channels, geometry.height, geometry.width);
  }
  if (!items_.empty() && !SameGeometry(geometry, geometry_)) {
    return InvalidArgumentError("frame pack {}: item {} is {}x{}x{}, the pack's frames {}x{}x{}",
                                path_.string(), item.id, geometry.channels, geometry.height,
                                geometry.width, geometry_.channels, geometry_.height,
                                geometry_.width);
  }
  // Code the whole item first, on copies of the tables, so a refused item leaves nothing behind.
  auto values = values_;
  auto codes = codes_;
  values.resize(static_cast<size_t>(geometry.channels));
  codes.resize(values.size());
  std::vector<char> bytes(pixels.size());
  const int64_t plane = int64_t{geometry.height} * geometry.width;
  for (size_t i = 0; i < pixels.size(); ++i) {
    const size_t c = static_cast<size_t>((static_cast<int64_t>(i) / plane) % geometry.channels);
    const uint32_t bits = std::bit_cast<uint32_t>(pixels[i]);
    auto [it, inserted] = codes[c].try_emplace(bits, static_cast<uint8_t>(values[c].size()));
    if (inserted) {
      if (values[c].size() == kMaxCodes) {
        return InvalidArgumentError(
            "frame pack {}: item {}: channel {} has more than {} distinct values (the frames "
            "are not a normalised u8 image)",
            path_.string(), item.id, c, kMaxCodes);
      }
      values[c].push_back(bits);
    }
    bytes[i] = static_cast<char>(it->second);
  }
  out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out_) return InternalError("frame pack {}: write failed", path_.string());
  geometry_ = geometry;
  values_ = std::move(values);
  codes_ = std::move(codes);
  items_.push_back({{"id", item.id},
                    {"task", item.task},
                    {"question", item.question},
                    {"answer", item.answer},
                    {"num_frames", item.num_frames},
                    {"offset", offset_}});
  offset_ += bytes.size();
  return absl::OkStatus();
}

Status FramePackWriter::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (items_.empty()) {
    out_.close();
    return FailedPreconditionError("frame pack {}: no items were added", path_.string());
  }
  const nlohmann::json trailer = {{"version", kVersion},
                                  {"channels", geometry_.channels},
                                  {"height", geometry_.height},
                                  {"width", geometry_.width},
                                  {"values", values_},
                                  {"source", source_},
                                  {"items", items_}};
  const std::string text = trailer.dump();
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  PutU64(out_, text.size());
  out_.write(kMagic, sizeof kMagic);
  out_.close();
  if (!out_) return InternalError("frame pack {}: write failed", path_.string());
  return absl::OkStatus();
}

StatusOr<FramePack> FramePack::Open(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return NotFoundError("frame pack {}: {}", name, ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("frame pack {}: cannot open", name);
  char head[8], tail[16];
  if (size < 24 || !in.read(head, 8) || std::memcmp(head, kMagic, 8) != 0) {
    return DataLossError("frame pack {}: not a frame pack (bad magic or shorter than 24 bytes)",
                         name);
  }
  in.seekg(static_cast<std::streamoff>(size - 16));
  if (!in.read(tail, 16) || std::memcmp(tail + 8, kMagic, 8) != 0) {
    return DataLossError("frame pack {}: truncated (no end marker)", name);
  }
  const uint64_t trailer_size = GetU64(tail);
  if (trailer_size > size - 24) {
    return DataLossError("frame pack {}: trailer of {} bytes in a {}-byte file", name, trailer_size,
                         size);
  }
  const uint64_t codes_end = size - 16 - trailer_size;
  std::string text(trailer_size, '\0');
  in.seekg(static_cast<std::streamoff>(codes_end));
  if (!in.read(text.data(), static_cast<std::streamsize>(trailer_size))) {
    return DataLossError("frame pack {}: short read of the trailer", name);
  }
  FramePack pack;
  pack.path_ = path;
  try {
    const nlohmann::json t = nlohmann::json::parse(text);
    if (t.at("version").get<int>() != kVersion) {
      return DataLossError("frame pack {}: version {} (this build reads {})", name,
                           t.at("version").dump(), kVersion);
    }
    pack.geometry_ = {t.at("channels").get<int>(), t.at("height").get<int>(),
                      t.at("width").get<int>()};
    const auto bits = t.at("values").get<std::vector<std::vector<uint32_t>>>();
    // Bounded so that no size computed from them overflows (a frame is at most 4 × 2^15 × 2^15).
    const FrameGeometry& g = pack.geometry_;
    if (g.channels <= 0 || g.channels > 4 || g.height <= 0 || g.height > (1 << 15) ||
        g.width <= 0 || g.width > (1 << 15) || bits.size() != static_cast<size_t>(g.channels)) {
      return DataLossError("frame pack {}: bad geometry or value tables", name);
    }
    for (const auto& channel : bits) {
      if (channel.size() > kMaxCodes) {
        return DataLossError("frame pack {}: a channel table holds {} values", name,
                             channel.size());
      }
      std::vector<float>& v = pack.values_.emplace_back();
      for (uint32_t b : channel) v.push_back(std::bit_cast<float>(b));
    }
    pack.source_ = t.value("source", nlohmann::json::object());
    for (const auto& j : t.at("items")) {
      FramePackItem item{j.at("id").get<std::string>(), j.at("task").get<std::string>(),
                         j.at("question").get<std::string>(), j.at("answer").get<std::string>(),
                         j.at("num_frames").get<int>()};
      const uint64_t offset = j.at("offset").get<uint64_t>();
      const uint64_t bytes = static_cast<uint64_t>(item.num_frames) * pack.geometry_.frame_values();
      if (item.num_frames <= 0 || offset < 8 || offset > codes_end || bytes > codes_end - offset) {
        return DataLossError("frame pack {}: item {} lies outside the frames", name, item.id);
      }
      pack.items_.push_back(std::move(item));
      pack.offsets_.push_back(offset);
    }
    if (pack.items_.empty()) return DataLossError("frame pack {}: holds no items", name);
  } catch (const nlohmann::json::exception& e) {
    return DataLossError("frame pack {}: malformed trailer: {}", name, e.what());
  }
  return pack;
}

Status FramePack::ReadPixels(size_t index, std::span<float> out) const {
  if (index >= items_.size()) {
    return OutOfRangeError("frame pack {}: item {} of {}", path_.string(), index, items_.size());
  }
  const int64_t n = items_[index].num_frames * geometry_.frame_values();
  if (static_cast<int64_t>(out.size()) != n) {
    return InvalidArgumentError("frame pack {}: item {} has {} values, {} asked", path_.string(),
                                items_[index].id, n, out.size());
  }
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offsets_[index]));
  std::vector<unsigned char> codes(static_cast<size_t>(n));
  if (!in.read(reinterpret_cast<char*>(codes.data()), n)) {
    return DataLossError("frame pack {}: short read of item {}", path_.string(), items_[index].id);
  }
  const int64_t plane = int64_t{geometry_.height} * geometry_.width;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float>& table =
        values_[static_cast<size_t>((i / plane) % geometry_.channels)];
    if (codes[static_cast<size_t>(i)] >= table.size()) {
      return DataLossError("frame pack {}: item {}: code {} outside its channel's {} values",
                           path_.string(), items_[index].id, codes[static_cast<size_t>(i)],
                           table.size());
    }
    out[static_cast<size_t>(i)] = table[codes[static_cast<size_t>(i)]];
  }
  return absl::OkStatus();
}

}  // namespace framezip::eval
