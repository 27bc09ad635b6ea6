// SequenceKv: the KV cache of one sequence — per layer, an ordered list of pages (each from the
// PagePool of its own format) plus the token position held in every filled slot.
//
// Layers are ragged: each layer has its own token count, because compression policies keep
// different token sets per layer (ZipVL's per-layer ratio, Dynamic-LLaVA's pruning from layer 2).
// Keys are stored post-RoPE, so attention over the cache is order-free and never needs the
// positions; they are kept (int32 per slot) for recompression, eviction and debugging.
//
// Formats: a KvPrecision maps each storing TokenClass to a page format. Tokens of a dense format
// (f32/f16; kFull always, kImportant/kRest when their format is dense) go to that format's
// appendable page of the layer (filled before a new one is taken). Tokens of a quantised format
// (int4/int2) are grouped, in order, into FRESH pages of up to page_tokens tokens per Append call
// and class: such a page is written once and never appended to (so a prefill chunk may leave a
// partly filled quantised page per class and layer).
//
// Decode residual window: decode tokens are stored kFull; every token of a layer held in
// full-format pages belongs to the window (full_tokens()), and residual_tokens() counts the kFull
// appends since the last recompression (the decoder's trigger). CompressResidual() re-stores the
// window by class and frees its full pages.
//
// Device: the pages live where the pools do (all of a sequence's pools on one device, checked by
// Create); every k/v pointer passed in or out addresses memory on that device, and page writes
// and reads run there (engine/kv/page_io.h). page_image() reads host pages only.
//
// Ownership: a SequenceKv owns its pages and returns them to their pools in its destructor (the
// pools must outlive it). Movable, not copyable. Not thread-safe: one sequence is advanced by one
// engine step at a time, but different sequences may be written concurrently.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/low_rank_block.h"
#include "engine/kv/page_pool.h"
#include "engine/ops/kv_slots.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::kv {

struct PageRef {
  PageId id = -1;
  int32_t num_tokens = 0;  // filled slots, <= page_tokens
  KvFormat format = KvFormat::kF16;
};

// One stored page seen as bytes, for the page codec (engine/kv/page_codec.h): its format, its
// filled slots, the positions of those slots, and the page's whole self-contained byte image
// (every format keeps its scales/metadata inside the page, so bytes + format + num_tokens restore
// it exactly).
struct PageImage {
  KvFormat format = KvFormat::kF16;
  int32_t num_tokens = 0;
  std::span<const int32_t> positions;  // num_tokens entries
  std::span<const std::byte> bytes;    // the page's full byte image
};

// Bytes of pages held, indexed by static_cast<size_t>(KvFormat).
using KvBytesByFormat = std::array<size_t, kNumKvFormats>;

class SequenceKv {
 public:
  SequenceKv() = default;
  // Every class stored in `pool`'s format (a dense one).
  SequenceKv(PagePool* pool, int num_layers);
  // Classes stored per `precision`, pages from `pools`. INVALID_ARGUMENT when a format of
  // `precision` has no pool in `pools` or precision.full is not dense.
  static StatusOr<SequenceKv> Create(const KvPools& pools, int num_layers, KvPrecision precision);
  ~SequenceKv();
  SequenceKv(SequenceKv&& other) noexcept;
  SequenceKv& operator=(SequenceKv&& other) noexcept;
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  // Appends `count` tokens to `layer`: k, v [count, G, d] f32 (post-RoPE, on device());
  // positions [count] (host). token_class[i] (host) is a TokenClass (kDrop = not stored); nullptr
  // stores every token kFull. INVALID_ARGUMENT (nothing stored) for an unknown class;
  // RESOURCE_EXHAUSTED when a pool runs out of pages (the tokens already stored stay).
  Status Append(int layer, const float* k, const float* v, const int32_t* positions, int64_t count,
                const uint8_t* token_class = nullptr);

  // A decode token of `layer` stored kFull at `position`, as Append of one token does — its slot
  // taken (a page from the reserve when the layer's full page is full), the token counted (in
  // num_tokens and the residual window) — except that its K/V are not written yet: the returned
  // slot says where they go, and the step writes them there (ops::WriteKvSlots) before anything
  // reads the layer. This is how a step plan knows every layer's pages before the step runs.
  // The full format must be dense. RESOURCE_EXHAUSTED when no page can be had (nothing changed).
  StatusOr<ops::KvSlot> AppendDecodeSlot(int layer, int32_t position);

