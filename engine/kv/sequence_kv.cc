#include "engine/kv/sequence_kv.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "engine/core/device_memory.h"
#include "engine/core/tensor.h"
#include "engine/kv/page_io.h"
#include "engine/kv/quant_page.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::kv {
namespace {

size_t Index(KvFormat f) { return static_cast<size_t>(f); }

// How the KV write ops store into a dense pool's pages (f32 or f16).
ops::KvSlotKind SlotKindOf(DType dtype) {
  return dtype == DType::kF32 ? ops::KvSlotKind::kF32 : ops::KvSlotKind::kF16;
}

}  // namespace

SequenceKv::SequenceKv(PagePool* pool, int num_layers)
    : precision_{pool->format(), pool->format(), pool->format()},
      page_tokens_(pool->layout().page_tokens),
      layers_(num_layers) {
  pools_[Index(pool->format())] = pool;
}

StatusOr<SequenceKv> SequenceKv::Create(const KvPools& pools, int num_layers,
                                        KvPrecision precision) {
  if (IsQuantized(precision.full)) {
    return InvalidArgumentError("KV: full-precision tokens cannot be stored as {}",
                                KvFormatName(precision.full));
  }
  SequenceKv s;
  for (const KvFormat f : {precision.full, precision.important, precision.rest}) {
    if (!pools.has(f)) {
      return InvalidArgumentError("KV: this engine has no {} page pool (it has {})",
                                  KvFormatName(f), fmt::join(pools.formats(), ", "));
    }
    s.pools_[Index(f)] = pools.pool(f);
    if (pools.pool(f)->device() != pools.pool(precision.full)->device()) {
      return InvalidArgumentError("KV: the {} pool is on {} and the {} pool on {}", KvFormatName(f),
                                  DeviceName(pools.pool(f)->device()), KvFormatName(precision.full),
                                  DeviceName(pools.pool(precision.full)->device()));
    }
  }
  s.precision_ = precision;
  s.page_tokens_ = pools.base_layout().page_tokens;
  s.layers_.resize(static_cast<size_t>(num_layers));
  return s;
}

SequenceKv::~SequenceKv() { Clear(); }

SequenceKv::SequenceKv(SequenceKv&& other) noexcept
    : pools_(other.pools_),
      precision_(other.precision_),
      page_tokens_(other.page_tokens_),
      layers_(std::move(other.layers_)) {
  other.layers_.clear();
}

SequenceKv& SequenceKv::operator=(SequenceKv&& other) noexcept {
  if (this != &other) {
    Clear();
    pools_ = other.pools_;
    precision_ = other.precision_;
    page_tokens_ = other.page_tokens_;
    layers_ = std::move(other.layers_);
    other.layers_.clear();
  }
  return *this;
}

void SequenceKv::Clear() {
  ReleaseReserve();
  for (Layer& l : layers_) {
    for (const PageRef& p : l.pages) pool(p.format)->Free(p.id);
    if (PageBudget* budget = pool() != nullptr ? pool()->budget() : nullptr) {
      for (const LowRankBlock& b : l.blocks) budget->Give(static_cast<int64_t>(b.bytes()));
    }
    l = Layer();
  }
}

KvFormat SequenceKv::FormatOf(uint8_t token_class) const {
  switch (token_class) {
    case kImportant:
      return precision_.important;
    case kRest:
      return precision_.rest;
    default:
      return precision_.full;
  }
}

StatusOr<PageId> SequenceKv::TakePage(Layer& l, KvFormat f) {
  std::vector<PageId>& reserved = l.reserve[Index(f)];
  if (!reserved.empty()) {
    const PageId id = reserved.back();
    reserved.pop_back();
    return id;
  }
  return pool(f)->Allocate();
}

int64_t SequenceKv::PagesToAppend(const Layer& l, KvFormat f, int64_t tokens) const {
  int64_t free_slots = 0;
  if (!IsQuantized(f) && l.open[Index(f)] >= 0) {
    free_slots = page_tokens_ - l.pages[static_cast<size_t>(l.open[Index(f)])].num_tokens;
  }
  const int64_t fresh = std::max<int64_t>(0, tokens - free_slots);
  return fresh / page_tokens_ + (fresh % page_tokens_ != 0 ? 1 : 0);  // no overflow near 2^63
}

