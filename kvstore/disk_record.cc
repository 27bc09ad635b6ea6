#include "kvstore/disk_record.h"

#include <cstring>

#include "common/crc32c.h"

namespace framezip::kvstore::disk {
namespace {

void EncodeU64(uint64_t v, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t DecodeU64(const uint8_t in[8]) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace

void EncodeU32(uint32_t v, uint8_t out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t DecodeU32(const uint8_t in[4]) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}

void EncodeHeader(const RecordHeader& header, uint8_t out[kHeaderBytes]) {
  EncodeU32(kMagic, out);
  out[4] = static_cast<uint8_t>(header.type);
  out[5] = static_cast<uint8_t>(header.precision);
  out[6] = out[7] = 0;
  std::memcpy(out + 8, header.key.data(), 32);
  EncodeU64(header.payload_bytes, out + 40);
  EncodeU32(Crc32c(out, 48), out + 48);
}

std::optional<RecordHeader> DecodeHeader(const uint8_t in[kHeaderBytes]) {
  if (DecodeU32(in) != kMagic) return std::nullopt;
  if (DecodeU32(in + 48) != Crc32c(in, 48)) return std::nullopt;
  RecordHeader h;
  if (in[4] != static_cast<uint8_t>(RecordType::kBlock) &&
      in[4] != static_cast<uint8_t>(RecordType::kTombstone)) {
    return std::nullopt;
  }
  if (in[5] >= kNumPrecisions) return std::nullopt;
  h.type = static_cast<RecordType>(in[4]);
  h.precision = static_cast<Precision>(in[5]);
  std::memcpy(h.key.data(), in + 8, 32);
  h.payload_bytes = DecodeU64(in + 40);
  if (h.type == RecordType::kTombstone && h.payload_bytes != kTombstonePayloadBytes) {
    return std::nullopt;
  }
  return h;
}

std::string EncodeTombstone(const TombstoneTarget& target) {
  uint8_t buf[kTombstonePayloadBytes];
  EncodeU32(target.segment_id, buf);
  EncodeU64(target.offset, buf + 4);
  return std::string(reinterpret_cast<const char*>(buf), sizeof(buf));
}

std::optional<TombstoneTarget> DecodeTombstone(const std::string& payload) {
  if (payload.size() != kTombstonePayloadBytes) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  return TombstoneTarget{DecodeU32(p), DecodeU64(p + 4)};
}

}  // namespace framezip::kvstore::disk
