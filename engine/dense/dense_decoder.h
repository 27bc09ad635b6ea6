// DenseDecoder: the Qwen2 / Llama decoder of llm/decoder.h with every tensor on ONE device — the
// weights, the activations and each sequence's KV cache — so that on a GPU a step moves only token
// ids and positions in and logits out. Same math, same ops (each op dispatches on the device of
// its tensors, so the class runs unchanged on the CPU, where tests check it against llm::Decoder).
//
// What it leaves out, on purpose: compression policies and the paged, quantised KV cache. Its
// cache is contiguous and f32, [capacity, G, d] per layer and per K/V, reserved up front. Prefill
// attends with ops::Attention per sequence; a decode step attends with ONE
// ops::PagedDecodeAttention call for the batch (each cache a single f32 span; the split-K kernel on
// a GPU). It is the whole-model GPU path the [cuda] tests compare with the CPU, and what `framezip
// bench gpu` times end to end on the Qwen2-0.5B shape; the compressed engine stays on llm::Decoder.
//
// It depends on the core and the ops only (no model loader), so it builds in the GPU-check
// subset (scripts/gpu-check.sh); llm/dense_adapter.h builds its inputs from a loaded checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
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

// One sequence's KV cache on the decoder's device.
class KvCache {
 public:
  int64_t length() const { return length_; }      // tokens stored = the next token's position
  int64_t capacity() const { return capacity_; }  // tokens it can hold
  size_t bytes() const;                           // device memory it holds

 private:
  friend class DenseDecoder;
  std::vector<Tensor> k_, v_;  // per layer [capacity, G, d] f32
  int64_t length_ = 0;
  int64_t capacity_ = 0;
};

class DenseDecoder {
 public:
  // Checks every shape (INVALID_ARGUMENT naming the tensor) and copies the weights to `device`
  // in their own dtype. RESOURCE_EXHAUSTED when the device memory runs out; UNIMPLEMENTED or
  // UNAVAILABLE for a CUDA device without CUDA support or a GPU.
  static StatusOr<std::unique_ptr<DenseDecoder>> Create(const DecoderShape& shape,
                                                        const DecoderTensors& tensors,
                                                        Device device);

  Device device() const { return device_; }
  const DecoderShape& shape() const { return shape_; }
  size_t weight_bytes() const { return weight_bytes_; }

  // An empty cache for up to `capacity` tokens, allocated now on the device.
  StatusOr<std::unique_ptr<KvCache>> NewCache(int64_t capacity) const;

  // Feeds `ids` (or `embeds` [T, H] f32 on any device: token embeddings with visual features
  // merged in) at positions cache.length() .. +T-1 and appends their K/V. Returns the last
  // position's logits [1, V] f32 ON THE DEVICE. OUT_OF_RANGE when the cache would overflow or an
  // id is outside the vocabulary; the cache is then unchanged.
  StatusOr<Tensor> Prefill(KvCache& cache, std::span<const int32_t> ids) const;
  StatusOr<Tensor> PrefillEmbeds(KvCache& cache, const Tensor& embeds) const;

  // One decode step for a batch: tokens[b] is fed to caches[b] (distinct caches). The dense work
  // runs once over the B rows; attention runs per sequence over its own cache. Returns logits
  // [B, V] f32 on the device.
  StatusOr<Tensor> DecodeStep(std::span<KvCache* const> caches,
                              std::span<const int32_t> tokens) const;

 private:
  struct Part {  // one sequence's rows [row0, row0 + rows) of a step
    KvCache* cache;
    int64_t row0;
    int64_t rows;
  };
  DenseDecoder(DecoderShape shape, Device device) : shape_(std::move(shape)), device_(device) {}

  // x [T, H] through every layer in place, then the logits of each part's last row [parts, V].
  StatusOr<Tensor> Forward(Tensor& x, std::span<const Part> parts) const;
  // positions [T] on the device; host_positions the same values on the host (checked there).
  Status Layer(int l, std::span<const Part> parts, const Tensor& positions,
               std::span<const int32_t> host_positions, Tensor& x) const;
  // The rest of a layer after attention: x += o_proj(attn); x += MLP(RMSNorm(x)). h [T, H] is
  // scratch.
  Status Finish(const LayerWeights& w, const Tensor& attn, Tensor& h, Tensor& x) const;
  StatusOr<Tensor> Empty(Shape shape) const;
  // OUT_OF_RANGE unless `tokens` more fit in `cache`.
  Status CheckRoom(const KvCache& cache, int64_t tokens) const;

  DecoderShape shape_;
  Device device_;
  DecoderTensors w_;  // on device_
  size_t weight_bytes_ = 0;
  // 16-bit projection weights: the activations already carry bf16-level error, so prefill
  // attention may take the GPU's bf16 tensor cores (ops::AttentionParams).
  bool bf16_attention_ = false;
  // Set once PagedDecodeAttention answered UNIMPLEMENTED for this head size on this device, so
  // later steps go straight to per-sequence attention.
  mutable std::atomic<bool> paged_decode_unbuilt_{false};
};

}  // namespace framezip::engine::dense
