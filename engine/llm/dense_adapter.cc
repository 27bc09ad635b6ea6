#include "engine/llm/dense_adapter.h"

namespace framezip::engine::llm {

dense::DecoderShape DenseShapeOf(const model::TextConfig& c) {
  dense::DecoderShape s;
  s.hidden = c.hidden_size;
  s.layers = c.num_hidden_layers;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate_size;
  s.vocab = c.vocab_size;
  s.rms_eps = static_cast<float>(c.rms_norm_eps);
  s.rope = RopeParamsOf(c);
  return s;
}

dense::DecoderTensors DenseTensorsOf(const DecoderWeights& w) {
  dense::DecoderTensors t;
  t.embed = w.embed_tokens;
  t.norm = w.norm;
  t.lm_head = w.lm_head;
  for (const model::TextLayerWeights& L : w.layers) {
    dense::LayerWeights d;
    d.input_norm = L.input_layernorm;
    d.q = L.q_proj;
    d.q_bias = L.q_bias;
    d.k = L.k_proj;
    d.k_bias = L.k_bias;
    d.v = L.v_proj;
    d.v_bias = L.v_bias;
    d.o = L.o_proj;
    d.o_bias = L.o_bias;
    d.post_norm = L.post_attention_layernorm;
    d.gate = L.gate_proj;
    d.gate_bias = L.gate_bias;
    d.up = L.up_proj;
    d.up_bias = L.up_bias;
    d.down = L.down_proj;
    d.down_bias = L.down_bias;
    t.layers.push_back(std::move(d));
  }
  return t;
}

}  // namespace framezip::engine::llm
