#include "engine/kv/page_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/crc32c.h"

namespace framezip::engine::kv {
namespace {

constexpr uint32_t kStreamMagic = 0x534b5a46;  // "FZKS"
constexpr uint32_t kBlockMagic = 0x424b5a46;   // "FZKB"
// magic, version, reserved, part, parts, stream_bytes, stream_crc, payload_bytes, payload_crc
constexpr size_t kBlockHeaderBytes = 4 + 2 + 2 + 4 + 4 + 8 + 4 + 4 + 4;
// Bounds that keep a corrupt-but-CRC-valid (hostile) segment from asking for absurd allocations.
constexpr uint32_t kMaxLayers = 4096;
constexpr uint64_t kMaxPageBytes = uint64_t{1} << 30;

// Little-endian writer (the hosts we run on are little-endian; memcpy keeps it alignment-safe).
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutBytes(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }
  void PutIds(std::span<const int32_t> ids) {
    Put<uint32_t>(static_cast<uint32_t>(ids.size()));
    PutBytes(ids.data(), ids.size_bytes());
  }

 private:
  std::string& out_;
};

// Bounds-checked reader: every read past the end is DATA_LOSS, never an overrun.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  Status Get(T& v) {
    FZ_RETURN_IF_ERROR(Need(sizeof(T)));
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return absl::OkStatus();
  }
  Status GetBytes(size_t n, std::string& out) {
    FZ_RETURN_IF_ERROR(Need(n));
    out.assign(in_.data() + at_, n);
    at_ += n;
    return absl::OkStatus();
  }
  Status GetIds(size_t n, std::vector<int32_t>& out) {
    if (n > remaining() / sizeof(int32_t)) return Truncated();
    out.resize(n);
    // An empty vector's data() may be null, and memcpy from/to null is undefined even for 0 bytes.
    if (n > 0) std::memcpy(out.data(), in_.data() + at_, n * sizeof(int32_t));
    at_ += n * sizeof(int32_t);
    return absl::OkStatus();
  }
  Status GetIds(std::vector<int32_t>& out) {
    uint32_t n = 0;
    FZ_RETURN_IF_ERROR(Get(n));
    return GetIds(n, out);
  }
  size_t remaining() const { return in_.size() - at_; }

 private:
  Status Need(size_t n) const { return n <= remaining() ? absl::OkStatus() : Truncated(); }
  static Status Truncated() { return DataLossError("KV segment: truncated"); }
  std::string_view in_;
  size_t at_ = 0;
};

bool KnownVersion(uint16_t v) { return v >= kOldestPageCodecVersion && v <= kPageCodecVersion; }

template <typename T>
void PutArray(Writer& w, const std::vector<T>& v) {
  w.PutBytes(v.data(), v.size() * sizeof(T));
}

void PutFactor(Writer& w, const LowRankFactor& f) {
  PutArray(w, f.f16());
  PutArray(w, f.packed());
  PutArray(w, f.scales());
}

// Version 3 (the layout page_codec.h describes).
void PutBlock(Writer& w, const LowRankBlock& b) {
  w.Put<int32_t>(static_cast<int32_t>(b.tokens()));
  w.Put<int32_t>(b.num_kv_heads);
  w.Put<int32_t>(static_cast<int32_t>(b.keys.cols));
  w.Put<int32_t>(b.keys.rank);
  w.Put<int32_t>(b.values.rank);
  w.Put<int32_t>(b.rope.head_dim);
  w.Put<double>(b.rope.theta);
  w.Put<double>(b.rope.llama3_factor);
  w.Put<double>(b.rope.llama3_low_freq_factor);
  w.Put<double>(b.rope.llama3_high_freq_factor);
  w.Put<double>(b.rope.llama3_original_max_positions);
  w.Put<uint8_t>(static_cast<uint8_t>(b.keys.format()));
  w.Put<uint32_t>(static_cast<uint32_t>(b.positions.runs().size()));
  for (const PositionRuns::Run& run : b.positions.runs()) {
    w.Put<int32_t>(run.start);
    w.Put<int32_t>(run.count);
  }
  PutArray(w, b.value_ranks);
  PutArray(w, b.importance);
  PutFactor(w, b.keys.us);
  PutFactor(w, b.keys.vt);
  PutFactor(w, b.values.us);
  PutFactor(w, b.values.vt);
}

bool KnownFormat(uint8_t f) { return f <= static_cast<uint8_t>(KvFormat::kLowRank); }

