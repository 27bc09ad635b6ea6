// A naive f64 forward pass of the Qwen2/Llama decoder (engine/llm/decoder.h) over the same
// weights, with its own KV cache: the reference of the decoder's CPU tests (decoder_test.cc) and
// of its device cases (decoder_device_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/llm/decoder_shape.h"
#include "engine/model/config.h"

namespace framezip::engine::llm::reference {

// What the reference reads of a model's shape.
struct ReferenceShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double rms_eps = 1e-6, rope_theta = 1e4;
};
ReferenceShape ReferenceShapeOf(const model::TextConfig& c);
ReferenceShape ReferenceShapeOf(const DecoderShape& s);

struct ReferenceOptions {
  // Every Linear of bf16 weights sees its input rounded to bf16, as Linear's AMX path computes it.
  bool bf16_linear_inputs = false;
  // Cached keys and values are rounded to f16, as f16 KV pages hold them.
  bool f16_kv = false;
};

// One sequence through the model in f64, its keys (after RoPE) and values cached per layer.
// Attention follows the decoder's KV backend: a prefill chunk attends to the cache as stored and
// to its own rows as computed (unrounded); a decode token is stored first and attended through the
// cache, its own row rounded like the rest.
class ReferenceDecoder {
 public:
  // `weights` must outlive the reference.
  ReferenceDecoder(const ReferenceShape& shape, const DecoderWeights& weights,
                   ReferenceOptions options = {});

  // One prefill chunk: logits [n, V] of every row, row-major.
  std::vector<double> Prefill(std::span<const int32_t> ids);
  // One decode token: its logits [V].
  std::vector<double> Decode(int32_t id);

  int64_t length() const { return length_; }

 private:
  std::vector<double> Forward(std::span<const int32_t> ids, bool attend_own_rows_as_stored);

  ReferenceShape shape_;
  const DecoderWeights& weights_;
  ReferenceOptions options_;
  int64_t length_ = 0;
  std::vector<std::vector<double>> keys_, values_;  // per layer: [length, G, d] as stored
};

// y[T, N] = x[T, K] · W[N, K]ᵀ + b; with bf16_inputs and bf16 weights, x is rounded to bf16 first
// (Linear's AMX path). With int8 weights (scale defined) W is q · scale and each row of x is
// quantised to int8 first, as Linear's int8 overload does (ops/gemm_int8.h).
std::vector<double> RefLinear(std::vector<double> x, int64_t t, const Tensor& w, const Tensor& b,
                              bool bf16_inputs, const Tensor& scale = Tensor());

// Logits [T, V] of the naive f64 model for `ids` prefilled at once from position 0; with
// bf16_linear_inputs, every Linear of bf16 weights sees its input rounded to bf16.
std::vector<double> RefForward(const model::TextConfig& c, const DecoderWeights& w,
                               const std::vector<int32_t>& ids, bool bf16_linear_inputs = false);

}  // namespace framezip::engine::llm::reference
