// Page codec: a sequence's KV pages as self-checking byte blocks, for the KV store (kvstore/ keeps
// opaque blocks; only the engine knows what is inside) and back.
//
// The unit is a SEGMENT: what one commit of a conversation adds to its cache. A conversation that
// commits after every turn writes segment 0, 1, 2, ...; restoring segments 0..N gives the cache as
// it was at the end of turn N, so a follow-up turn prefills only its new text. Per layer, a
// segment lists the layer's pages in order; each is either a reference to a page of the previous
// commit that cannot have changed since (see SegmentMark) or a page sent in full. A partially
// filled dense page is therefore sent again by the next segment and replaces the earlier copy on
// restore, and pages freed since (a requantised residual window) simply are not listed.
//
// A segment also carries the conversation state the runtime needs to continue (sequence length,
// the token ids fed since the previous commit, the pending last token, the policy name), so the
// blocks alone restore a Conversation.
//
// Wire format (little-endian). The segment is one byte stream:
//   u32 magic 'FZKS', u16 version, u16 0
//   layout: i32 num_layers, num_kv_heads, head_dim, page_tokens
//   u32 segment_index, i64 sequence_length, i64 history_start
//   u32 n + i32[n] tokens (fed since history_start), u32 n + i32[n] pending, u8 ended_on_stop
//   u32 n + policy name
//   per layer: u32 num_pages, then per page u8 kind:
//     0 (reference): u32 index of the page in the layer as of the previous commit
//     1 (data): u8 format, i32 num_tokens, u64 byte_size, i32 positions[num_tokens],
//               bytes[byte_size]
//   (version >= 4) then the layer's low-rank blocks (AttentionPack, kv/low_rank_block.h): u32
//     num_kept, the number of leading blocks of the previous commit's list this segment keeps —
//     their factors never change, so only what decode updates is sent again, per kept block
//     i32 tokens, u16 value_ranks[tokens], f32 importance[tokens] — then u32 num_new and the
//     blocks added since, each as below. (Versions 2 and 3 sent u32 num_blocks and the whole
//     list in every segment, ~300 KiB a turn for a 256-frame video.) A block (version 3 on):
//     i32 tokens, i32 kv_heads, i32 cols, i32 rank_k, i32 rank_v,
//     RoPE: i32 head_dim, f64 theta, llama3 factor, low, high, original max positions,
//     u8 factor format (0 f16, 1 int4), u32 n + (i32 start, i32 count)[n] position runs,
//     u16 value_ranks[tokens], f32 importance[tokens],
//     then the factors keys.us [tokens, rank_k], keys.vt [rank_k, cols], values.us
//     [tokens, rank_v], values.vt [rank_v, cols], each as f16[rows·cols] (f16) or as
//     u8 nibbles[ceil(rows·cols / 2)] + f16 scales[ceil(rows / 32)·cols] (int4,
//     kv/low_rank_factor.h).
//     Version 2 wrote no format byte (f16), i32 positions[tokens] and i32 value_ranks[tokens].
// Version 1 segments (no block lists), 2 and 3 are still read.
// split into blocks of at most `max_block_bytes`, each:
//   u32 magic 'FZKB', u16 version, u16 0, u32 part, u32 parts, u64 stream_bytes,
//   u32 stream_crc32c, u32 payload_bytes, u32 payload_crc32c, payload
// Decoding checks every magic, version, size, CRC and the layout; a bad block is DATA_LOSS, a
// block of another model/layout or a broken segment order INVALID_ARGUMENT — never a crash, and
// never a half-restored sequence (RestoreSegments fills the sequence only once all is valid, and
// clears it again if the pool runs out midway).
//
// Thread-safety: free functions over caller-owned data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/sequence_kv.h"

