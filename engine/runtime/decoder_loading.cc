#include "engine/runtime/decoder_loading.h"

#include <utility>

namespace framezip::engine::runtime {

ops::RopeParams RopeParamsOf(const model::TextConfig& c) {
  ops::RopeParams p;
  p.head_dim = static_cast<int>(c.head_dim);
  p.theta = c.rope_theta;
  if (c.rope_scaling.type == model::RopeScaling::Type::kLlama3) {
    p.llama3_factor = c.rope_scaling.factor;
    p.llama3_low_freq_factor = c.rope_scaling.low_freq_factor;
    p.llama3_high_freq_factor = c.rope_scaling.high_freq_factor;
    p.llama3_original_max_positions =
        static_cast<double>(c.rope_scaling.original_max_position_embeddings);
  }
  return p;
}

StatusOr<llm::DecoderShape> DecoderShapeOf(const model::TextConfig& c) {
  if (c.hidden_act != model::Activation::kSilu) {
    return UnimplementedError("decoder: hidden_act {} (only silu)",
                              model::ActivationName(c.hidden_act));
  }
  if (c.use_sliding_window) {
    return UnimplementedError("decoder: sliding-window attention is not implemented");
  }
  llm::DecoderShape s;
  s.hidden = c.hidden_size;
  s.layers = c.num_hidden_layers;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate_size;
  s.vocab = c.vocab_size;
  s.rms_eps = static_cast<float>(c.rms_norm_eps);
  s.qkv_bias = c.qkv_bias;
  s.rope = RopeParamsOf(c);
  return s;
}

StatusOr<llm::DecoderWeights> DecoderWeightsFromModel(const model::ModelWeights& weights,
                                                      const model::TextConfig& config) {
  llm::DecoderWeights d;
  d.embed_tokens = weights.Get(model::TextName("embed_tokens.weight"));
  d.norm = weights.Get(model::TextName("norm.weight"));
  const Tensor* head = weights.Find(model::kLmHead);
  d.lm_head = head != nullptr ? *head : d.embed_tokens;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const model::TextLayerWeights t = weights.TextLayer(l);
    // A compressed-tensors int8 checkpoint's projections come with their scales
    // (model/stored_quantization.h); a 16-bit one gets them from llm::QuantizeProjectionsInt8
    // (llm/quantized_projections.h) when int8 is asked for.
    const auto scale = [&](std::string_view projection) {
      const Tensor* s =
          weights.Find(model::TextLayerName(l, fmt::format("{}.weight_scale", projection)));
      return s != nullptr ? *s : Tensor();
    };
    d.layers.push_back(llm::LayerWeights{.input_layernorm = t.input_layernorm,
                                         .q_proj = t.q_proj,
                                         .q_bias = t.q_bias,
                                         .k_proj = t.k_proj,
                                         .k_bias = t.k_bias,
                                         .v_proj = t.v_proj,
                                         .v_bias = t.v_bias,
                                         .o_proj = t.o_proj,
                                         .o_bias = t.o_bias,
                                         .post_attention_layernorm = t.post_attention_layernorm,
                                         .gate_proj = t.gate_proj,
                                         .gate_bias = t.gate_bias,
                                         .up_proj = t.up_proj,
                                         .up_bias = t.up_bias,
                                         .down_proj = t.down_proj,
                                         .down_bias = t.down_bias,
                                         .q_scale = scale("self_attn.q_proj"),
                                         .k_scale = scale("self_attn.k_proj"),
                                         .v_scale = scale("self_attn.v_proj"),
                                         .o_scale = scale("self_attn.o_proj"),
                                         .gate_scale = scale("mlp.gate_proj"),
                                         .up_scale = scale("mlp.up_proj"),
                                         .down_scale = scale("mlp.down_proj")});
  }
  return d;
}

StatusOr<std::unique_ptr<llm::Decoder>> CreateDecoder(const model::TextConfig& config,
                                                      llm::DecoderWeights weights, Device device) {
  FZ_ASSIGN_OR_RETURN(const llm::DecoderShape shape, DecoderShapeOf(config));
  return llm::Decoder::Create(shape, std::move(weights), device);
}

}  // namespace framezip::engine::runtime