  // A step's pages, set aside all or nothing before it writes anything (as vLLM's scheduler
  // allocates a step's blocks before running it): afterwards appending up to `tokens` tokens to
  // every layer takes pages from this reserve and cannot run out part-way. Each layer reserves,
  // for every format the tokens may go to, the pages they would need if all went to that format
  // (a dense format counts the free slots of its appendable page), minus what it already holds in
  // reserve: with `classified`, every format of the precision (a prefill chunk's classes are
  // decided layer by layer during the step, so this is the bound); without, the full format only
  // (Append without classes: a decode step's token). RESOURCE_EXHAUSTED, with nothing taken, when
  // a pool cannot supply them. Pages the step did not use stay reserved until ReleaseReserve (or
  // Clear), which the step's caller calls when it ends; until then the pools count them as taken,
  // bytes() and num_pages() do not (they hold no token). Not covered: CompressResidual's re-stored
  // window and low-rank blocks, which a policy creates only after the step's appends (both wait
  // for a later step when the pools cannot supply them, so neither fails a step). The bound
  // costs a prefill chunk of a multi-format precision up to one chunk of pages per format for the
  // length of the step, so near a full pool such a chunk is refused a little early.
  Status ReserveAppend(int64_t tokens, bool classified);
  void ReleaseReserve();
  int64_t reserved_pages() const;

  // Tokens stored in `layer`: in its pages and in its low-rank blocks.
  int64_t num_tokens(int layer) const { return layers_[layer].num_tokens; }
  // Of them, tokens in pages (what AppendSpans covers).
  int64_t page_tokens(int layer) const;

  // AttentionPack (kv/low_rank_block.h): a layer's visual tokens as low-rank factors beside its
  // pages, charged to the pools' shared byte budget (RESOURCE_EXHAUSTED when it is used up). A
  // block counts in num_tokens, positions, Gather (rebuilt), bytes and stored_tokens, but not in
  // the pages' spans: attention reads it through ops/low_rank.h. Blocks are host data whatever
  // the pages' device (the page codec and the store read them there); a GPU decoder keeps its own
  // device copy for its kernels (llm/device_low_rank_block.h).
  Status AppendLowRankBlock(int layer, LowRankBlock block);
  const std::vector<LowRankBlock>& low_rank_blocks(int layer) const {
    return layers_[layer].blocks;
  }
  std::vector<LowRankBlock>& mutable_low_rank_blocks(int layer) { return layers_[layer].blocks; }
  // Bytes of every layer's low-rank blocks.
  size_t low_rank_bytes() const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const std::vector<PageRef>& pages(int layer) const { return layers_[layer].pages; }
  // Positions of the stored tokens of `layer`, in storage order (page by page).
  std::vector<int32_t> positions(int layer) const;

  // Appends one KvSpan per non-empty page of `layer` (for ops::PagedDecodeAttention).
  void AppendSpans(int layer, std::vector<ops::KvSpan>& spans) const;
  // The whole of `layer` as spans, for a prefill op's past (ops::PagedKv): AppendSpans' pages,
  // then, when the layer holds low-rank blocks, one f32 span of them rebuilt (keys post-RoPE) into
  // `rebuilt` [2, tokens, G·d] on device(), which must outlive the spans. Gather's order.
  Status AppendPastSpans(int layer, std::vector<ops::KvSpan>& spans, Tensor& rebuilt) const;
  // `spans` as the one sequence of an ops::PagedKv of this cache's shape (`offsets` is its
  // storage).
  ops::PagedKv OneSequence(std::span<const ops::KvSpan> spans,
                           std::array<int32_t, 2>& offsets) const;

  // Copies (dequantises) every stored token of `layer` to dense f32 k, v [num_tokens(layer), G, d]
  // in storage order — pages, then low-rank blocks rebuilt (keys rotated to post-RoPE) — for
  // prefill chunks, which attend to earlier chunks through this.
  Status Gather(int layer, float* k, float* v) const;
  // The same for the pages only: k, v [page_tokens(layer), G, d].
  Status GatherPages(int layer, float* k, float* v) const;

  // The residual window: tokens of `layer` in full-format pages, and their k, v (f32, storage
  // order; either pointer may be null).
  int64_t full_tokens(int layer) const;
  Status GatherFull(int layer, float* k, float* v) const;
  // Positions of the full_tokens(layer) window tokens, in GatherFull's order.
  std::vector<int32_t> FullPositions(int layer) const;
  // Tokens appended to `layer` as kFull since its last CompressResidual (what the decoder compares
  // with the policy's window, so tokens a policy keeps kFull are not recompressed every step).
  int64_t residual_tokens(int layer) const { return layers_[layer].residual; }

