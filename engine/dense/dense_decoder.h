// DenseDecoder: the Qwen2 / Llama decoder of llm/decoder.h with every tensor on ONE device — the
// weights, the activations and each sequence's KV cache — so that on a GPU a step moves only token
// ids and positions in and logits out. Same math, same ops (each op dispatches on the device of
// its tensors, so the class runs unchanged on the CPU, where tests check it against llm::Decoder).
//
// What it leaves out, on purpose: compression policies and quantised KV. Its cache is paged and
// f32: pages of KvPoolOptions::page_tokens tokens (K then V, [page_tokens, G, d] each, one layer)
// from ONE kv::PagePool on the decoder's device, reserved whole at Create — on a GPU from the
// memory the weights left free (core/kv_pool_sizing.h), as vLLM sizes its block pool — and taken
// by caches as they grow, so sequences share the pool instead of each reserving its capacity.
// Prefill gathers a sequence's pages and attends with ops::Attention per sequence; a decode step
// attends with ONE ops::PagedDecodeAttention call for the batch over every cache's pages (the
// split-K kernel on a GPU). It is the whole-model GPU path the [cuda] tests compare with the CPU,
// and what `framezip bench gpu` times end to end on the Qwen2-0.5B shape; the compressed engine
// stays on llm::Decoder.
//
// It depends on the core, the ops and the KV pages only (no model loader), so it builds in the
// GPU-check subset (scripts/gpu-check.sh); llm/dense_adapter.h builds its inputs from a loaded
// checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/kv/page_pool.h"
#include "engine/ops/rope.h"

namespace framezip::engine::dense {

struct DecoderShape {
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // G; heads % kv_heads == 0
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  float rms_eps = 1e-6f;
  ops::RopeParams rope;  // rope.head_dim == head_dim
};

// Optional biases are undefined tensors. Weights may be f32, bf16 or f16 (ops::Linear).
struct LayerWeights {
  Tensor input_norm;                    // [H]
  Tensor q, q_bias;                     // [heads·d, H]
  Tensor k, k_bias;                     // [G·d, H]
  Tensor v, v_bias;                     // [G·d, H]
  Tensor o, o_bias;                     // [H, heads·d]
  Tensor post_norm;                     // [H]
  Tensor gate, gate_bias, up, up_bias;  // [I, H]
  Tensor down, down_bias;               // [H, I]
};

struct DecoderTensors {
  Tensor embed;    // [V, H]
  Tensor norm;     // [H]
  Tensor lm_head;  // [V, H]; may share storage with `embed` (tied), copied once then
  std::vector<LayerWeights> layers;
};

// The KV page pool a decoder reserves at Create.
struct KvPoolOptions {
  int page_tokens = 16;  // tokens per page (of one layer)
  // On a GPU: this fraction of the memory free after the weights are copied, less reserve_bytes
  // for activations, workspaces and cuBLAS, all reserved at once.
  double gpu_fraction = 0.9;
  size_t reserve_bytes = size_t{4} << 30;
  // A cap on the pool (both devices; 0: none on a GPU, 256 MiB on the CPU). The pool is one
  // allocation on either device (host pages are touched only as they are used).
  int64_t max_bytes = 0;
};

// One sequence's KV cache: its pages of the decoder's pool, per layer. Returns them to the pool
// when destroyed, so it must not outlive its decoder.
class KvCache {
 public:
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  ~KvCache();

  int64_t length() const { return length_; }      // tokens stored = the next token's position
  int64_t capacity() const { return capacity_; }  // tokens it may hold (OUT_OF_RANGE past it)
  size_t bytes() const;                           // pool memory its pages hold

 private:
  friend class DenseDecoder;
  explicit KvCache(kv::PagePool* pool) : pool_(pool) {}
  kv::PagePool* pool_;
  std::vector<std::vector<kv::PageId>> pages_;  // per layer, in token order
  int64_t length_ = 0;
  int64_t capacity_ = 0;
};

class DenseDecoder {
 public:
  // Checks every shape (INVALID_ARGUMENT naming the tensor), copies the weights to `device` in
  // their own dtype, then reserves the KV page pool (`kv_options`). RESOURCE_EXHAUSTED when the
  // device memory runs out (for the weights, or not even one page); UNIMPLEMENTED or UNAVAILABLE
  // for a CUDA device without CUDA support or a GPU.
  static StatusOr<std::unique_ptr<DenseDecoder>> Create(const DecoderShape& shape,
                                                        const DecoderTensors& tensors,
                                                        Device device,
                                                        KvPoolOptions kv_options = {});

