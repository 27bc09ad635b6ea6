#include "engine/synthetic/random_model_weights.h"

#include "engine/runtime/decoder_loading.h"

namespace framezip::engine::runtime {

model::TextConfig Qwen2_0_5BConfig() {
  // The numbers live once, in llm::Qwen2_0_5BShape; this adds what only a config has.
  const llm::DecoderShape s = llm::Qwen2_0_5BShape();
  model::TextConfig c;
  c.arch = model::TextArch::kQwen2;
  c.model_type = "qwen2";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.max_position_embeddings = 32768;
  c.rms_norm_eps = s.rms_eps;
  c.rope_theta = s.rope.theta;
  c.qkv_bias = s.qkv_bias;
  c.tie_word_embeddings = true;
  return c;
}

StatusOr<llm::RandomDecoderWeights> MakeRandomDecoderWeights(const model::TextConfig& config,
                                                             DType dtype, uint64_t seed,
                                                             float stddev) {
  FZ_ASSIGN_OR_RETURN(llm::DecoderShape shape, DecoderShapeOf(config));
  llm::RandomWeightOptions options;
  options.dtype = dtype;
  options.seed = seed;
  options.stddev = stddev;
  options.o_bias = config.o_bias;
  options.mlp_bias = config.mlp_bias;
  options.tied_lm_head = config.tie_word_embeddings;
  return llm::MakeRandomDecoderWeights(shape, options);
}

}  // namespace framezip::engine::runtime
