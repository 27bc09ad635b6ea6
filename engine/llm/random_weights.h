// Random decoder weights generated in memory, for benchmarks and tests that need a model of a
// real shape (Qwen2-0.5B: hidden 896, 24 layers, 14/2 heads, intermediate 4864, vocab 151936)
// without any file. Values are uniform with the given standard deviation (norm weights are 1 + a
// little noise) — statistically dull, but every GEMM, norm and attention runs at full size.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/llm/decoder.h"
#include "engine/model/config.h"

namespace framezip::engine::llm {

// The text config of Qwen2-0.5B (llava-onevision-qwen2-0.5b's language model).
model::TextConfig Qwen2_0_5BConfig();

// Owns the storage of random weights; `weights` holds views of it (valid while this lives).
struct RandomDecoderWeights {
  std::vector<Tensor> storage;
  DecoderWeights weights;
};

// Weights in `dtype` (f32, bf16 or f16), deterministic in `seed`. Tied embeddings when
// config.tie_word_embeddings. Generation runs on ComputePool().
StatusOr<RandomDecoderWeights> MakeRandomDecoderWeights(const model::TextConfig& config,
                                                        DType dtype, uint64_t seed,
                                                        float stddev = 0.02f);

// A tensor of uniform random values with standard deviation `stddev` around `mean`.
StatusOr<Tensor> RandomTensor(Shape shape, DType dtype, uint64_t seed, float stddev,
                              float mean = 0.f);

}  // namespace framezip::engine::llm