  Device device() const { return device_; }
  const DecoderShape& shape() const { return shape_; }
  size_t weight_bytes() const { return weight_bytes_; }

  // The shared page pool (pages in use, reserved bytes).
  const kv::PagePool& kv_pool() const { return *pool_; }

  // An empty cache for up to `capacity` tokens; its pages come from the pool as it grows.
  StatusOr<std::unique_ptr<KvCache>> NewCache(int64_t capacity) const;

  // Feeds `ids` (or `embeds` [T, H] f32 on any device: token embeddings with visual features
  // merged in) at positions cache.length() .. +T-1 and appends their K/V. Returns the last
  // position's logits [1, V] f32 ON THE DEVICE. OUT_OF_RANGE when the cache would overflow or an
  // id is outside the vocabulary, RESOURCE_EXHAUSTED when the pool has too few free pages; the
  // cache is then unchanged.
  StatusOr<Tensor> Prefill(KvCache& cache, std::span<const int32_t> ids) const;
  StatusOr<Tensor> PrefillEmbeds(KvCache& cache, const Tensor& embeds) const;

  // One decode step for a batch: tokens[b] is fed to caches[b] (distinct caches). The dense work
  // runs once over the B rows; attention runs per sequence over its own cache. Returns logits
  // [B, V] f32 on the device. RESOURCE_EXHAUSTED, caches unchanged, when the pool is full.
  StatusOr<Tensor> DecodeStep(std::span<KvCache* const> caches,
                              std::span<const int32_t> tokens) const;

 private:
  struct Part {  // one sequence's rows [row0, row0 + rows) of a step
    KvCache* cache;
    int64_t row0;
    int64_t rows;
  };
  DenseDecoder(DecoderShape shape, Device device) : shape_(std::move(shape)), device_(device) {}

  // x [T, H] through every layer in place, then the logits of each part's last row [parts, V];
  // the parts' caches grow by their rows only when all of it succeeded.
  StatusOr<Tensor> Forward(Tensor& x, std::span<const Part> parts) const;
  // Forward after the pages are reserved; on failure Forward gives back what it reserved.
  StatusOr<Tensor> ForwardReserved(Tensor& x, std::span<const Part> parts) const;
  // positions [T] on the device; host_positions the same values on the host (checked there).
  Status Layer(int l, std::span<const Part> parts, const Tensor& positions,
               std::span<const int32_t> host_positions, Tensor& x) const;
  // The rest of a layer after attention: x += o_proj(attn); x += MLP(RMSNorm(x)). h [T, H] is
  // scratch.
  Status Finish(const LayerWeights& w, const Tensor& attn, Tensor& h, Tensor& x) const;
  StatusOr<Tensor> Empty(Shape shape) const;
  // OUT_OF_RANGE unless `tokens` more fit in `cache`.
  Status CheckRoom(const KvCache& cache, int64_t tokens) const;
  // Takes from the pool the pages every layer of each part needs for its new rows; all or none
  // (RESOURCE_EXHAUSTED, nothing taken).
  Status ReservePages(std::span<const Part> parts) const;
  // Returns each part's pages beyond what its stored tokens use (after a failed step).
  void TrimPages(std::span<const Part> parts) const;
  // Row indices, in the pool's one allocation seen as rows of G·d floats, of the keys and the
  // values of `cache`'s layer-l tokens [first, first + count).
  struct PageRows {
    std::vector<int32_t> k, v;
  };
  PageRows RowsOf(const KvCache& cache, int l, int64_t first, int64_t count) const;
  // Writes rows [row0, row0 + rows) of k, v [T, G, d] into `cache`'s layer-l pages at its length.
  Status AppendKv(const Tensor& k, const Tensor& v, int64_t row0, int64_t rows, int l,
                  KvCache& cache) const;
  // The first `tokens` keys and values of `cache`'s layer l, contiguous [1, tokens, G, d].
  Status GatherKv(const KvCache& cache, int l, int64_t tokens, Tensor& k, Tensor& v) const;

  DecoderShape shape_;
  Device device_;
  DecoderTensors w_;  // on device_
  size_t weight_bytes_ = 0;
  std::unique_ptr<kv::PagePool> pool_;  // f32 pages on device_, one preallocated block
  // 16-bit projection weights: the activations already carry bf16-level error, so prefill
  // attention may take the GPU's bf16 tensor cores (ops::AttentionParams).
  bool bf16_attention_ = false;
  // Set once PagedDecodeAttention answered UNIMPLEMENTED for this head size on this device, so
  // later steps go straight to per-sequence attention.
  mutable std::atomic<bool> paged_decode_unbuilt_{false};
};

}  // namespace framezip::engine::dense
