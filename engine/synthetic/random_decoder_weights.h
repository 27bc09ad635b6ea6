// Random decoder weights generated in memory, for benchmarks and tests that need a model of a
// real shape (Qwen2-0.5B: hidden 896, 24 layers, 14/2 heads, intermediate 4864, vocab 151936)
// without any file. Values are uniform with the given standard deviation (norm weights are 1 + a
// little noise) — statistically dull, but every GEMM, norm and attention runs at full size.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/llm/decoder_shape.h"

namespace framezip::engine::llm {

// The shape of Qwen2-0.5B (llava-onevision-qwen2-0.5b's language model; q/k/v biases, tied head,
// RoPE θ 1e6).
DecoderShape Qwen2_0_5BShape();
// The shape of Qwen2-7B (hidden 3584, 28 layers, 28/4 heads of 128, intermediate 18944, vocabulary
// 152064; q/k/v biases, untied head, RoPE θ 1e6), with `layers` of its 28 layers.
DecoderShape Qwen2_7BShape(int64_t layers = 28);

// Owns the storage of random weights; `weights` holds views of it (valid while this lives).
struct RandomDecoderWeights {
  std::vector<Tensor> storage;
  DecoderWeights weights;
};

struct RandomWeightOptions {
  DType dtype = DType::kF32;  // f32, bf16 or f16
  uint64_t seed = 1;
  float stddev = 0.02f;
  bool o_bias = false;        // Llama's attention_bias
  bool mlp_bias = false;      // Llama's mlp_bias
  bool tied_lm_head = false;  // lm_head is the embedding
};

// Weights of `shape` (q/k/v biases when shape.qkv_bias), deterministic in options.seed.
// Generation runs on ComputePool().
StatusOr<RandomDecoderWeights> MakeRandomDecoderWeights(const DecoderShape& shape,
                                                        const RandomWeightOptions& options);

// A tensor of uniform random values with standard deviation `stddev` around `mean`.
StatusOr<Tensor> RandomTensor(Shape shape, DType dtype, uint64_t seed, float stddev,
                              float mean = 0.f);

}  // namespace framezip::engine::llm