// Written-once page formats (int4/int2 pages are never appended to).
bool WrittenOnce(KvFormat f) { return f == KvFormat::kInt4 || f == KvFormat::kInt2; }

std::vector<std::vector<uint64_t>> BlockSerialsOf(const SequenceKv& kv) {
  std::vector<std::vector<uint64_t>> out(static_cast<size_t>(kv.num_layers()));
  for (int layer = 0; layer < kv.num_layers(); ++layer) {
    for (const LowRankBlock& b : kv.low_rank_blocks(layer)) {
      out[static_cast<size_t>(layer)].push_back(b.serial);
    }
  }
  return out;
}

std::vector<std::vector<CommittedPage>> CommittedPagesOf(const SequenceKv& kv) {
  std::vector<std::vector<CommittedPage>> out(static_cast<size_t>(kv.num_layers()));
  for (int layer = 0; layer < kv.num_layers(); ++layer) {
    for (const PageRef& p : kv.pages(layer)) {
      out[static_cast<size_t>(layer)].push_back(CommittedPage{p.id, p.num_tokens, p.format});
    }
  }
  return out;
}

// A committed page that is still the same page when its identity matches: written-once formats
// and full dense pages are never modified in place (only freed).
bool Unchangeable(const CommittedPage& p, int page_tokens) {
  return WrittenOnce(p.format) || p.num_tokens == page_tokens;
}

StatusOr<std::string> SerializeStream(const SequenceKv& kv, const SegmentMark& since,
                                      const SegmentState& state, EncodedSegment& out) {
  std::string stream;
  Writer w(stream);
  const CodecLayout layout = CodecLayoutOf(kv);
  w.Put<uint32_t>(kStreamMagic);
  w.Put<uint16_t>(kPageCodecVersion);
  w.Put<uint16_t>(0);
  w.Put<int32_t>(layout.num_layers);
  w.Put<int32_t>(layout.num_kv_heads);
  w.Put<int32_t>(layout.head_dim);
  w.Put<int32_t>(layout.page_tokens);
  w.Put<uint32_t>(since.next_segment);
  w.Put<int64_t>(state.sequence_length);
  w.Put<int64_t>(since.history_tokens);
  w.PutIds(state.tokens);
  w.PutIds(state.pending);
  w.Put<uint8_t>(state.ended_on_stop ? 1 : 0);
  w.Put<uint32_t>(static_cast<uint32_t>(state.policy.size()));
  w.PutBytes(state.policy.data(), state.policy.size());

  out.next_mark.next_segment = since.next_segment + 1;
  out.next_mark.history_tokens = since.history_tokens + static_cast<int64_t>(state.tokens.size());
  out.next_mark.pages = CommittedPagesOf(kv);
  out.next_mark.block_serials = BlockSerialsOf(kv);
  std::vector<std::byte> staging;  // a page's bytes when the cache lives on a GPU
  for (int layer = 0; layer < kv.num_layers(); ++layer) {
    const std::vector<CommittedPage>& now = out.next_mark.pages[static_cast<size_t>(layer)];
    // Pages of the previous commit that cannot have changed, by identity.
    std::map<PageId, uint32_t> stable;
    if (!since.pages.empty()) {
      const std::vector<CommittedPage>& then = since.pages[static_cast<size_t>(layer)];
      for (uint32_t j = 0; j < then.size(); ++j) {
        if (Unchangeable(then[j], layout.page_tokens)) stable[then[j].id] = j;
      }
    }
    w.Put<uint32_t>(static_cast<uint32_t>(now.size()));
    for (size_t i = 0; i < now.size(); ++i) {
      auto it = stable.find(now[i].id);
      if (it != stable.end() && since.pages[static_cast<size_t>(layer)][it->second] == now[i]) {
        w.Put<uint8_t>(0);
        w.Put<uint32_t>(it->second);
        continue;
      }
      FZ_ASSIGN_OR_RETURN(const PageImage image, kv.ReadPageImage(layer, i, staging));
      w.Put<uint8_t>(1);
      w.Put<uint8_t>(static_cast<uint8_t>(image.format));
      w.Put<int32_t>(image.num_tokens);
      w.Put<uint64_t>(image.bytes.size());
      w.PutBytes(image.positions.data(), image.positions.size_bytes());
      w.PutBytes(image.bytes.data(), image.bytes.size());
      ++out.pages;
      out.page_bytes += image.bytes.size();
      if (std::find(out.formats.begin(), out.formats.end(), image.format) == out.formats.end()) {
        out.formats.push_back(image.format);
      }
    }
    // Blocks: the leading ones the previous commit already holds by reference (their ranks and
    // importance change with decode), then the new ones in full.
    const std::vector<LowRankBlock>& blocks = kv.low_rank_blocks(layer);
    const std::span<const uint64_t> then =
        since.block_serials.empty()
            ? std::span<const uint64_t>()
            : std::span<const uint64_t>(since.block_serials[static_cast<size_t>(layer)]);
    size_t kept = 0;
    while (kept < blocks.size() && kept < then.size() && blocks[kept].serial != 0 &&
           blocks[kept].serial == then[kept]) {
      ++kept;
    }
    w.Put<uint32_t>(static_cast<uint32_t>(kept));
    for (size_t i = 0; i < kept; ++i) {
      w.Put<int32_t>(static_cast<int32_t>(blocks[i].tokens()));
      PutArray(w, blocks[i].value_ranks);
      PutArray(w, blocks[i].importance);
    }
    w.Put<uint32_t>(static_cast<uint32_t>(blocks.size() - kept));
    for (size_t i = kept; i < blocks.size(); ++i) PutBlock(w, blocks[i]);
  }
  return stream;
}

}  // namespace

