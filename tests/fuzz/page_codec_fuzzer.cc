// libFuzzer target over the KV page codec's decoder (engine/kv/page_codec.h): what a server reads
// back from a KV store, which may be shared, stale or tampered with. Even inputs pick the raw
// path (the bytes split into blocks, so block headers, CRCs and part ordering are attacked);
// odd ones wrap the bytes as a segment stream in one well-formed block with correct CRCs, so the
// stream parser itself is reached. Segments that decode are restored into a small pool of their
// own layout when it is a sane one. Any crash, sanitizer report or unbounded allocation is a
// finding. Run:
//   build-fuzz/bin/fuzz_page_codec -max_total_time=600 tests/fuzz/corpus/page_codec/
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/page_codec.h"

namespace {

using framezip::Crc32c;
namespace kv = framezip::engine::kv;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string WrapStream(const uint8_t* data, size_t size) {
  std::string block;
  Put<uint32_t>(block, 0x424b5a46);  // "FZKB"
  Put<uint16_t>(block, kv::kPageCodecVersion);
  Put<uint16_t>(block, 0);
  Put<uint32_t>(block, 0);  // part
  Put<uint32_t>(block, 1);  // parts
  Put<uint64_t>(block, size);
  const uint32_t crc = Crc32c(data, size);
  Put<uint32_t>(block, crc);
  Put<uint32_t>(block, static_cast<uint32_t>(size));
  Put<uint32_t>(block, crc);
  block.append(reinterpret_cast<const char*>(data), size);
  return block;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<std::string> blocks;
  if ((data[0] & 1) != 0) {
    blocks.push_back(WrapStream(data + 1, size - 1));
  } else {
    // Blocks of (data[0] >> 1) * 8 + 16 bytes.
    const size_t block_bytes = static_cast<size_t>(data[0] >> 1) * 8 + 16;
    for (size_t at = 1; at < size; at += block_bytes) {
      blocks.emplace_back(reinterpret_cast<const char*>(data + at),
                          std::min(block_bytes, size - at));
    }
  }
  auto decoded = kv::DecodeSegment(blocks);
  if (!decoded.ok()) return 0;
  const kv::CodecLayout& l = decoded->layout;
  if (l.num_layers < 1 || l.num_layers > 8 || l.num_kv_heads < 1 || l.num_kv_heads > 4 ||
      l.head_dim < 32 || l.head_dim > 128 || l.head_dim % 32 != 0 || l.page_tokens < 1 ||
      l.page_tokens > 64 || l.page_tokens % 32 != 0) {
    return 0;
  }
  kv::PageLayout base;
  base.page_tokens = l.page_tokens;
  base.num_kv_heads = l.num_kv_heads;
  base.head_dim = l.head_dim;
  const kv::KvFormat formats[] = {kv::KvFormat::kF32, kv::KvFormat::kF16, kv::KvFormat::kInt4,
                                  kv::KvFormat::kInt2};
  auto pools = kv::KvPools::Create(base, formats, 4 << 20);
  if (!pools.ok()) return 0;
  auto sequence = kv::SequenceKv::Create(**pools, l.num_layers, kv::KvPrecision{});
  if (!sequence.ok()) return 0;
  std::vector<kv::DecodedSegment> segments;
  segments.push_back(std::move(*decoded));
  (void)kv::RestoreSegments(segments, *sequence);
  return 0;
}
