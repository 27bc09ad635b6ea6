// What llm::Decoder needs to know of a model, and nothing of any model format: the shape of a
// Qwen2 / Llama decoder (engine/model/README.md) and views of its tensors on any device.
// Loading them from a model directory is runtime/decoder_loading.h's job, so the decoder builds
// without the model loader (the GPU check compiles it alone).
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/rope.h"

namespace framezip::engine::llm {

struct DecoderShape {
  int64_t hidden = 0;        // H
  int64_t layers = 0;        // L
  int64_t heads = 0;         // query heads
  int64_t kv_heads = 0;      // G; heads % kv_heads == 0
  int64_t head_dim = 0;      // d, even
  int64_t intermediate = 0;  // I, the MLP's width
  int64_t vocab = 0;         // V
  float rms_eps = 1e-6f;
  // Qwen2's q/k/v projections have biases: Create refuses weights without them, so a checkpoint
  // that lost them fails loudly instead of running a different model.
  bool qkv_bias = false;
  ops::RopeParams rope;  // rope.head_dim == head_dim

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

// One layer's tensors (f32, bf16 or f16, see ops::Linear). Optional biases are undefined tensors.
// A projection may instead be int8 [N, K] (ops/quantize_int8.h, the CPU only) or FP8 E4M3
// (ops/quantize_fp8.h, sm_90 GPUs only) with its per-output-channel f32 scales [N] in the
// matching *_scale; the scales are undefined otherwise.
struct LayerWeights {
  Tensor input_layernorm;           // [H]
  Tensor q_proj, q_bias;            // [heads·d, H], [heads·d]
  Tensor k_proj, k_bias;            // [G·d, H], [G·d]
  Tensor v_proj, v_bias;            // [G·d, H], [G·d]
  Tensor o_proj, o_bias;            // [H, heads·d], [H]
  Tensor post_attention_layernorm;  // [H]
  Tensor gate_proj, gate_bias;      // [I, H], [I]
  Tensor up_proj, up_bias;          // [I, H], [I]
  Tensor down_proj, down_bias;      // [H, I], [H]
  Tensor q_scale, k_scale, v_scale, o_scale, gate_scale, up_scale, down_scale;
  // Set by the decoder where it fuses projections (Decoder::Create, ProjectionLayout::kFused):
  // q/k/v as one [(heads + 2G)·d, H] weight (and bias, and scales when quantised) and gate/up as
  // one [2I, H]; their separate tensors are then left undefined. Never set by a loader.
  Tensor qkv_proj = {}, qkv_bias = {}, gate_up_proj = {};
  Tensor qkv_scale = {}, gate_up_scale = {};
};

// A layer's seven projections with their scale slots and names (q/k/v/o, gate/up/down), for code
// that treats them alike (checks, quantisation). Layer: LayerWeights or const LayerWeights.
template <class Layer>
auto LayerProjections(Layer& L) {
  using T = std::conditional_t<std::is_const_v<Layer>, const Tensor, Tensor>;
  struct Projection {
    T* weight;
    T* scale;
    const char* name;
  };
  return std::array<Projection, 7>{{{&L.q_proj, &L.q_scale, "q_proj"},
                                    {&L.k_proj, &L.k_scale, "k_proj"},
                                    {&L.v_proj, &L.v_scale, "v_proj"},
                                    {&L.o_proj, &L.o_scale, "o_proj"},
                                    {&L.gate_proj, &L.gate_scale, "gate_proj"},
                                    {&L.up_proj, &L.up_scale, "up_proj"},
                                    {&L.down_proj, &L.down_scale, "down_proj"}}};
}

// Every tensor slot of a layer (weights, biases, norms, scales, the fused ones), for code that
// treats them all alike (device copies, byte counts). Layer: LayerWeights or const LayerWeights.
template <class Layer>
auto LayerTensors(Layer& L) {
  using T = std::conditional_t<std::is_const_v<Layer>, const Tensor, Tensor>;
  return std::array<T*, 28>{
      &L.input_layernorm, &L.q_proj,    &L.q_bias,       &L.k_proj,   &L.k_bias,
      &L.v_proj,          &L.v_bias,    &L.o_proj,       &L.o_bias,   &L.post_attention_layernorm,
      &L.gate_proj,       &L.gate_bias, &L.up_proj,      &L.up_bias,  &L.down_proj,
      &L.down_bias,       &L.q_scale,   &L.k_scale,      &L.v_scale,  &L.o_scale,
      &L.gate_scale,      &L.up_scale,  &L.down_scale,   &L.qkv_proj, &L.qkv_bias,
      &L.gate_up_proj,    &L.qkv_scale, &L.gate_up_scale};
}

// Views: whoever made them keeps the storage alive (ModelWeights' mmaps, or the caller's
// buffers). The decoder copies them to its device at Create when they are elsewhere.
struct DecoderWeights {
  Tensor embed_tokens;               // [V, H]
  std::vector<LayerWeights> layers;  // L entries
  Tensor norm;                       // [H]
  Tensor lm_head;                    // [V, H]; the embedding itself when tied
  Tensor lm_head_scale;  // [V] f32 when lm_head is int8 (its own copy, not tied), else undefined
};

}  // namespace framezip::engine::llm