  // Re-stores the full_tokens(layer) window tokens by class (classes[i], storage order, as
  // GatherFull) and frees their full pages: kImportant/kRest go to fresh quantised pages, kFull
  // back into full pages, kDrop is evicted. The tokens are stored again before the window's pages
  // are freed, so for a moment the layer holds both: when the pools cannot supply the new pages
  // the layer is left exactly as it was and the call is OK — the window stays at full precision
  // (residual_tokens() unchanged, so the next step tries again), and a cache near its limit is
  // refused at the next step's reservation instead of losing tokens here. INVALID_ARGUMENT when
  // classes.size() != full_tokens(layer).
  Status CompressResidual(int layer, std::span<const uint8_t> classes);
  // Frees the full_tokens(layer) window's pages without storing the tokens again (AttentionPack's
  // recompression has moved them into a low-rank block first); the residual count restarts.
  Status DropResidual(int layer);

  // Pages held over all layers, and their bytes (in total and per format; low-rank blocks count
  // as KvFormat::kLowRank).
  int64_t num_pages() const;
  size_t bytes() const;
  KvBytesByFormat bytes_by_format() const;
  // Tokens stored over all layers (for "compression ratio vs f16": bytes an f16 cache of them
  // would take is stored_tokens() · 4 · G · d).
  int64_t stored_tokens() const;

  // Page `index` of `layer` as bytes (views valid until the sequence changes). Host pages only.
  PageImage page_image(int layer, size_t index) const;
  // The same on any device: host pages are viewed, a GPU page's bytes are copied into `staging`
  // (the image's bytes then view it, valid until staging changes).
  StatusOr<PageImage> ReadPageImage(int layer, size_t index, std::vector<std::byte>& staging) const;

  // Appends a page restored from its image to `layer` (after the layer's existing pages).
  // INVALID_ARGUMENT when the format has no pool here, or the token count or byte size does not
  // fit; RESOURCE_EXHAUSTED when the pool is full.
  Status AdoptPage(int layer, const PageImage& image);

  // Returns every page to its pool; the sequence becomes empty (same layer count).
  void Clear();

  // The full-precision pool (the one kFull tokens go to); pool(f): the pool of format f or null.
  PagePool* pool() const { return pool(precision_.full); }
  // Where the pages live (the host for a sequence without pools).
  Device device() const { return pool() != nullptr ? pool()->device() : Device::Cpu(); }
  PagePool* pool(KvFormat f) const { return pools_[static_cast<size_t>(f)]; }
  const KvPrecision& precision() const { return precision_; }

 private:
  struct Layer {
    std::vector<PageRef> pages;
    std::vector<int32_t> slot_positions;  // page_tokens entries per page
    int64_t num_tokens = 0;
    int64_t residual = 0;                     // kFull appends since the last CompressResidual
    std::vector<LowRankBlock> blocks;         // AttentionPack's visual tokens, in order
    std::array<int32_t, kNumKvFormats> open;  // per dense format: index of its appendable page
    std::array<std::vector<PageId>, kNumKvFormats> reserve;  // per format: ReserveAppend's pages
    Layer() { open.fill(-1); }
  };
  KvFormat FormatOf(uint8_t token_class) const;
  // A fresh page of format f for `l`: from its reserve, else from the pool.
  StatusOr<PageId> TakePage(Layer& l, KvFormat f);
  // Pages of format f that appending `tokens` tokens of that format to `l` would take.
  int64_t PagesToAppend(const Layer& l, KvFormat f, int64_t tokens) const;
  // n consecutive tokens of dense format f into the layer's appendable page(s).
  // Every low-rank block of `layer` rebuilt (keys post-RoPE) into k, v [block tokens, G, d] on
  // device(), in order.
  Status RebuildBlocks(int layer, float* k, float* v) const;
  // Frees the full-format pages among the first `end` pages of `l` (the residual window) and
  // renumbers the rest; the window count starts again.
  void DropFullPages(Layer& l, size_t end);
  Status AppendDenseRun(Layer& l, KvFormat f, const float* k, const float* v,
                        const int32_t* positions, int64_t n);
  // n tokens of quantised format f into fresh pages of up to page_tokens each.
  Status AppendQuantPages(Layer& l, KvFormat f, const float* k, const float* v,
                          const int32_t* positions, int64_t n);
  const PageLayout& layout(KvFormat f) const { return pool(f)->layout(); }

  std::array<PagePool*, kNumKvFormats> pools_{};
  KvPrecision precision_;
  int page_tokens_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace framezip::engine::kv