Status SequenceKv::ReserveAppend(int64_t tokens, bool classified) {
  if (tokens < 0) return InvalidArgumentError("KV reserve: {} tokens", tokens);
  // A format listed twice costs nothing more: the second pass finds its pages reserved.
  const std::array<KvFormat, 3> formats = {precision_.full, precision_.important, precision_.rest};
  const auto formats_end = classified ? formats.end() : formats.begin() + 1;
  struct Taken {
    size_t layer;
    KvFormat format;
    size_t count;
  };
  std::vector<Taken> taken;
  const auto give_back = [&] {
    for (const Taken& t : taken) {
      std::vector<PageId>& r = layers_[t.layer].reserve[Index(t.format)];
      for (size_t i = 0; i < t.count; ++i) {
        pool(t.format)->Free(r.back());
        r.pop_back();
      }
    }
  };
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer& l = layers_[li];
    for (auto it = formats.begin(); it != formats_end; ++it) {
      const KvFormat f = *it;
      std::vector<PageId>& r = l.reserve[Index(f)];
      const int64_t missing = PagesToAppend(l, f, tokens) - static_cast<int64_t>(r.size());
      for (int64_t i = 0; i < missing; ++i) {
        StatusOr<PageId> id = pool(f)->Allocate();
        if (!id.ok()) {
          if (i > 0) taken.push_back({li, f, static_cast<size_t>(i)});
          give_back();
          return ResourceExhaustedError(
              "KV: cannot reserve the {} pages of a {}-token step in layer {} ({})",
              KvFormatName(f), tokens, li, MessageOf(id.status()));
        }
        r.push_back(*id);
      }
      if (missing > 0) taken.push_back({li, f, static_cast<size_t>(missing)});
    }
  }
  return absl::OkStatus();
}

void SequenceKv::ReleaseReserve() {
  for (Layer& l : layers_) {
    for (size_t f = 0; f < l.reserve.size(); ++f) {
      for (const PageId id : l.reserve[f]) pool(static_cast<KvFormat>(f))->Free(id);
      l.reserve[f].clear();
    }
  }
}

int64_t SequenceKv::reserved_pages() const {
  int64_t n = 0;
  for (const Layer& l : layers_) {
    for (const auto& r : l.reserve) n += static_cast<int64_t>(r.size());
  }
  return n;
}

Status SequenceKv::AppendDenseRun(Layer& l, KvFormat f, const float* k, const float* v,
                                  const int32_t* positions, int64_t n) {
  PagePool* p = pool(f);
  const int64_t row = p->layout().channels();
  const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(p->dtype());
  const ops::KvSlotKind kind = SlotKindOf(p->dtype());
  int32_t& open = l.open[Index(f)];
  // The slots first (pages taken, positions and counts recorded), then every page's run written
  // in one op (one launch on a GPU, not two per page). Should a page run out part-way, the tokens
  // that got slots are written before the error returns, as a page-by-page append would have.
  std::vector<ops::KvPageRun> runs;
  Status taken = absl::OkStatus();
  for (int64_t done = 0; done < n;) {
    if (open < 0 || l.pages[open].num_tokens == page_tokens_) {
      StatusOr<PageId> id = TakePage(l, f);
      if (!id.ok()) {
        taken = id.status();
        break;
      }
      l.pages.push_back(PageRef{*id, 0, f});
      l.slot_positions.resize(l.slot_positions.size() + static_cast<size_t>(page_tokens_), 0);
      open = static_cast<int32_t>(l.pages.size() - 1);
    }
    PageRef& page = l.pages[open];
    const int64_t m = std::min<int64_t>(page_tokens_ - page.num_tokens, n - done);
    const size_t offset = static_cast<size_t>(page.num_tokens) * row_bytes;
    runs.push_back(ops::KvPageRun{static_cast<char*>(p->Keys(page.id)) + offset,
                                  static_cast<char*>(p->Values(page.id)) + offset, done,
                                  static_cast<int32_t>(m), kind});
    std::copy(
        positions + done, positions + done + m,
        l.slot_positions.begin() + static_cast<int64_t>(open) * page_tokens_ + page.num_tokens);
    page.num_tokens += static_cast<int32_t>(m);
    l.num_tokens += m;
    done += m;
  }
  FZ_RETURN_IF_ERROR(ops::WriteKvPageRuns(p->device(), runs, row, k, v));
  return taken;
}

