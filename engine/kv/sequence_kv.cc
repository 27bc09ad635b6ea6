#include "engine/kv/sequence_kv.h"

#include <cstring>
#include <utility>

#include "engine/core/half.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::kv {
namespace {

// Writes `n` f32 values as the pool's element type.
void StoreRow(const float* src, int64_t n, DType dtype, void* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  Float16* h = static_cast<Float16*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(src[i]);
}

}  // namespace

SequenceKv::SequenceKv(PagePool* pool, int num_layers) : pool_(pool), layers_(num_layers) {}

SequenceKv::~SequenceKv() { Clear(); }

SequenceKv::SequenceKv(SequenceKv&& other) noexcept
    : pool_(other.pool_), layers_(std::move(other.layers_)) {
  other.layers_.clear();
}

SequenceKv& SequenceKv::operator=(SequenceKv&& other) noexcept {
  if (this != &other) {
    Clear();
    pool_ = other.pool_;
    layers_ = std::move(other.layers_);
    other.layers_.clear();
  }
  return *this;
}

void SequenceKv::Clear() {
  for (Layer& l : layers_) {
    for (const PageRef& p : l.pages) pool_->Free(p.id);
    l = Layer();
  }
}

Status SequenceKv::Append(int layer, const float* k, const float* v, const int32_t* positions,
                          int64_t count, const uint8_t* keep) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV append: layer {} of {}", layer, num_layers());
  }
  const PageLayout& pl = pool_->layout();
  const int64_t row = static_cast<int64_t>(pl.num_kv_heads) * pl.head_dim;
  const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(pool_->dtype());
  Layer& l = layers_[layer];
  for (int64_t i = 0; i < count; ++i) {
    if (keep != nullptr && keep[i] == 0) continue;
    if (l.pages.empty() || l.pages.back().num_tokens == pl.page_tokens) {
      FZ_ASSIGN_OR_RETURN(const PageId id, pool_->Allocate());
      l.pages.push_back(PageRef{id, 0});
    }
    PageRef& page = l.pages.back();
    const size_t off = static_cast<size_t>(page.num_tokens) * row_bytes;
    StoreRow(k + i * row, row, pool_->dtype(), static_cast<char*>(pool_->Keys(page.id)) + off);
    StoreRow(v + i * row, row, pool_->dtype(), static_cast<char*>(pool_->Values(page.id)) + off);
    ++page.num_tokens;
    l.positions.push_back(positions[i]);
    ++l.num_tokens;
  }
  return absl::OkStatus();
}

void SequenceKv::AppendSpans(int layer, std::vector<ops::KvSpan>& spans) const {
  for (const PageRef& p : layers_[layer].pages) {
    if (p.num_tokens == 0) continue;
    spans.push_back(ops::KvSpan{pool_->Keys(p.id), pool_->Values(p.id), p.num_tokens});
  }
}

void SequenceKv::Gather(int layer, float* k, float* v) const {
  const PageLayout& pl = pool_->layout();
  const int64_t row = static_cast<int64_t>(pl.num_kv_heads) * pl.head_dim;
  for (const PageRef& p : layers_[layer].pages) {
    const int64_t n = p.num_tokens * row;
    ops::cpu::ToF32(pool_->Keys(p.id), pool_->dtype(), n, k);
    ops::cpu::ToF32(pool_->Values(p.id), pool_->dtype(), n, v);
    k += n;
    v += n;
  }
}

PageImage SequenceKv::page_image(int layer, size_t index) const {
  const Layer& l = layers_[layer];
  const PageRef& p = l.pages[index];
  size_t first_slot = 0;
  for (size_t i = 0; i < index; ++i) first_slot += static_cast<size_t>(l.pages[i].num_tokens);
  return PageImage{pool_->layout().format, p.num_tokens,
                   std::span<const int32_t>(l.positions.data() + first_slot,
                                            static_cast<size_t>(p.num_tokens)),
                   std::span<const std::byte>(static_cast<const std::byte*>(pool_->Keys(p.id)),
                                              pool_->layout().PageBytes())};
}

Status SequenceKv::AdoptPage(int layer, const PageImage& image) {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgumentError("KV restore: layer {} of {}", layer, num_layers());
  }
  const PageLayout& pl = pool_->layout();
  if (image.format != pl.format) {
    return InvalidArgumentError("KV restore: page format {} but this sequence stores {}",
                                KvFormatName(image.format), KvFormatName(pl.format));
  }
  if (image.num_tokens <= 0 || image.num_tokens > pl.page_tokens ||
      image.positions.size() != static_cast<size_t>(image.num_tokens)) {
    return InvalidArgumentError("KV restore: page with {} tokens ({} positions), page size {}",
                                image.num_tokens, image.positions.size(), pl.page_tokens);
  }
  if (image.bytes.size() != pl.PageBytes()) {
    return InvalidArgumentError("KV restore: page image of {} bytes, this layout's pages are {}",
                                image.bytes.size(), pl.PageBytes());
  }
  FZ_ASSIGN_OR_RETURN(const PageId id, pool_->Allocate());
  std::memcpy(pool_->Keys(id), image.bytes.data(), image.bytes.size());
  Layer& l = layers_[layer];
  l.pages.push_back(PageRef{id, image.num_tokens});
  l.positions.insert(l.positions.end(), image.positions.begin(), image.positions.end());
  l.num_tokens += image.num_tokens;
  return absl::OkStatus();
}

int64_t SequenceKv::num_pages() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.pages.size());
  return n;
}

size_t SequenceKv::bytes() const {
  return pool_ == nullptr ? 0 : static_cast<size_t>(num_pages()) * pool_->layout().PageBytes();
}

}  // namespace framezip::engine::kv