namespace framezip::engine::kv {

inline constexpr uint16_t kPageCodecVersion = 4;
// The oldest version DecodeSegment still reads.
inline constexpr uint16_t kOldestPageCodecVersion = 1;

// The model/layout a segment was written for; restoring into another layout is refused.
struct CodecLayout {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t page_tokens = 0;
  bool operator==(const CodecLayout&) const = default;
};

// The layout of `kv`'s pages (its pool's layout and its layer count).
CodecLayout CodecLayoutOf(const SequenceKv& kv);

// A page as it was when committed, to tell later whether it is still the same page.
struct CommittedPage {
  PageId id = -1;
  int32_t num_tokens = 0;
  KvFormat format = KvFormat::kF16;
  bool operator==(const CommittedPage&) const = default;
};

// Where the previous commit ended. Default = nothing committed yet.
//
// Which pages a segment re-sends: a layer's pages are compared with those recorded at the previous
// commit, and everything from the first page that differs (freed or replaced, e.g. a residual
// window requantised) or that could have changed in place (a partly filled dense page, which
// appends fill) is sent again. Quantised pages are written once and full dense pages are never
// appended to, so an unchanged run of them is not sent twice.
struct SegmentMark {
  uint32_t next_segment = 0;                      // index of the next segment to write
  std::vector<std::vector<CommittedPage>> pages;  // per layer, as of the commit (empty = none)
  int64_t history_tokens = 0;                     // conversation tokens already committed
  // Per layer, the serials of the low-rank blocks committed (LowRankBlock::serial): a block still
  // at its place is kept by reference, only its ranks and importance sent again.
  std::vector<std::vector<uint64_t>> block_serials;
};

// Conversation state carried by a segment (engine/runtime fills and reads it).
struct SegmentState {
  int64_t sequence_length = 0;   // positions consumed by the sequence (llm::Sequence::length)
  std::vector<int32_t> tokens;   // token ids fed since the previous commit
  std::vector<int32_t> pending;  // sampled but not yet fed
  bool ended_on_stop = false;    // the last turn ended on a stop token
  std::string policy;            // compression policy name
};

struct EncodedSegment {
  std::vector<std::string> blocks;  // in order; all are needed to decode
  SegmentMark next_mark;            // pass to the next EncodeSegment
  int64_t pages = 0;                // pages written (re-sent partial pages included)
  uint64_t page_bytes = 0;          // their byte images
  std::vector<KvFormat> formats;    // formats of the pages written (distinct, for accounting)
};

// Encodes `kv`'s pages not yet committed at `since`, with `state`. `state.tokens` must hold the
// tokens fed since `since.history_tokens`. INVALID_ARGUMENT when `since` has another layer count
// or max_block_bytes is too small for a block header.
StatusOr<EncodedSegment> EncodeSegment(const SequenceKv& kv, const SegmentMark& since,
                                       const SegmentState& state, size_t max_block_bytes);

// One page as decoded from a segment (owns its bytes).
struct DecodedPage {
  KvFormat format = KvFormat::kF16;
  int32_t num_tokens = 0;
  std::vector<int32_t> positions;
  std::string bytes;
};

// A layer's page list: each entry a page of the previous commit (reference >= 0: its index
// there) or a page sent in this segment (reference < 0).
struct DecodedLayerPage {
  int64_t reference = -1;
  DecodedPage page;
};

// A low-rank block of the previous commit that this segment keeps: its decode-time state only,
// one entry per token of the block.
struct KeptBlock {
  std::vector<uint16_t> value_ranks;
  std::vector<float> importance;
};

struct DecodedLayer {
  std::vector<DecodedLayerPage> pages;
  // The layer's block list as of this segment: the first kept_blocks.size() blocks of the
  // previous commit's list (with this state), then `blocks`. Before version 4 kept_blocks is
  // empty and `blocks` the whole list.
  std::vector<KeptBlock> kept_blocks;
  std::vector<LowRankBlock> blocks;
};

struct DecodedSegment {
  CodecLayout layout;
  uint32_t segment_index = 0;
  int64_t history_start = 0;
  SegmentState state;
  std::vector<DecodedLayer> layers;
};

// Validates and parses one segment's blocks (DATA_LOSS: corrupt or truncated; INVALID_ARGUMENT:
// another format version, missing or reordered blocks).
StatusOr<DecodedSegment> DecodeSegment(std::span<const std::string> blocks);

// The final state after applying `segments` (in commit order, starting at 0) to an empty
// conversation: history is the concatenated tokens.
struct RestoredState {
  SegmentState state;  // of the last segment; tokens = the whole history
  SegmentMark mark;    // to continue committing after the restore
};

// Restores `segments` into the EMPTY sequence `kv` through AdoptPage (and the last segment's
// low-rank blocks through AppendLowRankBlock). INVALID_ARGUMENT when a
// segment's layout differs from kv's, the segments are not 0..N in order, or a page does not fit;
// RESOURCE_EXHAUSTED when the pool is full. On any error `kv` is left empty.
StatusOr<RestoredState> RestoreSegments(std::span<const DecodedSegment> segments, SequenceKv& kv);

}  // namespace framezip::engine::kv