StatusOr<ops::KvSlot> SequenceKv::AppendDecodeSlot(int layer, int32_t position) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV decode slot: layer {} of {}", layer, num_layers());
  }
  const KvFormat f = precision_.full;
  if (IsQuantized(f) || pool(f) == nullptr) {
    return FailedPreconditionError("KV decode slot: the full format {} is not a dense pool's",
                                   KvFormatName(f));
  }
  Layer& l = layers_[layer];
  int32_t& open = l.open[Index(f)];
  if (open < 0 || l.pages[open].num_tokens == page_tokens_) {
    FZ_ASSIGN_OR_RETURN(const PageId id, TakePage(l, f));
    l.pages.push_back(PageRef{id, 0, f});
    l.slot_positions.resize(l.slot_positions.size() + static_cast<size_t>(page_tokens_), 0);
    open = static_cast<int32_t>(l.pages.size() - 1);
  }
  PageRef& page = l.pages[open];
  const PagePool& p = *pool(f);
  const size_t offset =
      static_cast<size_t>(page.num_tokens * p.layout().channels()) * DTypeSize(p.dtype());
  ops::KvSlot slot;
  slot.k = static_cast<char*>(p.Keys(page.id)) + offset;
  slot.v = static_cast<char*>(p.Values(page.id)) + offset;
  slot.kind = SlotKindOf(p.dtype());
  l.slot_positions[static_cast<size_t>(open) * page_tokens_ + page.num_tokens] = position;
  ++page.num_tokens;
  ++l.num_tokens;
  ++l.residual;
  return slot;
}

Status SequenceKv::AppendQuantPages(Layer& l, KvFormat f, const float* k, const float* v,
                                    const int32_t* positions, int64_t n) {
  PagePool* p = pool(f);
  std::vector<PageId> ids;
  for (int64_t t0 = 0; t0 < n; t0 += page_tokens_) {
    StatusOr<PageId> id = TakePage(l, f);
    if (!id.ok()) {
      for (const PageId taken : ids) p->Free(taken);
      return id.status();
    }
    ids.push_back(*id);
  }
  if (Status st = WriteQuantPages(*p, ids, k, v, n); !st.ok()) {
    for (const PageId taken : ids) p->Free(taken);
    return st;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t t0 = static_cast<int64_t>(i) * page_tokens_;
    const int64_t m = std::min<int64_t>(page_tokens_, n - t0);
    l.pages.push_back(PageRef{ids[i], static_cast<int32_t>(m), f});
    l.slot_positions.insert(l.slot_positions.end(), positions + t0, positions + t0 + m);
    l.slot_positions.resize(l.pages.size() * static_cast<size_t>(page_tokens_), 0);
    l.num_tokens += m;
  }
  return absl::OkStatus();
}

