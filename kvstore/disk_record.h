// The on-disk record format of the disk tier's append-only segment files.
//
//   offset  size  field
//   0       4     magic "FZKR"
//   4       1     type: 1 = block, 2 = tombstone
//   5       1     precision hint (block) / 0
//   6       2     reserved, 0
//   8       32    block key
//   40      8     payload length (little-endian)
//   48      4     CRC32C of bytes [0, 48)         -- a torn or garbled header is detected
//   52      n     payload (block bytes; tombstone: segment id u32 + record offset u64)
//   52+n    4     CRC32C of the payload            -- equals the block's wire CRC32C
//
// A record is valid only when both CRCs match; the scan at start truncates a torn tail, a read
// never returns a record whose payload CRC does not match. Little-endian throughout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvstore/types.h"

namespace framezip::kvstore::disk {

inline constexpr uint32_t kMagic = 0x524b5a46;  // "FZKR" little-endian
inline constexpr size_t kHeaderBytes = 52;
inline constexpr size_t kTrailerBytes = 4;
inline constexpr size_t kTombstonePayloadBytes = 12;

enum class RecordType : uint8_t { kBlock = 1, kTombstone = 2 };

struct RecordHeader {
  RecordType type = RecordType::kBlock;
  Precision precision = Precision::kUnspecified;
  BlockKey key{};
  uint64_t payload_bytes = 0;
};

inline uint64_t RecordBytes(uint64_t payload_bytes) {
  return kHeaderBytes + payload_bytes + kTrailerBytes;
}

void EncodeHeader(const RecordHeader& header, uint8_t out[kHeaderBytes]);
// nullopt when the magic, the type or the header CRC is wrong.
std::optional<RecordHeader> DecodeHeader(const uint8_t in[kHeaderBytes]);

void EncodeU32(uint32_t v, uint8_t out[4]);
uint32_t DecodeU32(const uint8_t in[4]);

struct TombstoneTarget {
  uint32_t segment_id;
  uint64_t offset;
};
std::string EncodeTombstone(const TombstoneTarget& target);
std::optional<TombstoneTarget> DecodeTombstone(const std::string& payload);

}  // namespace framezip::kvstore::disk
