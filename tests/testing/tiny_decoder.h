// What the decoder, batching and sparse-prefill tests share: a small Qwen2-shaped text config and
// random input rows. Header-only, so the GPU-check build's framezip_testing (engine core only)
// does not need the model, LLM and runtime libraries; the tests that include it link the engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>

#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/random.h"

namespace framezip::testing {

// Qwen2-0.5B's architecture (engine/synthetic/random_decoder_weights.h) shrunk: 3 layers, hidden 128, MLP 96,
// 4 query heads over 2 KV heads of 32 channels (int4/int2 pages need 32-channel groups),
// RoPE θ 1e4.
inline engine::model::TextConfig TinyQwen2Config(int64_t vocab_size = 80) {
  engine::model::TextConfig c = engine::runtime::Qwen2_0_5BConfig();
  c.vocab_size = vocab_size;
  c.hidden_size = 128;
  c.intermediate_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.rope_theta = 1e4;
  return c;
}

// The shipped model's text shape (models/framezip-tiny-video: hidden 128, 4 layers, 4 query heads
// over 2 KV heads, intermediate 384, vocabulary 448, q/k/v biases, RoPE θ 1e4), with heads of
// `head_dim` channels (32 as shipped; 64 as Qwen2-0.5B's).
inline engine::llm::DecoderShape ShippedTextShape(int64_t head_dim = 32) {
  engine::llm::DecoderShape s;
  s.hidden = 128;
  s.layers = 4;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = head_dim;
  s.intermediate = 384;
  s.vocab = 448;
  s.rms_eps = 1e-6f;
  s.qkv_bias = true;
  s.rope.head_dim = static_cast<int>(head_dim);
  s.rope.theta = 1e4;
  return s;
}

// A 3-layer decoder, hidden 64, 4 query heads over 2 KV heads of 16, vocabulary 97: Qwen2-style
// (q/k/v biases, tied head, θ 1e6) or Llama-style (no biases, untied, θ 5e5).
inline engine::model::TextConfig TinyDecoderConfig(bool qwen2) {
  engine::model::TextConfig c;
  c.arch = qwen2 ? engine::model::TextArch::kQwen2 : engine::model::TextArch::kLlama;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = qwen2 ? 1e6 : 5e5;
  c.qkv_bias = qwen2;
  c.tie_word_embeddings = qwen2;
  return c;
}

// [n, hidden] f32 rows drawn from N(0, 1): stand-ins for token embeddings.
inline engine::Tensor RandomEmbeds(int64_t n, int64_t hidden, std::mt19937_64& rng) {
  engine::Tensor e = *engine::Tensor::Empty({n, hidden}, engine::DType::kF32);
  const auto v = RandomNormal(static_cast<size_t>(n * hidden), rng);
  std::copy(v.begin(), v.end(), e.data<float>());
  return e;
}

}  // namespace framezip::testing