Status SequenceKv::Append(int layer, const float* k, const float* v, const int32_t* positions,
                          int64_t count, const uint8_t* token_class) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV append: layer {} of {}", layer, num_layers());
  }
  for (int64_t i = 0; i < count && token_class != nullptr; ++i) {
    if (token_class[i] > kRest) {
      return InvalidArgumentError("KV append: token class {} at {}", token_class[i], i);
    }
  }
  Layer& l = layers_[layer];
  const int64_t row = pool()->layout().channels();
  auto class_of = [&](int64_t i) {
    return token_class == nullptr ? uint8_t{kFull} : token_class[i];
  };
  // Dense tokens are stored as they come, one write per run of consecutive tokens of one format;
  // quantised classes are collected (in order) and written a page at a time after the dense ones.
  struct Pending {
    KvFormat format;
    std::vector<int32_t> rows;
    std::vector<int32_t> positions;
  };
  std::vector<Pending> pending;
  for (int64_t i = 0; i < count;) {
    const uint8_t cls = class_of(i);
    if (cls == kDrop) {
      ++i;
      continue;
    }
    const KvFormat f = FormatOf(cls);
    if (IsQuantized(f)) {
      auto it = std::find_if(pending.begin(), pending.end(),
                             [f](const Pending& p) { return p.format == f; });
      if (it == pending.end()) it = pending.insert(pending.end(), Pending{f, {}, {}});
      it->rows.push_back(static_cast<int32_t>(i));
      it->positions.push_back(positions[i]);
      ++i;
      continue;
    }
    int64_t end = i;
    while (end < count && class_of(end) != kDrop && FormatOf(class_of(end)) == f) {
      if (class_of(end) == kFull) ++l.residual;
      ++end;
    }
    FZ_RETURN_IF_ERROR(AppendDenseRun(l, f, k + i * row, v + i * row, positions + i, end - i));
    i = end;
  }
  for (const Pending& p : pending) {
    // The class's rows side by side first (one gather each on the pages' device).
    const int64_t n = static_cast<int64_t>(p.rows.size());
    FZ_ASSIGN_OR_RETURN(Tensor pk, Tensor::Empty({n, row}, DType::kF32, device()));
    FZ_ASSIGN_OR_RETURN(Tensor pv, Tensor::Empty({n, row}, DType::kF32, device()));
    FZ_RETURN_IF_ERROR(ops::CopyRowSlices(device(), n, row,
                                          {.data = k, .stride = row, .rows = p.rows},
                                          {.data = pk.data<float>(), .stride = row}));
    FZ_RETURN_IF_ERROR(ops::CopyRowSlices(device(), n, row,
                                          {.data = v, .stride = row, .rows = p.rows},
                                          {.data = pv.data<float>(), .stride = row}));
    FZ_RETURN_IF_ERROR(
        AppendQuantPages(l, p.format, pk.data<float>(), pv.data<float>(), p.positions.data(), n));
  }
  return absl::OkStatus();
}

std::vector<int32_t> SequenceKv::positions(int layer) const {
  const Layer& l = layers_[layer];
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(l.num_tokens));
  for (size_t i = 0; i < l.pages.size(); ++i) {
    const int32_t* first = l.slot_positions.data() + i * static_cast<size_t>(page_tokens_);
    out.insert(out.end(), first, first + l.pages[i].num_tokens);
  }
  for (const LowRankBlock& b : l.blocks) {
    const std::vector<int32_t> block_positions = b.positions.Expand();
    out.insert(out.end(), block_positions.begin(), block_positions.end());
  }
  return out;
}

int64_t SequenceKv::page_tokens(int layer) const {
  int64_t n = layers_[layer].num_tokens;
  for (const LowRankBlock& b : layers_[layer].blocks) n -= b.tokens();
  return n;
}

Status SequenceKv::AppendLowRankBlock(int layer, LowRankBlock block) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV low-rank block: layer {} of {}", layer, num_layers());
  }
  const int64_t cols = pool()->layout().channels();
  if (block.keys.cols != cols || block.values.cols != cols || block.keys.rows != block.tokens() ||
      block.values.rows != block.tokens()) {
    return InvalidArgumentError("KV low-rank block of {}x{} keys for a layout of {} channels",
                                block.keys.rows, block.keys.cols, cols);
  }
  // Blocks share the pages' byte budget, so the KV limit bounds every byte of the cache.
  if (PageBudget* budget = pool()->budget();
      budget != nullptr && !budget->TryTake(static_cast<int64_t>(block.bytes()))) {
    return ResourceExhaustedError("KV budget of {} bytes cannot hold a {}-byte low-rank block",
                                  budget->max_bytes(), block.bytes());
  }
  // Process-wide, so a commit mark taken from another sequence never names one of these blocks.
  static std::atomic<uint64_t> next_serial{1};
  block.serial = next_serial.fetch_add(1, std::memory_order_relaxed);
  Layer& l = layers_[layer];
  l.num_tokens += block.tokens();
  l.blocks.push_back(std::move(block));
  return absl::OkStatus();
}

