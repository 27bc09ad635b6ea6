#include "media/sniff.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>

namespace framezip::media {
namespace {

bool StartsWith(std::span<const uint8_t> b, size_t offset, const char* magic, size_t n) {
  return b.size() >= offset + n && std::memcmp(b.data() + offset, magic, n) == 0;
}
uint32_t Be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }
uint32_t Be32(const uint8_t* p) { return (Be16(p) << 16) | Be16(p + 2); }
uint32_t Le16(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }
uint32_t Le24(const uint8_t* p) { return Le16(p) | (uint32_t{p[2]} << 16); }
uint32_t Le32(const uint8_t* p) { return Le16(p) | (Le16(p + 2) << 16); }

// Walks JPEG markers to the first start-of-frame (SOF0..SOF15 except DHT, JPG, DAC).
void JpegSize(std::span<const uint8_t> b, SniffResult& r) {
  size_t i = 2;
  while (i + 4 <= b.size()) {
    if (b[i] != 0xFF) return;
    const uint8_t marker = b[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
      i += 2;
      continue;
    }
    const uint32_t length = Be16(&b[i + 2]);
    if (length < 2) return;
    const bool sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (i + 9 > b.size()) return;
      r.height = static_cast<int>(Be16(&b[i + 5]));
      r.width = static_cast<int>(Be16(&b[i + 7]));
      return;
    }
    i += 2 + length;
  }
}

void WebpInfo(std::span<const uint8_t> b, SniffResult& r) {
  if (b.size() < 30) return;
  if (StartsWith(b, 12, "VP8X", 4)) {
    r.animated = (b[20] & 0x02) != 0;
    r.width = static_cast<int>(Le24(&b[24]) + 1);
    r.height = static_cast<int>(Le24(&b[27]) + 1);
  } else if (StartsWith(b, 12, "VP8L", 4)) {
    const uint32_t bits = Le32(&b[21]);
    r.width = static_cast<int>((bits & 0x3FFF) + 1);
    r.height = static_cast<int>(((bits >> 14) & 0x3FFF) + 1);
  } else if (StartsWith(b, 12, "VP8 ", 4)) {
    r.width = static_cast<int>(Le16(&b[26]) & 0x3FFF);
    r.height = static_cast<int>(Le16(&b[28]) & 0x3FFF);
  }
}

void BmpSize(std::span<const uint8_t> b, SniffResult& r) {
  if (b.size() < 26) return;
  const uint32_t header_size = Le32(&b[14]);
  if (header_size == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes
    r.width = static_cast<int>(Le16(&b[18]));
    r.height = static_cast<int>(Le16(&b[20]));
    return;
  }
  const int32_t w = static_cast<int32_t>(Le32(&b[18]));
  const int32_t h = static_cast<int32_t>(Le32(&b[22]));
  // Negative height means top-down rows; INT32_MIN has no positive counterpart.
  r.width = w < 0 ? 0 : w;
  r.height = h == INT32_MIN ? 0 : (h < 0 ? -h : h);
}

}  // namespace

SniffResult SniffMedia(std::span<const uint8_t> bytes) {
  SniffResult r;
  const auto b = bytes.first(std::min<size_t>(bytes.size(), 64 * 1024));
  if (StartsWith(b, 0, "\x89PNG\r\n\x1a\n", 8)) {
    r.type = SniffedType::kPng;
    r.mime_type = "image/png";
    r.is_still_image = true;
    if (b.size() >= 24 && StartsWith(b, 12, "IHDR", 4)) {
      r.width = static_cast<int>(std::min<uint32_t>(Be32(&b[16]), INT32_MAX));
      r.height = static_cast<int>(std::min<uint32_t>(Be32(&b[20]), INT32_MAX));
    }
  } else if (StartsWith(b, 0, "\xFF\xD8\xFF", 3)) {
    r.type = SniffedType::kJpeg;
    r.mime_type = "image/jpeg";
    r.is_still_image = true;
    JpegSize(b, r);
  } else if (StartsWith(b, 0, "RIFF", 4) && StartsWith(b, 8, "WEBP", 4)) {
    r.type = SniffedType::kWebp;
    r.mime_type = "image/webp";
    r.is_still_image = true;
    WebpInfo(b, r);
  } else if (StartsWith(b, 0, "RIFF", 4) && StartsWith(b, 8, "AVI ", 4)) {
    r.type = SniffedType::kAvi;
    r.mime_type = "video/x-msvideo";
  } else if (StartsWith(b, 0, "BM", 2) && b.size() >= 26) {
    r.type = SniffedType::kBmp;
    r.mime_type = "image/bmp";
    r.is_still_image = true;
    BmpSize(b, r);
  } else if (StartsWith(b, 0, "GIF87a", 6) || StartsWith(b, 0, "GIF89a", 6)) {
    r.type = SniffedType::kGif;
    r.mime_type = "image/gif";
    if (b.size() >= 10) {
      r.width = static_cast<int>(Le16(&b[6]));
      r.height = static_cast<int>(Le16(&b[8]));
    }
  } else if (StartsWith(b, 0, "\x1A\x45\xDF\xA3", 4)) {
    r.type = SniffedType::kMatroska;
    // The DocType element says which; it sits in the first few dozen bytes of the EBML header.
    const auto head = b.first(std::min<size_t>(b.size(), 64));
    const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
    r.mime_type = text.find("webm") != std::string_view::npos ? "video/webm" : "video/x-matroska";
  } else if (StartsWith(b, 4, "ftyp", 4)) {
    r.type = SniffedType::kMp4;
    r.mime_type = StartsWith(b, 8, "qt  ", 4) ? "video/quicktime" : "video/mp4";
  } else if (StartsWith(b, 4, "moov", 4) || StartsWith(b, 4, "mdat", 4) ||
             StartsWith(b, 4, "free", 4) || StartsWith(b, 4, "wide", 4)) {
    r.type = SniffedType::kMp4;
    r.mime_type = "video/quicktime";
  } else if (b.size() >= 189 && b[0] == 0x47 && b[188] == 0x47) {
    r.type = SniffedType::kMpegTs;
    r.mime_type = "video/mp2t";
  }
  return r;
}

}  // namespace framezip::media