CodecLayout CodecLayoutOf(const SequenceKv& kv) {
  CodecLayout l;
  l.num_layers = kv.num_layers();
  if (kv.pool() != nullptr) {
    const PageLayout& pl = kv.pool()->layout();
    l.num_kv_heads = pl.num_kv_heads;
    l.head_dim = pl.head_dim;
    l.page_tokens = pl.page_tokens;
  }
  return l;
}

StatusOr<EncodedSegment> EncodeSegment(const SequenceKv& kv, const SegmentMark& since,
                                       const SegmentState& state, size_t max_block_bytes) {
  if (max_block_bytes <= kBlockHeaderBytes) {
    return InvalidArgumentError("KV segment: max block size {} leaves no room for data (header {})",
                                max_block_bytes, kBlockHeaderBytes);
  }
  if (!since.pages.empty() && since.pages.size() != static_cast<size_t>(kv.num_layers())) {
    return InvalidArgumentError("KV segment: mark has {} layers, the sequence {}",
                                since.pages.size(), kv.num_layers());
  }
  if (!since.block_serials.empty() &&
      since.block_serials.size() != static_cast<size_t>(kv.num_layers())) {
    return InvalidArgumentError("KV segment: mark has blocks of {} layers, the sequence {}",
                                since.block_serials.size(), kv.num_layers());
  }
  EncodedSegment out;
  FZ_ASSIGN_OR_RETURN(const std::string stream, SerializeStream(kv, since, state, out));
  const uint32_t stream_crc = Crc32c(stream.data(), stream.size());
  const size_t payload_max = max_block_bytes - kBlockHeaderBytes;
  const size_t parts = std::max<size_t>(1, (stream.size() + payload_max - 1) / payload_max);
  out.blocks.reserve(parts);
  for (size_t part = 0; part < parts; ++part) {
    const size_t at = part * payload_max;
    const size_t n = std::min(payload_max, stream.size() - at);
    std::string block;
    block.reserve(kBlockHeaderBytes + n);
    Writer w(block);
    w.Put<uint32_t>(kBlockMagic);
    w.Put<uint16_t>(kPageCodecVersion);
    w.Put<uint16_t>(0);
    w.Put<uint32_t>(static_cast<uint32_t>(part));
    w.Put<uint32_t>(static_cast<uint32_t>(parts));
    w.Put<uint64_t>(stream.size());
    w.Put<uint32_t>(stream_crc);
    w.Put<uint32_t>(static_cast<uint32_t>(n));
    w.Put<uint32_t>(Crc32c(stream.data() + at, n));
    w.PutBytes(stream.data() + at, n);
    out.blocks.push_back(std::move(block));
  }
  return out;
}

