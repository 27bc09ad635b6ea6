#include "engine/dense/dense_decoder.h"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/core/device_memory.h"
#include "engine/core/kv_pool_sizing.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/embedding.h"
#include "engine/ops/linear.h"
#include "engine/ops/op_checks.h"
#include "engine/ops/paged_attention.h"
#include "engine/ops/rms_norm.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::dense {
namespace {

Status CheckShape(const Tensor& t, const Shape& want, const std::string& name, bool optional) {
  return ops::CheckWeightShape("dense decoder", t, want, name, optional);
}

// A device copy of `t` (undefined stays undefined).
StatusOr<Tensor> ToDevice(const Tensor& t, Device device, size_t& bytes) {
  if (!t.defined()) return Tensor();
  bytes += t.nbytes();
  return t.To(device);
}

// Copies rows [src_row, src_row + rows) of src [*, ...] to rows [dst_row, ...) of dst (same row
// size, both contiguous, any devices).
Status CopyRows(const Tensor& src, int64_t src_row, Tensor& dst, int64_t dst_row, int64_t rows) {
  const size_t row_bytes = src.nbytes() / static_cast<size_t>(src.dim(0));
  return CopyBytes(static_cast<char*>(dst.raw_data()) + dst_row * row_bytes, dst.device(),
                   static_cast<const char*>(src.raw_data()) + src_row * row_bytes, src.device(),
                   static_cast<size_t>(rows) * row_bytes);
}

// The decoder's f32 page pool: on a GPU reserved whole now, from what the weights left free
// (KvPagesForDevice), on the CPU max_bytes (256 MiB by default); one allocation either way.
StatusOr<std::unique_ptr<kv::PagePool>> NewKvPool(const DecoderShape& s, Device device,
                                                  const KvPoolOptions& options) {
  if (options.page_tokens <= 0) {
    return InvalidArgumentError("dense decoder: KV page_tokens {}", options.page_tokens);
  }
  const kv::PageLayout layout{options.page_tokens, static_cast<int>(s.kv_heads),
                              static_cast<int>(s.head_dim), kv::KvFormat::kF32};
  // Every layer of a token takes its own page slot.
  const int64_t page_bytes = static_cast<int64_t>(layout.PageBytes());
  int64_t pages = 0;
  if (device.is_cpu()) {
    const int64_t cap = options.max_bytes > 0 ? options.max_bytes : int64_t{256} << 20;
    pages = std::max<int64_t>(1, cap / page_bytes);
  } else {
    KvPoolSizing sizing;
    sizing.fraction = options.gpu_fraction;
    sizing.page_bytes = static_cast<size_t>(page_bytes);
    sizing.reserve_bytes = options.reserve_bytes;
    sizing.max_pages =
        options.max_bytes > 0 ? std::max<int64_t>(1, options.max_bytes / page_bytes) : 0;
    FZ_ASSIGN_OR_RETURN(pages, KvPagesForDevice(device, sizing));
  }
  if (pages < s.layers) {
    return ResourceExhaustedError(
        "dense decoder: a KV pool of {} pages ({} bytes each) cannot hold one token of {} layers",
        pages, page_bytes, s.layers);
  }
  // Rows of G·d floats over the whole pool (K then V per page) are addressed by int32 indices.
  if (pages * 2 * options.page_tokens > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError(
        "dense decoder: a KV pool of {} pages of {} tokens has more rows than int32 indices reach; "
        "lower max_bytes or raise page_tokens",
        pages, options.page_tokens);
  }
  // One allocation, so K/V rows of any pages move with one row-copy kernel (ops::CopyRowSlices).
  return kv::PagePool::Create(layout, pages, nullptr,
                              kv::PoolMemory{.device = device, .preallocate = true});
}

}  // namespace

KvCache::~KvCache() {
  for (const std::vector<kv::PageId>& layer : pages_) {
    for (kv::PageId id : layer) pool_->Free(id);
  }
}

size_t KvCache::bytes() const {
  size_t pages = 0;
  for (const std::vector<kv::PageId>& layer : pages_) pages += layer.size();
  return pages * pool_->layout().PageBytes();
}