size_t SequenceKv::low_rank_bytes() const {
  size_t n = 0;
  for (const Layer& l : layers_) {
    for (const LowRankBlock& b : l.blocks) n += b.bytes();
  }
  return n;
}

void SequenceKv::AppendSpans(int layer, std::vector<ops::KvSpan>& spans) const {
  for (const PageRef& p : layers_[layer].pages) {
    if (p.num_tokens > 0) spans.push_back(PageSpan(*pool(p.format), p.id, p.num_tokens));
  }
}

ops::PagedKv SequenceKv::OneSequence(std::span<const ops::KvSpan> spans,
                                     std::array<int32_t, 2>& offsets) const {
  offsets = {0, static_cast<int32_t>(spans.size())};
  const PageLayout& layout = pool()->layout();
  return ops::PagedKv{spans, offsets, layout.num_kv_heads, layout.head_dim};
}

Status SequenceKv::AppendPastSpans(int layer, std::vector<ops::KvSpan>& spans,
                                   Tensor& rebuilt) const {
  AppendSpans(layer, spans);
  const int64_t block_tokens = num_tokens(layer) - page_tokens(layer);
  if (block_tokens == 0) return absl::OkStatus();
  const int64_t row = pool()->layout().channels();
  FZ_ASSIGN_OR_RETURN(rebuilt, Tensor::Empty({2, block_tokens, row}, DType::kF32, device()));
  float* k = rebuilt.data<float>();
  FZ_RETURN_IF_ERROR(RebuildBlocks(layer, k, k + block_tokens * row));
  ops::KvSpan s;
  s.k = k;
  s.v = k + block_tokens * row;
  s.num_tokens = static_cast<int32_t>(block_tokens);
  s.format = KvFormat::kF32;
  spans.push_back(s);
  return absl::OkStatus();
}

Status SequenceKv::GatherPages(int layer, float* k, float* v) const {
  std::vector<ops::KvSpan> spans;
  AppendSpans(layer, spans);
  std::array<int32_t, 2> offsets;
  return ops::GatherPagedKv(OneSequence(spans, offsets), 0, device(), k, v);
}

Status SequenceKv::Gather(int layer, float* k, float* v) const {
  FZ_RETURN_IF_ERROR(GatherPages(layer, k, v));
  const int64_t at = page_tokens(layer) * pool()->layout().channels();
  return RebuildBlocks(layer, k + at, v + at);
}

Status SequenceKv::RebuildBlocks(int layer, float* k, float* v) const {
  const int64_t row = pool()->layout().channels();
  // Blocks are host data: on a GPU each is rebuilt on the host and copied to its place.
  std::vector<float> host_k, host_v;
  for (const LowRankBlock& b : layers_[layer].blocks) {
    if (device().is_cpu()) {
      FZ_RETURN_IF_ERROR(b.Reconstruct(k, v));
    } else {
      const size_t n = static_cast<size_t>(b.tokens() * row);
      host_k.resize(n);
      host_v.resize(n);
      FZ_RETURN_IF_ERROR(b.Reconstruct(host_k.data(), host_v.data()));
      FZ_RETURN_IF_ERROR(CopyBytes(k, device(), host_k.data(), Device::Cpu(), n * sizeof(float)));
      FZ_RETURN_IF_ERROR(CopyBytes(v, device(), host_v.data(), Device::Cpu(), n * sizeof(float)));
    }
    k += b.tokens() * row;
    v += b.tokens() * row;
  }
  return absl::OkStatus();
}

int64_t SequenceKv::full_tokens(int layer) const {
  int64_t n = 0;
  for (const PageRef& p : layers_[layer].pages) {
    if (p.format == precision_.full) n += p.num_tokens;
  }
  return n;
}

Status SequenceKv::GatherFull(int layer, float* k, float* v) const {
  const int64_t row = pool()->layout().channels();
  for (const PageRef& p : layers_[layer].pages) {
    if (p.format != precision_.full) continue;
    FZ_RETURN_IF_ERROR(ReadPageSlots(*pool(p.format), p.id, p.num_tokens, k, v));
    if (k != nullptr) k += p.num_tokens * row;
    if (v != nullptr) v += p.num_tokens * row;
  }
  return absl::OkStatus();
}