namespace {

// Checks every block's framing and CRC and joins the payloads into the segment stream.
StatusOr<std::string> JoinBlocks(std::span<const std::string> blocks) {
  if (blocks.empty()) return InvalidArgumentError("KV segment: no blocks");
  std::string stream;
  uint64_t stream_bytes = 0;
  uint32_t stream_crc = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    Reader r(blocks[i]);
    uint32_t magic = 0, part = 0, parts = 0, payload_bytes = 0, payload_crc = 0, crc = 0;
    uint16_t version = 0, reserved = 0;
    uint64_t total = 0;
    FZ_RETURN_IF_ERROR(r.Get(magic));
    if (magic != kBlockMagic) {
      return DataLossError("KV block {}: bad magic {:#x} (not a framezip KV block)", i, magic);
    }
    FZ_RETURN_IF_ERROR(r.Get(version));
    if (!KnownVersion(version)) {
      return InvalidArgumentError("KV block {}: codec version {}, this engine reads {}", i, version,
                                  kPageCodecVersion);
    }
    FZ_RETURN_IF_ERROR(r.Get(reserved));
    if (reserved != 0) return DataLossError("KV block {}: reserved header bits set", i);
    FZ_RETURN_IF_ERROR(r.Get(part));
    FZ_RETURN_IF_ERROR(r.Get(parts));
    FZ_RETURN_IF_ERROR(r.Get(total));
    FZ_RETURN_IF_ERROR(r.Get(crc));
    FZ_RETURN_IF_ERROR(r.Get(payload_bytes));
    FZ_RETURN_IF_ERROR(r.Get(payload_crc));
    if (part != i || parts != blocks.size()) {
      return InvalidArgumentError("KV block {}: is part {} of {}, but {} blocks were given", i,
                                  part, parts, blocks.size());
    }
    if (i == 0) {
      stream_bytes = total;
      stream_crc = crc;
      if (total > uint64_t{parts} * blocks[0].size()) {
        return DataLossError("KV block 0: claims a {}-byte segment in {} parts", total, parts);
      }
      stream.reserve(total);
    } else if (total != stream_bytes || crc != stream_crc) {
      return InvalidArgumentError("KV block {}: belongs to another segment", i);
    }
    if (payload_bytes != r.remaining()) {
      return DataLossError("KV block {}: payload of {} bytes, header says {}", i, r.remaining(),
                           payload_bytes);
    }
    const char* payload = blocks[i].data() + kBlockHeaderBytes;
    if (Crc32c(payload, payload_bytes) != payload_crc) {
      return DataLossError("KV block {}: checksum mismatch", i);
    }
    stream.append(payload, payload_bytes);
  }
  if (stream.size() != stream_bytes || Crc32c(stream.data(), stream.size()) != stream_crc) {
    return DataLossError("KV segment: {} bytes joined, {} expected, or segment checksum mismatch",
                         stream.size(), stream_bytes);
  }
  return stream;
}

