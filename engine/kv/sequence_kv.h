// SequenceKv: the KV cache of one sequence — per layer, an ordered list of pages from a PagePool
// plus the token position held in every filled slot.
//
// Layers are ragged: each layer has its own token count, because compression policies keep
// different token sets per layer (ZipVL's per-layer ratio, Dynamic-LLaVA's pruning from layer 2).
// Keys are stored post-RoPE, so attention over the cache is order-free and never needs the
// positions; they are kept (int32 per slot) for recompression, eviction and debugging.
//
// Appends always fill the layer's last page before taking a new one. A new page's slots are
// written in order; a page is never shared between layers or sequences.
//
// Ownership: a SequenceKv owns its pages and returns them to the pool in its destructor (the
// pool must outlive it). Movable, not copyable. Not thread-safe: one sequence is advanced by one
// engine step at a time, but different sequences may be written concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kv/page_pool.h"
#include "engine/ops/paged_attention.h"

namespace framezip::engine::kv {

struct PageRef {
  PageId id = -1;
  int32_t num_tokens = 0;  // filled slots, <= page_tokens
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

class SequenceKv {
 public:
  SequenceKv() = default;
  SequenceKv(PagePool* pool, int num_layers);
  ~SequenceKv();
  SequenceKv(SequenceKv&& other) noexcept;
  SequenceKv& operator=(SequenceKv&& other) noexcept;
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  // Appends `count` tokens to `layer`: k, v [count, G, d] f32 (post-RoPE), converted to the pool's
  // format; positions [count]. When `keep` is non-null only tokens with keep[i] != 0 are stored.
  // RESOURCE_EXHAUSTED when the pool runs out of pages (the tokens already stored stay).
  Status Append(int layer, const float* k, const float* v, const int32_t* positions, int64_t count,
                const uint8_t* keep = nullptr);

  // Tokens stored in `layer`.
  int64_t num_tokens(int layer) const { return layers_[layer].num_tokens; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const std::vector<PageRef>& pages(int layer) const { return layers_[layer].pages; }
  // Positions of the stored tokens of `layer`, in storage order.
  const std::vector<int32_t>& positions(int layer) const { return layers_[layer].positions; }

  // Appends one KvSpan per non-empty page of `layer` (for ops::PagedDecodeAttention).
  void AppendSpans(int layer, std::vector<ops::KvSpan>& spans) const;

  // Copies every stored token of `layer` to dense f32 k, v [num_tokens(layer), G, d]
  // (prefill chunks attend to earlier chunks through this).
  void Gather(int layer, float* k, float* v) const;

  // Pages held over all layers, and their bytes.
  int64_t num_pages() const;
  size_t bytes() const;

  // Page `index` of `layer` as bytes (views valid until the sequence changes).
  PageImage page_image(int layer, size_t index) const;

  // Appends a page restored from its image to `layer` (after the layer's existing pages).
  // INVALID_ARGUMENT when the format, token count or byte size does not fit this sequence's pools;
  // RESOURCE_EXHAUSTED when the pool is full.
  Status AdoptPage(int layer, const PageImage& image);

  // Returns every page to the pool; the sequence becomes empty (same layer count).
  void Clear();

  PagePool* pool() const { return pool_; }

 private:
  struct Layer {
    std::vector<PageRef> pages;
    std::vector<int32_t> positions;
    int64_t num_tokens = 0;
  };
  PagePool* pool_ = nullptr;
  std::vector<Layer> layers_;
};

}  // namespace framezip::engine::kv