std::vector<int32_t> SequenceKv::FullPositions(int layer) const {
  const Layer& l = layers_[layer];
  std::vector<int32_t> out;
  for (size_t i = 0; i < l.pages.size(); ++i) {
    const PageRef& p = l.pages[i];
    if (p.format != precision_.full) continue;
    const int32_t* slots = l.slot_positions.data() + i * static_cast<size_t>(page_tokens_);
    out.insert(out.end(), slots, slots + p.num_tokens);
  }
  return out;
}

Status SequenceKv::CompressResidual(int layer, std::span<const uint8_t> classes) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV compress: layer {} of {}", layer, num_layers());
  }
  const int64_t n = full_tokens(layer);
  if (static_cast<int64_t>(classes.size()) != n) {
    return InvalidArgumentError("KV compress: {} classes for a window of {} tokens", classes.size(),
                                n);
  }
  if (n == 0) return absl::OkStatus();
  const int64_t row = pool()->layout().channels();
  FZ_ASSIGN_OR_RETURN(Tensor k, Tensor::Empty({n, row}, DType::kF32, device()));
  FZ_ASSIGN_OR_RETURN(Tensor v, Tensor::Empty({n, row}, DType::kF32, device()));
  FZ_RETURN_IF_ERROR(GatherFull(layer, k.data<float>(), v.data<float>()));
  const std::vector<int32_t> pos = FullPositions(layer);
  // The window's tokens are stored again by class BEFORE its pages go: when the pools cannot take
  // them, the layer is put back exactly as it was and the window waits, at full precision, for a
  // later step (a half-requantised window would lose tokens in this layer and not in the others).
  Layer& l = layers_[layer];
  const std::vector<PageRef> pages_before = l.pages;
  const std::array<int32_t, kNumKvFormats> open_before = l.open;
  const int64_t tokens_before = l.num_tokens, residual_before = l.residual;
  l.open[Index(precision_.full)] = -1;  // tokens kept kFull start a page of their own
  const Status stored =
      Append(layer, k.data<float>(), v.data<float>(), pos.data(), n, classes.data());
  if (!stored.ok()) {
    for (size_t i = pages_before.size(); i < l.pages.size(); ++i) {
      pool(l.pages[i].format)->Free(l.pages[i].id);
    }
    l.pages = pages_before;
    l.slot_positions.resize(l.pages.size() * static_cast<size_t>(page_tokens_));
    l.open = open_before;
    l.num_tokens = tokens_before;
    l.residual = residual_before;
    return stored.code() == absl::StatusCode::kResourceExhausted ? absl::OkStatus() : stored;
  }
  DropFullPages(l, pages_before.size());
  // Tokens the policy kept kFull start a new window, not this one again.
  l.residual = 0;
  return absl::OkStatus();
}

Status SequenceKv::DropResidual(int layer) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV drop: layer {} of {}", layer, num_layers());
  }
  DropFullPages(layers_[layer], layers_[layer].pages.size());
  return absl::OkStatus();
}

void SequenceKv::DropFullPages(Layer& l, size_t end) {
  // The layer's other pages stay, in order; its token count is taken again from them and its
  // blocks.
  Layer kept;
  for (size_t i = 0; i < l.pages.size(); ++i) {
    const PageRef& p = l.pages[i];
    if (p.format == precision_.full && i < end) {
      pool(p.format)->Free(p.id);
      continue;
    }
    const int32_t* slots = l.slot_positions.data() + i * static_cast<size_t>(page_tokens_);
    if (!IsQuantized(p.format))
      kept.open[Index(p.format)] = static_cast<int32_t>(kept.pages.size());
    kept.pages.push_back(p);
    kept.slot_positions.insert(kept.slot_positions.end(), slots, slots + page_tokens_);
    kept.num_tokens += p.num_tokens;
  }
  for (const LowRankBlock& b : l.blocks) kept.num_tokens += b.tokens();
  kept.blocks = std::move(l.blocks);
  kept.reserve = std::move(l.reserve);  // a step's reserve outlives the window
  l = std::move(kept);
}