// f16 / f32 / i32 arrays of n elements, bounds-checked against the stream.
template <typename T>
Status GetArray(Reader& r, size_t n, std::vector<T>& out) {
  if (n > r.remaining() / sizeof(T)) return DataLossError("KV segment: truncated block arrays");
  std::string bytes;
  FZ_RETURN_IF_ERROR(r.GetBytes(n * sizeof(T), bytes));
  out.resize(n);
  if (n > 0) std::memcpy(out.data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

StatusOr<LowRankFactor> GetFactor(Reader& r, FactorFormat format, int64_t rows, int64_t cols) {
  std::vector<Float16> f16, scales;
  std::vector<uint8_t> packed;
  if (format == FactorFormat::kF16) {
    FZ_RETURN_IF_ERROR(GetArray(r, static_cast<size_t>(rows * cols), f16));
  } else {
    FZ_RETURN_IF_ERROR(GetArray(r, LowRankFactor::PackedBytes(rows, cols), packed));
    FZ_RETURN_IF_ERROR(GetArray(r, LowRankFactor::ScaleCount(rows, cols), scales));
  }
  return LowRankFactor::FromParts(format, rows, cols, std::move(f16), std::move(packed),
                                  std::move(scales));
}

// Positions, value ranks and importance: version 2 wrote i32 positions, i32 ranks; version 3
// position runs and u16 ranks.
Status GetBlockTokens(Reader& r, uint16_t version, size_t t, LowRankBlock& b) {
  if (version < 3) {
    std::vector<int32_t> positions, ranks;
    FZ_RETURN_IF_ERROR(GetArray(r, t, positions));
    FZ_RETURN_IF_ERROR(GetArray(r, t, ranks));
    for (size_t i = 0; i < t; ++i) {
      if (positions[i] < 0 || (i > 0 && positions[i] <= positions[i - 1])) {
        return DataLossError("KV segment: low-rank position {} at row {} is not ascending",
                             positions[i], i);
      }
      if (ranks[i] < 0 || ranks[i] > UINT16_MAX) {
        return DataLossError("KV segment: value rank {}", ranks[i]);
      }
    }
    b.positions = PositionRuns::From(positions);
    b.value_ranks.assign(ranks.begin(), ranks.end());
  } else {
    uint32_t runs = 0;
    FZ_RETURN_IF_ERROR(r.Get(runs));
    // Each run is 8 stream bytes: a count the rest of the stream cannot hold is corrupt (checked
    // before the runs are sized by it).
    if (runs > t || runs > r.remaining() / 8) {
      return DataLossError("KV segment: {} position runs for {} tokens ({} bytes left)", runs, t,
                           r.remaining());
    }
    std::vector<PositionRuns::Run> stored(runs);
    for (PositionRuns::Run& run : stored) {
      FZ_RETURN_IF_ERROR(r.Get(run.start));
      FZ_RETURN_IF_ERROR(r.Get(run.count));
    }
    FZ_ASSIGN_OR_RETURN(b.positions, PositionRuns::FromRuns(std::move(stored)));
    if (b.positions.size() != static_cast<int64_t>(t)) {
      return DataLossError("KV segment: position runs cover {} of {} tokens", b.positions.size(),
                           t);
    }
    FZ_RETURN_IF_ERROR(GetArray(r, t, b.value_ranks));
  }
  return GetArray(r, t, b.importance);
}

// A block's decode-time state as read from a stream (whole blocks, and version 4's kept ones).
Status CheckValueRanks(std::span<const uint16_t> ranks, int rank_v) {
  for (const uint16_t rank : ranks) {
    if (rank > rank_v) return DataLossError("KV segment: value rank {} of {}", rank, rank_v);
  }
  return absl::OkStatus();
}

// Decode ranks tokens by importance: a NaN would break the ordering the ranking relies on.
Status CheckImportance(std::span<const float> importance) {
  for (const float w : importance) {
    if (!std::isfinite(w) || w < 0) {
      return DataLossError("KV segment: low-rank importance {} is not a finite weight", w);
    }
  }
  return absl::OkStatus();
}

Status GetBlock(Reader& r, const CodecLayout& l, uint16_t version, LowRankBlock& b) {
  int32_t tokens = 0, heads = 0, cols = 0, rank_k = 0, rank_v = 0;
  FZ_RETURN_IF_ERROR(r.Get(tokens));
  FZ_RETURN_IF_ERROR(r.Get(heads));
  FZ_RETURN_IF_ERROR(r.Get(cols));
  FZ_RETURN_IF_ERROR(r.Get(rank_k));
  FZ_RETURN_IF_ERROR(r.Get(rank_v));
  const int32_t max_rank = std::min(tokens, cols);
  if (tokens <= 0 || heads != l.num_kv_heads ||
      int64_t{cols} != int64_t{l.num_kv_heads} * l.head_dim || rank_k < 1 || rank_k > max_rank ||
      rank_v < 1 || rank_v > max_rank || rank_v > UINT16_MAX) {
    return DataLossError(
        "KV segment: low-rank block of {} tokens, {} heads, {} columns, ranks "
        "{}/{} in a layout of {} heads of {}",
        tokens, heads, cols, rank_k, rank_v, l.num_kv_heads, l.head_dim);
  }
  FZ_RETURN_IF_ERROR(r.Get(b.rope.head_dim));
  FZ_RETURN_IF_ERROR(r.Get(b.rope.theta));
  FZ_RETURN_IF_ERROR(r.Get(b.rope.llama3_factor));
  FZ_RETURN_IF_ERROR(r.Get(b.rope.llama3_low_freq_factor));
  FZ_RETURN_IF_ERROR(r.Get(b.rope.llama3_high_freq_factor));
  FZ_RETURN_IF_ERROR(r.Get(b.rope.llama3_original_max_positions));
  if (b.rope.head_dim != l.head_dim) {
    return DataLossError("KV segment: low-rank block RoPE of {} dims, heads of {}", b.rope.head_dim,
                         l.head_dim);
  }
  uint8_t format = 0;
  if (version >= 3) {
    FZ_RETURN_IF_ERROR(r.Get(format));
    if (format > static_cast<uint8_t>(FactorFormat::kInt4)) {
      return DataLossError("KV segment: unknown low-rank factor format {}", format);
    }
  }
  const size_t t = static_cast<size_t>(tokens);
  FZ_RETURN_IF_ERROR(GetBlockTokens(r, version, t, b));
  FZ_RETURN_IF_ERROR(CheckValueRanks(b.value_ranks, rank_v));
  FZ_RETURN_IF_ERROR(CheckImportance(b.importance));
  b.num_kv_heads = heads;
  b.keys.rows = b.values.rows = tokens;
  b.keys.cols = b.values.cols = cols;
  b.keys.rank = rank_k;
  b.values.rank = rank_v;
  const auto f = static_cast<FactorFormat>(format);
  FZ_ASSIGN_OR_RETURN(b.keys.us, GetFactor(r, f, tokens, rank_k));
  FZ_ASSIGN_OR_RETURN(b.keys.vt, GetFactor(r, f, rank_k, cols));
  FZ_ASSIGN_OR_RETURN(b.values.us, GetFactor(r, f, tokens, rank_v));
  FZ_ASSIGN_OR_RETURN(b.values.vt, GetFactor(r, f, rank_v, cols));
  return absl::OkStatus();
}

// Version 4's kept blocks: each one's token count and decode-time state (the ranks are checked
// against the block's value rank when the restore finds the block).
Status GetKeptBlocks(Reader& r, std::vector<KeptBlock>& kept) {
  uint32_t n = 0;
  FZ_RETURN_IF_ERROR(r.Get(n));
  // An entry is at least 10 bytes (a count and one token's rank and importance).
  if (n > r.remaining() / 10) return DataLossError("KV segment: {} kept low-rank blocks", n);
  kept.resize(n);
  for (KeptBlock& k : kept) {
    int32_t tokens = 0;
    FZ_RETURN_IF_ERROR(r.Get(tokens));
    if (tokens <= 0 || static_cast<uint64_t>(tokens) > r.remaining() / 6) {
      return DataLossError("KV segment: kept low-rank block of {} tokens", tokens);
    }
    const size_t t = static_cast<size_t>(tokens);
    FZ_RETURN_IF_ERROR(GetArray(r, t, k.value_ranks));
    FZ_RETURN_IF_ERROR(GetArray(r, t, k.importance));
    FZ_RETURN_IF_ERROR(CheckImportance(k.importance));
  }
  return absl::OkStatus();
}

Status GetBlocks(Reader& r, const CodecLayout& l, uint16_t version,
                 std::vector<LowRankBlock>& blocks) {
  uint32_t n = 0;
  FZ_RETURN_IF_ERROR(r.Get(n));
  // A block header alone is over 60 bytes: a count the stream cannot hold is corrupt.
  if (n > r.remaining() / 60) return DataLossError("KV segment: {} low-rank blocks", n);
  blocks.resize(n);
  for (LowRankBlock& b : blocks) FZ_RETURN_IF_ERROR(GetBlock(r, l, version, b));
  return absl::OkStatus();
}

}  // namespace

StatusOr<DecodedSegment> DecodeSegment(std::span<const std::string> blocks) {
  FZ_ASSIGN_OR_RETURN(const std::string stream, JoinBlocks(blocks));
  Reader r(stream);
  DecodedSegment seg;
  uint32_t magic = 0;
  uint16_t version = 0, reserved = 0;
  FZ_RETURN_IF_ERROR(r.Get(magic));
  FZ_RETURN_IF_ERROR(r.Get(version));
  FZ_RETURN_IF_ERROR(r.Get(reserved));
  if (magic != kStreamMagic || !KnownVersion(version) || reserved != 0) {
    return DataLossError("KV segment: bad magic {:#x} or version {}", magic, version);
  }
  CodecLayout& l = seg.layout;
  FZ_RETURN_IF_ERROR(r.Get(l.num_layers));
  FZ_RETURN_IF_ERROR(r.Get(l.num_kv_heads));
  FZ_RETURN_IF_ERROR(r.Get(l.head_dim));
  FZ_RETURN_IF_ERROR(r.Get(l.page_tokens));
  if (l.num_layers <= 0 || static_cast<uint32_t>(l.num_layers) > kMaxLayers ||
      l.num_kv_heads <= 0 || l.head_dim <= 0 || l.page_tokens <= 0) {
    return DataLossError("KV segment: bad layout (layers {}, kv heads {}, head dim {}, page {})",
                         l.num_layers, l.num_kv_heads, l.head_dim, l.page_tokens);
  }
  FZ_RETURN_IF_ERROR(r.Get(seg.segment_index));
  FZ_RETURN_IF_ERROR(r.Get(seg.state.sequence_length));
  FZ_RETURN_IF_ERROR(r.Get(seg.history_start));
  FZ_RETURN_IF_ERROR(r.GetIds(seg.state.tokens));
  FZ_RETURN_IF_ERROR(r.GetIds(seg.state.pending));
  uint8_t stop = 0;
  FZ_RETURN_IF_ERROR(r.Get(stop));
  seg.state.ended_on_stop = stop != 0;
  uint32_t policy_len = 0;
  FZ_RETURN_IF_ERROR(r.Get(policy_len));
  FZ_RETURN_IF_ERROR(r.GetBytes(policy_len, seg.state.policy));
  if (seg.state.sequence_length < 0 || seg.history_start < 0) {
    return DataLossError("KV segment: negative length {} or history start {}",
                         seg.state.sequence_length, seg.history_start);
  }
  seg.layers.resize(static_cast<size_t>(l.num_layers));
  for (DecodedLayer& layer : seg.layers) {
    uint32_t num_pages = 0;
    FZ_RETURN_IF_ERROR(r.Get(num_pages));
    // Each entry needs at least 5 bytes: a count the stream cannot hold is corrupt.
    if (num_pages > r.remaining() / 5) {
      return DataLossError("KV segment: {} pages in {} bytes", num_pages, r.remaining());
    }
    layer.pages.resize(num_pages);
    for (DecodedLayerPage& entry : layer.pages) {
      uint8_t kind = 0;
      FZ_RETURN_IF_ERROR(r.Get(kind));
      if (kind == 0) {
        uint32_t ref = 0;
        FZ_RETURN_IF_ERROR(r.Get(ref));
        entry.reference = ref;
        continue;
      }
      if (kind != 1) return DataLossError("KV segment: unknown page entry kind {}", kind);
      DecodedPage& page = entry.page;
      uint8_t format = 0;
      uint64_t byte_size = 0;
      FZ_RETURN_IF_ERROR(r.Get(format));
      FZ_RETURN_IF_ERROR(r.Get(page.num_tokens));
      FZ_RETURN_IF_ERROR(r.Get(byte_size));
      if (!KnownFormat(format)) return DataLossError("KV segment: unknown page format {}", format);
      page.format = static_cast<KvFormat>(format);
      if (page.num_tokens <= 0 || page.num_tokens > l.page_tokens || byte_size > kMaxPageBytes) {
        return DataLossError("KV segment: page of {} tokens (page size {}), {} bytes",
                             page.num_tokens, l.page_tokens, byte_size);
      }
      FZ_RETURN_IF_ERROR(r.GetIds(static_cast<size_t>(page.num_tokens), page.positions));
      FZ_RETURN_IF_ERROR(r.GetBytes(static_cast<size_t>(byte_size), page.bytes));
    }
    if (version >= 4) FZ_RETURN_IF_ERROR(GetKeptBlocks(r, layer.kept_blocks));
    if (version >= 2) FZ_RETURN_IF_ERROR(GetBlocks(r, l, version, layer.blocks));
  }
  if (r.remaining() != 0) {
    return DataLossError("KV segment: {} trailing bytes", r.remaining());
  }
  return seg;
}

namespace {

// One segment's blocks of a layer applied to the list as of the previous segment.
Status ApplyBlocks(const DecodedLayer& seg, size_t s, size_t layer,
                   std::vector<LowRankBlock>& blocks) {
  if (seg.kept_blocks.size() > blocks.size()) {
    return InvalidArgumentError(
        "KV restore: segment {} layer {} keeps {} low-rank blocks of the {} committed before", s,
        layer, seg.kept_blocks.size(), blocks.size());
  }
  for (size_t i = 0; i < seg.kept_blocks.size(); ++i) {
    const KeptBlock& k = seg.kept_blocks[i];
    LowRankBlock& b = blocks[i];
    if (static_cast<int64_t>(k.value_ranks.size()) != b.tokens()) {
      return InvalidArgumentError(
          "KV restore: segment {} layer {} keeps block {} as {} tokens; it was committed with {}",
          s, layer, i, k.value_ranks.size(), b.tokens());
    }
    if (const Status ranks = CheckValueRanks(k.value_ranks, b.values.rank); !ranks.ok()) {
      return Annotate(ranks, fmt::format("KV restore: segment {} layer {} block {}", s, layer, i));
    }
    b.value_ranks = k.value_ranks;
    b.importance = k.importance;
  }
  blocks.resize(seg.kept_blocks.size());
  blocks.insert(blocks.end(), seg.blocks.begin(), seg.blocks.end());
  return absl::OkStatus();
}

}  // namespace

StatusOr<RestoredState> RestoreSegments(std::span<const DecodedSegment> segments, SequenceKv& kv) {
  if (kv.stored_tokens() != 0) {
    return FailedPreconditionError("KV restore: the target sequence is not empty");
  }
  const CodecLayout want = CodecLayoutOf(kv);
  RestoredState out;
  // Pages per layer after applying every segment (each segment's list refers into the previous
  // one's or carries new pages).
  std::vector<std::vector<const DecodedPage*>> plan(static_cast<size_t>(want.num_layers));
  // Low-rank blocks per layer likewise: each segment keeps a prefix of the previous list (with
  // new ranks and importance) and adds blocks after it.
  std::vector<std::vector<LowRankBlock>> block_plan(static_cast<size_t>(want.num_layers));
  for (size_t s = 0; s < segments.size(); ++s) {
    const DecodedSegment& seg = segments[s];
    if (seg.layout != want) {
      return InvalidArgumentError(
          "KV restore: segment {} was written for layers {}, kv heads {}, head dim {}, page {} "
          "tokens; this model has {}, {}, {}, {}",
          s, seg.layout.num_layers, seg.layout.num_kv_heads, seg.layout.head_dim,
          seg.layout.page_tokens, want.num_layers, want.num_kv_heads, want.head_dim,
          want.page_tokens);
    }
    if (seg.segment_index != s) {
      return InvalidArgumentError("KV restore: segment {} given at position {}", seg.segment_index,
                                  s);
    }
    if (seg.history_start != static_cast<int64_t>(out.state.tokens.size())) {
      return InvalidArgumentError("KV restore: segment {} continues history at {}, have {}", s,
                                  seg.history_start, out.state.tokens.size());
    }
    for (size_t layer = 0; layer < plan.size(); ++layer) {
      std::vector<const DecodedPage*> next;
      for (const DecodedLayerPage& entry : seg.layers[layer].pages) {
        if (entry.reference < 0) {
          next.push_back(&entry.page);
        } else if (static_cast<size_t>(entry.reference) < plan[layer].size()) {
          next.push_back(plan[layer][static_cast<size_t>(entry.reference)]);
        } else {
          return InvalidArgumentError(
              "KV restore: segment {} layer {} refers to page {} of the {} committed before", s,
              layer, entry.reference, plan[layer].size());
        }
      }
      plan[layer] = std::move(next);
      FZ_RETURN_IF_ERROR(ApplyBlocks(seg.layers[layer], s, layer, block_plan[layer]));
    }
    std::vector<int32_t> history = std::move(out.state.tokens);
    history.insert(history.end(), seg.state.tokens.begin(), seg.state.tokens.end());
    out.state = seg.state;
    out.state.tokens = std::move(history);
  }
  out.mark.next_segment = static_cast<uint32_t>(segments.size());
  out.mark.history_tokens = static_cast<int64_t>(out.state.tokens.size());
  for (size_t layer = 0; layer < plan.size(); ++layer) {
    for (const DecodedPage* p : plan[layer]) {
      const Status st = kv.AdoptPage(
          static_cast<int>(layer),
          PageImage{p->format, p->num_tokens, p->positions,
                    std::span<const std::byte>(reinterpret_cast<const std::byte*>(p->bytes.data()),
                                               p->bytes.size())});
      if (!st.ok()) {
        kv.Clear();  // never a half-restored sequence
        return Annotate(st, fmt::format("KV restore: layer {}", layer));
      }
    }
  }
  for (size_t layer = 0; layer < block_plan.size(); ++layer) {
    for (LowRankBlock& b : block_plan[layer]) {
      const Status st = kv.AppendLowRankBlock(static_cast<int>(layer), std::move(b));
      if (!st.ok()) {
        kv.Clear();
        return Annotate(st, fmt::format("KV restore: layer {}", layer));
      }
    }
  }
  out.mark.pages = CommittedPagesOf(kv);
  out.mark.block_serials = BlockSerialsOf(kv);
  return out;
}

}  // namespace framezip::engine::kv
