#include "engine/synthetic/random_decoder_weights.h"

#include <cmath>

#include "engine/core/half.h"
#include "engine/core/thread_pool.h"

namespace framezip::engine::llm {
namespace {

// splitmix64: a fast counter-based generator, so chunks can be filled in parallel yet the values
// depend only on (seed, index).
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

DecoderShape Qwen2_0_5BShape() {
  DecoderShape s;
  s.hidden = 896;
  s.layers = 24;
  s.heads = 14;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.intermediate = 4864;
  s.vocab = 151936;
  s.rms_eps = 1e-6f;
  s.qkv_bias = true;
  s.rope.head_dim = 64;
  s.rope.theta = 1e6;
  return s;
}

DecoderShape Qwen2_7BShape(int64_t layers) {
  DecoderShape s;
  s.hidden = 3584;
  s.layers = layers;
  s.heads = 28;
  s.kv_heads = 4;
  s.head_dim = 128;
  s.intermediate = 18944;
  s.vocab = 152064;
  s.rms_eps = 1e-6f;
  s.qkv_bias = true;
  s.rope.head_dim = 128;
  s.rope.theta = 1e6;
  return s;
}

StatusOr<Tensor> RandomTensor(Shape shape, DType dtype, uint64_t seed, float stddev, float mean) {
  FZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(shape), dtype));
  const float half_width = stddev * std::sqrt(3.0f);  // uniform [-a, a] has std a/√3
  const uint64_t base = Mix(seed);
  void* p = t.raw_data();
  ComputePool().ParallelFor(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t r = Mix(base ^ static_cast<uint64_t>(i));
      const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      const float v = mean + (2 * u - 1) * half_width;
      switch (dtype) {
        case DType::kBF16:
          static_cast<BFloat16*>(p)[i] = F32ToBF16(v);
          break;
        case DType::kF16:
          static_cast<Float16*>(p)[i] = F32ToF16(v);
          break;
        default:
          static_cast<float*>(p)[i] = v;
          break;
      }
    }
  });
  return t;
}

StatusOr<RandomDecoderWeights> MakeRandomDecoderWeights(const DecoderShape& c,
                                                        const RandomWeightOptions& options) {
  RandomDecoderWeights r;
  const DType dtype = options.dtype;
  const float stddev = options.stddev;
  uint64_t next = options.seed * 1000003;
  auto make = [&](Shape shape, float sd, float mean = 0.f) -> StatusOr<Tensor> {
    FZ_ASSIGN_OR_RETURN(Tensor t, RandomTensor(std::move(shape), dtype, ++next, sd, mean));
    r.storage.push_back(t);
    return t;
  };
  const int64_t h = c.hidden, q = c.q_dim(), kvd = c.kv_dim(), im = c.intermediate;
  DecoderWeights& w = r.weights;
  FZ_ASSIGN_OR_RETURN(w.embed_tokens, make({c.vocab, h}, stddev));
  for (int64_t l = 0; l < c.layers; ++l) {
    LayerWeights L;
    FZ_ASSIGN_OR_RETURN(L.input_layernorm, make({h}, 0.1f, 1.f));
    FZ_ASSIGN_OR_RETURN(L.q_proj, make({q, h}, stddev));
    FZ_ASSIGN_OR_RETURN(L.k_proj, make({kvd, h}, stddev));
    FZ_ASSIGN_OR_RETURN(L.v_proj, make({kvd, h}, stddev));
    if (c.qkv_bias) {
      FZ_ASSIGN_OR_RETURN(L.q_bias, make({q}, stddev));
      FZ_ASSIGN_OR_RETURN(L.k_bias, make({kvd}, stddev));
      FZ_ASSIGN_OR_RETURN(L.v_bias, make({kvd}, stddev));
    }
    FZ_ASSIGN_OR_RETURN(L.o_proj, make({h, q}, stddev));
    if (options.o_bias) {
      FZ_ASSIGN_OR_RETURN(L.o_bias, make({h}, stddev));
    }
    FZ_ASSIGN_OR_RETURN(L.post_attention_layernorm, make({h}, 0.1f, 1.f));
    FZ_ASSIGN_OR_RETURN(L.gate_proj, make({im, h}, stddev));
    FZ_ASSIGN_OR_RETURN(L.up_proj, make({im, h}, stddev));
    FZ_ASSIGN_OR_RETURN(L.down_proj, make({h, im}, stddev));
    if (options.mlp_bias) {
      FZ_ASSIGN_OR_RETURN(L.gate_bias, make({im}, stddev));
      FZ_ASSIGN_OR_RETURN(L.up_bias, make({im}, stddev));
      FZ_ASSIGN_OR_RETURN(L.down_bias, make({h}, stddev));
    }
    w.layers.push_back(std::move(L));
  }
  FZ_ASSIGN_OR_RETURN(w.norm, make({h}, 0.1f, 1.f));
  if (options.tied_lm_head) {
    w.lm_head = w.embed_tokens;
  } else {
    FZ_ASSIGN_OR_RETURN(w.lm_head, make({c.vocab, h}, stddev));
  }
  return r;
}

}  // namespace framezip::engine::llm