StatusOr<std::unique_ptr<DenseDecoder>> DenseDecoder::Create(const DecoderShape& s,
                                                             const DecoderTensors& t, Device device,
                                                             KvPoolOptions kv_options) {
  if (s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 ||
      s.heads % s.kv_heads != 0 || s.head_dim % 2 != 0 || s.intermediate <= 0 || s.vocab <= 0 ||
      s.rope.head_dim != s.head_dim) {
    return InvalidArgumentError(
        "dense decoder: bad shape (hidden {}, layers {}, heads {}, kv heads {}, head_dim {}, "
        "intermediate {}, vocab {}, rope head_dim {})",
        s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab,
        s.rope.head_dim);
  }
  if (static_cast<int64_t>(t.layers.size()) != s.layers) {
    return InvalidArgumentError("dense decoder: {} layers of weights for {} layers",
                                t.layers.size(), s.layers);
  }
  const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim,
                im = s.intermediate;
  FZ_RETURN_IF_ERROR(CheckShape(t.embed, {s.vocab, h}, "embed", false));
  FZ_RETURN_IF_ERROR(CheckShape(t.norm, {h}, "norm", false));
  FZ_RETURN_IF_ERROR(CheckShape(t.lm_head, {s.vocab, h}, "lm_head", false));
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const LayerWeights& L = t.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    FZ_RETURN_IF_ERROR(CheckShape(L.input_norm, {h}, p + "input_norm", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.q, {q, h}, p + "q", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.q_bias, {q}, p + "q_bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.k, {kv, h}, p + "k", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.k_bias, {kv}, p + "k_bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.v, {kv, h}, p + "v", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.v_bias, {kv}, p + "v_bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.o, {h, q}, p + "o", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.o_bias, {h}, p + "o_bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.post_norm, {h}, p + "post_norm", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.gate, {im, h}, p + "gate", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.gate_bias, {im}, p + "gate_bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.up, {im, h}, p + "up", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.up_bias, {im}, p + "up_bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.down, {h, im}, p + "down", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.down_bias, {h}, p + "down_bias", true));
  }

  std::unique_ptr<DenseDecoder> d(new DenseDecoder(s, device));
  d->bf16_attention_ = !t.layers.empty() && t.layers[0].q.dtype() != DType::kF32;
  size_t& bytes = d->weight_bytes_;
  FZ_ASSIGN_OR_RETURN(d->w_.embed, ToDevice(t.embed, device, bytes));
  FZ_ASSIGN_OR_RETURN(d->w_.norm, ToDevice(t.norm, device, bytes));
  // A tied head is the embedding itself: one device copy serves both (136 M parameters of
  // Qwen2-0.5B's 494 M).
  const bool tied = t.lm_head.raw_data() == t.embed.raw_data() &&
                    t.lm_head.dtype() == t.embed.dtype() && t.lm_head.device() == t.embed.device();
  if (tied) {
    d->w_.lm_head = d->w_.embed;
  } else {
    FZ_ASSIGN_OR_RETURN(d->w_.lm_head, ToDevice(t.lm_head, device, bytes));
  }
  for (const LayerWeights& L : t.layers) {
    LayerWeights D;
    FZ_ASSIGN_OR_RETURN(D.input_norm, ToDevice(L.input_norm, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.q, ToDevice(L.q, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.q_bias, ToDevice(L.q_bias, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.k, ToDevice(L.k, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.k_bias, ToDevice(L.k_bias, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.v, ToDevice(L.v, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.v_bias, ToDevice(L.v_bias, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.o, ToDevice(L.o, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.o_bias, ToDevice(L.o_bias, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.post_norm, ToDevice(L.post_norm, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.gate, ToDevice(L.gate, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.gate_bias, ToDevice(L.gate_bias, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.up, ToDevice(L.up, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.up_bias, ToDevice(L.up_bias, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.down, ToDevice(L.down, device, bytes));
    FZ_ASSIGN_OR_RETURN(D.down_bias, ToDevice(L.down_bias, device, bytes));
    d->w_.layers.push_back(std::move(D));
  }
  FZ_ASSIGN_OR_RETURN(d->pool_, NewKvPool(s, device, kv_options));
  return d;
}

StatusOr<Tensor> DenseDecoder::Empty(Shape shape) const {
  return Tensor::Empty(std::move(shape), DType::kF32, device_);
}

StatusOr<std::unique_ptr<KvCache>> DenseDecoder::NewCache(int64_t capacity) const {
  if (capacity <= 0) return InvalidArgumentError("dense decoder: cache capacity {}", capacity);
  std::unique_ptr<KvCache> cache(new KvCache(pool_.get()));
  cache->capacity_ = capacity;
  cache->pages_.resize(static_cast<size_t>(shape_.layers));
  return cache;
}

Status DenseDecoder::ReservePages(std::span<const Part> parts) const {
  const int64_t page_tokens = pool_->layout().page_tokens;
  std::vector<std::vector<kv::PageId>*> grown;  // one entry per page taken, in order
  for (const Part& p : parts) {
    KvCache& c = *p.cache;
    const int64_t need = (c.length_ + p.rows + page_tokens - 1) / page_tokens;
    for (std::vector<kv::PageId>& layer : c.pages_) {
      while (static_cast<int64_t>(layer.size()) < need) {
        StatusOr<kv::PageId> id = pool_->Allocate();
        if (!id.ok()) {
          // Give back what this step took, newest first (each is then its layer's last page).
          for (auto it = grown.rbegin(); it != grown.rend(); ++it) {
            pool_->Free((*it)->back());
            (*it)->pop_back();
          }
          return Annotate(id.status(), "dense decoder: KV pages for this step");
        }
        layer.push_back(*id);
        grown.push_back(&layer);
      }
    }
  }
  return absl::OkStatus();
}

void DenseDecoder::TrimPages(std::span<const Part> parts) const {
  const int64_t page_tokens = pool_->layout().page_tokens;
  for (const Part& p : parts) {
    const size_t used = static_cast<size_t>((p.cache->length_ + page_tokens - 1) / page_tokens);
    for (std::vector<kv::PageId>& layer : p.cache->pages_) {
      while (layer.size() > used) {
        pool_->Free(layer.back());
        layer.pop_back();
      }
    }
  }
}

DenseDecoder::PageRows DenseDecoder::RowsOf(const KvCache& cache, int l, int64_t first,
                                            int64_t count) const {
  const int64_t page_tokens = pool_->layout().page_tokens;
  const std::vector<kv::PageId>& pages = cache.pages_[static_cast<size_t>(l)];
  PageRows rows;
  rows.k.resize(static_cast<size_t>(count));
  rows.v.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = first + i;
    const int64_t id = pages[static_cast<size_t>(pos / page_tokens)];
    // A page is page_tokens key rows, then page_tokens value rows.
    const int64_t key_row = id * 2 * page_tokens + pos % page_tokens;
    rows.k[static_cast<size_t>(i)] = static_cast<int32_t>(key_row);
    rows.v[static_cast<size_t>(i)] = static_cast<int32_t>(key_row + page_tokens);
  }
  return rows;
}

Status DenseDecoder::AppendKv(const Tensor& k, const Tensor& v, int64_t row0, int64_t rows, int l,
                              KvCache& cache) const {
  // One scatter each for K and V of the step's rows into their page slots.
  const int64_t width = shape_.kv_heads * shape_.head_dim;
  const PageRows to = RowsOf(cache, l, cache.length_, rows);
  float* base = static_cast<float*>(pool_->base());
  FZ_RETURN_IF_ERROR(ops::CopyRowSlices(
      device_, rows, width,
      {.data = static_cast<const float*>(k.raw_data()) + row0 * width, .stride = width},
      {.data = base, .stride = width, .rows = to.k}));
  return ops::CopyRowSlices(
      device_, rows, width,
      {.data = static_cast<const float*>(v.raw_data()) + row0 * width, .stride = width},
      {.data = base, .stride = width, .rows = to.v});
}

Status DenseDecoder::GatherKv(const KvCache& cache, int l, int64_t tokens, Tensor& k,
                              Tensor& v) const {
  // One gather each for K and V of the token rows from their pages.
  const int64_t width = shape_.kv_heads * shape_.head_dim;
  FZ_ASSIGN_OR_RETURN(k, Empty({1, tokens, shape_.kv_heads, shape_.head_dim}));
  FZ_ASSIGN_OR_RETURN(v, Empty({1, tokens, shape_.kv_heads, shape_.head_dim}));
  const PageRows from = RowsOf(cache, l, 0, tokens);
  const float* base = static_cast<const float*>(pool_->base());
  FZ_RETURN_IF_ERROR(
      ops::CopyRowSlices(device_, tokens, width, {.data = base, .stride = width, .rows = from.k},
                         {.data = static_cast<float*>(k.raw_data()), .stride = width}));
  return ops::CopyRowSlices(device_, tokens, width, {.data = base, .stride = width, .rows = from.v},
                            {.data = static_cast<float*>(v.raw_data()), .stride = width});
}

Status DenseDecoder::CheckRoom(const KvCache& cache, int64_t tokens) const {
  if (cache.length_ + tokens > cache.capacity_) {
    return OutOfRangeError("dense decoder: {} tokens do not fit the cache ({} of {} used)", tokens,
                           cache.length_, cache.capacity_);
  }
  return absl::OkStatus();
}

StatusOr<Tensor> DenseDecoder::Prefill(KvCache& cache, std::span<const int32_t> ids) const {
  if (ids.empty()) return InvalidArgumentError("dense decoder: prefill of no tokens");
  const int64_t t = static_cast<int64_t>(ids.size());
  FZ_RETURN_IF_ERROR(CheckRoom(cache, t));
  FZ_ASSIGN_OR_RETURN(Tensor host_ids, Tensor::Empty({t}, DType::kI32));
  std::copy(ids.begin(), ids.end(), host_ids.data<int32_t>());
  FZ_ASSIGN_OR_RETURN(Tensor dev_ids, host_ids.To(device_));
  FZ_ASSIGN_OR_RETURN(Tensor x, Empty({t, shape_.hidden}));
  FZ_RETURN_IF_ERROR(ops::Embedding(w_.embed, dev_ids, x));
  const Part part{&cache, 0, t};
  return Forward(x, std::span<const Part>(&part, 1));
}

StatusOr<Tensor> DenseDecoder::PrefillEmbeds(KvCache& cache, const Tensor& embeds) const {
  if (embeds.rank() != 2 || embeds.dim(1) != shape_.hidden || embeds.dim(0) == 0 ||
      embeds.dtype() != DType::kF32) {
    return InvalidArgumentError("dense decoder: embeds {} {}, expected [T >= 1, {}] f32",
                                ShapeString(embeds.shape()), DTypeName(embeds.dtype()),
                                shape_.hidden);
  }
  const int64_t t = embeds.dim(0);
  FZ_RETURN_IF_ERROR(CheckRoom(cache, t));
  // The forward pass writes x in place: work on a device copy, never on the caller's tensor.
  FZ_ASSIGN_OR_RETURN(Tensor x, embeds.To(device_));
  const Part part{&cache, 0, t};
  return Forward(x, std::span<const Part>(&part, 1));
}

StatusOr<Tensor> DenseDecoder::DecodeStep(std::span<KvCache* const> caches,
                                          std::span<const int32_t> tokens) const {
  if (caches.empty() || caches.size() != tokens.size()) {
    return InvalidArgumentError("dense decoder: {} caches for {} tokens", caches.size(),
                                tokens.size());
  }
  const int64_t b = static_cast<int64_t>(caches.size());
  std::vector<Part> parts;
  for (int64_t i = 0; i < b; ++i) {
    KvCache* c = caches[static_cast<size_t>(i)];
    for (const Part& p : parts) {
      if (p.cache == c)
        return InvalidArgumentError("dense decoder: cache {} repeated in a step", i);
    }
    if (c->length_ + 1 > c->capacity_) {
      return OutOfRangeError("dense decoder: cache {} is full ({} tokens)", i, c->capacity_);
    }
    parts.push_back({c, i, 1});
  }
  FZ_ASSIGN_OR_RETURN(Tensor host_ids, Tensor::Empty({b}, DType::kI32));
  std::copy(tokens.begin(), tokens.end(), host_ids.data<int32_t>());
  FZ_ASSIGN_OR_RETURN(Tensor dev_ids, host_ids.To(device_));
  FZ_ASSIGN_OR_RETURN(Tensor x, Empty({b, shape_.hidden}));
  FZ_RETURN_IF_ERROR(ops::Embedding(w_.embed, dev_ids, x));
  return Forward(x, parts);
}

StatusOr<Tensor> DenseDecoder::Forward(Tensor& x, std::span<const Part> parts) const {
  for (const Part& p : parts) {
    if (p.cache->pool_ != pool_.get()) {
      return InvalidArgumentError("dense decoder: a cache of another decoder was passed");
    }
  }
  FZ_RETURN_IF_ERROR(ReservePages(parts));
  StatusOr<Tensor> logits = ForwardReserved(x, parts);
  if (!logits.ok()) {
    TrimPages(parts);  // the caches stay as they were
    return logits.status();
  }
  for (const Part& p : parts) p.cache->length_ += p.rows;
  return logits;
}

StatusOr<Tensor> DenseDecoder::ForwardReserved(Tensor& x, std::span<const Part> parts) const {
  const int64_t t = x.dim(0);
  FZ_ASSIGN_OR_RETURN(Tensor host_pos, Tensor::Empty({t}, DType::kI32));
  for (const Part& p : parts) {
    for (int64_t i = 0; i < p.rows; ++i) {
      host_pos.data<int32_t>()[p.row0 + i] = static_cast<int32_t>(p.cache->length_ + i);
    }
  }
  Tensor positions = host_pos;
  if (!device_.is_cpu()) {
    FZ_ASSIGN_OR_RETURN(positions, host_pos.To(device_));
  }
  const std::span<const int32_t> checked(host_pos.data<int32_t>(), static_cast<size_t>(t));
  for (int l = 0; l < shape_.layers; ++l) {
    FZ_RETURN_IF_ERROR(Layer(l, parts, positions, checked, x));
  }

  // Logits of each part's last row only (a prefill's other rows need none). In a decode step
  // every row is its part's last, so x itself is what the head reads.
  const int64_t n = static_cast<int64_t>(parts.size());
  Tensor last = x;
  if (n != t) {
    FZ_ASSIGN_OR_RETURN(last, Empty({n, shape_.hidden}));
    for (int64_t i = 0; i < n; ++i) {
      const Part& p = parts[static_cast<size_t>(i)];
      FZ_RETURN_IF_ERROR(CopyRows(x, p.row0 + p.rows - 1, last, i, 1));
    }
  }
  FZ_RETURN_IF_ERROR(ops::RmsNorm(last, w_.norm, shape_.rms_eps, last));
  FZ_ASSIGN_OR_RETURN(Tensor logits, Empty({n, shape_.vocab}));
  FZ_RETURN_IF_ERROR(ops::Linear(last, w_.lm_head, Tensor(), logits));
  return logits;
}

Status DenseDecoder::Layer(int l, std::span<const Part> parts, const Tensor& positions,
                           std::span<const int32_t> host_positions, Tensor& x) const {
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  const int64_t t = x.dim(0), nh = shape_.heads, g = shape_.kv_heads, d = shape_.head_dim;

  // Attention block: h = RMSNorm(x); q/k/v; RoPE; K/V appended to each cache; causal attention
  // of each sequence's rows over its cache; x += o_proj(attn).
  FZ_ASSIGN_OR_RETURN(Tensor h, Empty({t, shape_.hidden}));
  FZ_RETURN_IF_ERROR(ops::RmsNorm(x, w.input_norm, shape_.rms_eps, h));
  FZ_ASSIGN_OR_RETURN(Tensor q, Empty({t, nh * d}));
  FZ_ASSIGN_OR_RETURN(Tensor k, Empty({t, g * d}));
  FZ_ASSIGN_OR_RETURN(Tensor v, Empty({t, g * d}));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.q, w.q_bias, q));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.k, w.k_bias, k));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.v, w.v_bias, v));
  FZ_ASSIGN_OR_RETURN(Tensor q3, q.Reshape({t, nh, d}));
  FZ_ASSIGN_OR_RETURN(Tensor k3, k.Reshape({t, g, d}));
  FZ_RETURN_IF_ERROR(ops::ApplyRope(q3, positions, shape_.rope, host_positions));
  FZ_RETURN_IF_ERROR(ops::ApplyRope(k3, positions, shape_.rope, host_positions));

  FZ_ASSIGN_OR_RETURN(Tensor attn, Empty({t, nh * d}));
  bool decode_only = true;
  for (const Part& p : parts) {
    FZ_RETURN_IF_ERROR(AppendKv(k3, v, p.row0, p.rows, l, *p.cache));
    decode_only = decode_only && p.rows == 1;
  }
  if (decode_only && !paged_decode_unbuilt_.load(std::memory_order_relaxed)) {
    // One paged decode call for the whole batch (the split-K kernel on a GPU) over every cache's
    // pages, each an f32 span; where that kernel is not built (a GPU head_dim other than 64 or
    // 128) the per-sequence attention below does the same work.
    const int64_t page_tokens = pool_->layout().page_tokens;
    std::vector<ops::KvSpan> spans;
    std::vector<int32_t> offsets = {0};
    for (const Part& p : parts) {
      const int64_t tokens = p.cache->length_ + 1;
      const std::vector<kv::PageId>& pages = p.cache->pages_[static_cast<size_t>(l)];
      for (int64_t first = 0; first < tokens; first += page_tokens) {
        const kv::PageId id = pages[static_cast<size_t>(first / page_tokens)];
        ops::KvSpan span;
        span.k = pool_->Keys(id);
        span.v = pool_->Values(id);
        span.num_tokens = static_cast<int32_t>(std::min(page_tokens, tokens - first));
        span.format = kv::KvFormat::kF32;
        spans.push_back(span);
      }
      offsets.push_back(static_cast<int32_t>(spans.size()));
    }
    FZ_ASSIGN_OR_RETURN(Tensor attn3, attn.Reshape({t, nh, d}));
    ops::PagedDecodeParams pp;
    pp.num_kv_heads = static_cast<int>(g);
    const Status paged = ops::PagedDecodeAttention(q3, spans, offsets, pp, attn3);
    if (paged.code() != absl::StatusCode::kUnimplemented) {
      FZ_RETURN_IF_ERROR(paged);
      return Finish(w, attn, h, x);
    }
    paged_decode_unbuilt_.store(true, std::memory_order_relaxed);  // not asked again
  }
  for (const Part& p : parts) {
    KvCache& c = *p.cache;
    const int64_t past = c.length_, total = past + p.rows;
    FZ_ASSIGN_OR_RETURN(Tensor qs, q.Slice(p.row0, p.row0 + p.rows));
    FZ_ASSIGN_OR_RETURN(Tensor q4, qs.Reshape({1, p.rows, nh, d}));
    Tensor k4, v4;  // the sequence's keys and values so far, this step's rows included
    FZ_RETURN_IF_ERROR(GatherKv(c, l, total, k4, v4));
    FZ_ASSIGN_OR_RETURN(Tensor os, attn.Slice(p.row0, p.row0 + p.rows));
    FZ_ASSIGN_OR_RETURN(Tensor o4, os.Reshape({1, p.rows, nh, d}));
    ops::AttentionParams ap;
    ap.causal = true;
    ap.q_offset = past;
    ap.allow_bf16_tensor_cores = bf16_attention_;
    FZ_RETURN_IF_ERROR(ops::Attention(q4, k4, v4, ap, o4));
  }
  return Finish(w, attn, h, x);
}

Status DenseDecoder::Finish(const LayerWeights& w, const Tensor& attn, Tensor& h, Tensor& x) const {
  const int64_t t = x.dim(0);
  FZ_RETURN_IF_ERROR(ops::Linear(attn, w.o, w.o_bias, h));
  // x += h and h = RMSNorm(x) in one pass over the rows.
  FZ_RETURN_IF_ERROR(ops::AddRmsNorm(x, h, w.post_norm, shape_.rms_eps, h));

  // MLP block: x += down(silu(gate(h)) * up(h)).
  FZ_ASSIGN_OR_RETURN(Tensor gate, Empty({t, shape_.intermediate}));
  FZ_ASSIGN_OR_RETURN(Tensor up, Empty({t, shape_.intermediate}));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.gate, w.gate_bias, gate));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.up, w.up_bias, up));
  FZ_RETURN_IF_ERROR(ops::SiluMul(gate, up, gate));
  FZ_RETURN_IF_ERROR(ops::Linear(gate, w.down, w.down_bias, h));
  return ops::Add(x, h, x);
}

}  // namespace framezip::engine::dense