int64_t SequenceKv::num_pages() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.pages.size());
  return n;
}

KvBytesByFormat SequenceKv::bytes_by_format() const {
  KvBytesByFormat out{};
  for (const Layer& l : layers_) {
    for (const PageRef& p : l.pages) out[Index(p.format)] += layout(p.format).PageBytes();
  }
  out[Index(KvFormat::kLowRank)] = low_rank_bytes();
  return out;
}

size_t SequenceKv::bytes() const {
  size_t n = 0;
  for (const size_t b : bytes_by_format()) n += b;
  return n;
}

int64_t SequenceKv::stored_tokens() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += l.num_tokens;
  return n;
}

PageImage SequenceKv::page_image(int layer, size_t index) const {
  FZ_CHECK(device().is_cpu() && "page_image reads host pages; a GPU cache is staged first");
  const Layer& l = layers_[layer];
  const PageRef& p = l.pages[index];
  const PagePool* pp = pool(p.format);
  return PageImage{
      p.format, p.num_tokens,
      std::span<const int32_t>(l.slot_positions.data() + index * static_cast<size_t>(page_tokens_),
                               static_cast<size_t>(p.num_tokens)),
      std::span<const std::byte>(static_cast<const std::byte*>(pp->Keys(p.id)),
                                 pp->layout().PageBytes())};
}

StatusOr<PageImage> SequenceKv::ReadPageImage(int layer, size_t index,
                                              std::vector<std::byte>& staging) const {
  if (device().is_cpu()) return page_image(layer, index);
  const Layer& l = layers_[layer];
  const PageRef& p = l.pages[index];
  const PagePool* pp = pool(p.format);
  staging.resize(pp->layout().PageBytes());
  FZ_RETURN_IF_ERROR(
      CopyBytes(staging.data(), Device::Cpu(), pp->Keys(p.id), pp->device(), staging.size()));
  return PageImage{
      p.format, p.num_tokens,
      std::span<const int32_t>(l.slot_positions.data() + index * static_cast<size_t>(page_tokens_),
                               static_cast<size_t>(p.num_tokens)),
      std::span<const std::byte>(staging.data(), staging.size())};
}

Status SequenceKv::AdoptPage(int layer, const PageImage& image) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV restore: layer {} of {}", layer, num_layers());
  }
  if (static_cast<int>(image.format) >= kNumKvFormats || pool(image.format) == nullptr) {
    return InvalidArgumentError("KV restore: page format {} but this sequence stores only {}",
                                KvFormatName(image.format), KvFormatName(precision_.full));
  }
  PagePool* pp = pool(image.format);
  const PageLayout& pl = pp->layout();
  if (image.num_tokens <= 0 || image.num_tokens > pl.page_tokens ||
      image.positions.size() != static_cast<size_t>(image.num_tokens)) {
    return InvalidArgumentError("KV restore: page with {} tokens ({} positions), page size {}",
                                image.num_tokens, image.positions.size(), pl.page_tokens);
  }
  if (image.bytes.size() != pl.PageBytes()) {
    return InvalidArgumentError("KV restore: {} page image of {} bytes, this layout's are {}",
                                KvFormatName(image.format), image.bytes.size(), pl.PageBytes());
  }
  FZ_ASSIGN_OR_RETURN(const PageId id, pp->Allocate());
  if (Status st = CopyBytes(pp->Keys(id), pp->device(), image.bytes.data(), Device::Cpu(),
                            image.bytes.size());
      !st.ok()) {
    pp->Free(id);
    return st;
  }
  Layer& l = layers_[layer];
  l.pages.push_back(PageRef{id, image.num_tokens, image.format});
  l.slot_positions.insert(l.slot_positions.end(), image.positions.begin(), image.positions.end());
  l.slot_positions.resize(l.pages.size() * static_cast<size_t>(page_tokens_), 0);
  if (!IsQuantized(image.format)) {
    l.open[Index(image.format)] = static_cast<int32_t>(l.pages.size() - 1);
  }
  l.num_tokens += image.num_tokens;
  return absl::OkStatus();
}

}  // namespace framezip::engine::kv
