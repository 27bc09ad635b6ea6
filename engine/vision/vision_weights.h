// Weights of the vision side of a LLaVA model: the ViT tower (SigLIP or CLIP), the mlp2x_gelu
// projector and image_newline. Tensors stay in their stored dtype (f32 / f16 / bf16) and usually
// borrow the mmapped checkpoint; nothing here copies weight data.
//
// Names are the canonical (transformers >= 4.52) layout, docs/models.md §5.2-§5.3:
//   model.vision_tower.vision_model.embeddings.patch_embedding.{weight [D, C, P, P], bias [D]}
//   model.vision_tower.vision_model.embeddings.position_embedding.weight    [positions, D]
//   model.vision_tower.vision_model.embeddings.class_embedding              [D]  (CLIP only)
//   model.vision_tower.vision_model.pre_layrnorm.{weight,bias}              [D]  (CLIP only, sic)
//   model.vision_tower.vision_model.encoder.layers.N.{layer_norm1,layer_norm2}.{weight,bias} [D]
//   model.vision_tower.vision_model.encoder.layers.N.self_attn.{q,k,v,out}_proj.{weight [D, D],
//   bias [D]} model.vision_tower.vision_model.encoder.layers.N.mlp.fc1.{weight [I, D], bias [I]}
//   model.vision_tower.vision_model.encoder.layers.N.mlp.fc2.{weight [D, I], bias [D]}
//   model.multi_modal_projector.linear_1.{weight [H, D·nL], bias [H]}
//   model.multi_modal_projector.linear_2.{weight [H, H], bias [H]}
//   model.image_newline [H]
// (D vision hidden, I vision intermediate, H text hidden, nL number of feature layers.)
// post_layernorm and the SigLIP head are never bound: LLaVA does not use them (docs/models.md §3).
#pragma once

#include <array>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"

namespace framezip::engine::model {
class ModelWeights;
}  // namespace framezip::engine::model

namespace framezip::engine::vision {

// One pre-LN encoder block: x += out_proj(attn(LN1(x))); x += fc2(act(fc1(LN2(x)))).
struct EncoderLayerWeights {
  Tensor ln1_weight, ln1_bias;                    // [D]
  Tensor q_weight, q_bias, k_weight, k_bias;      // [D, D], [D]
  Tensor v_weight, v_bias, out_weight, out_bias;  // [D, D], [D]
  Tensor ln2_weight, ln2_bias;                    // [D]
  Tensor fc1_weight, fc1_bias;                    // [I, D], [I]
  Tensor fc2_weight, fc2_bias;                    // [D, I], [D]
  // Per-output-channel f32 scales, defined when the six projections above are int8
  // (--vision-weight-format int8: runtime/weight_format.h), else undefined.
  Tensor q_scale, k_scale, v_scale, out_scale, fc1_scale, fc2_scale;
};

struct VisionTowerWeights {
  Tensor patch_weight;        // [D, C·P·P]: the conv kernel [D, C, P, P] viewed as a GEMM matrix
  Tensor patch_bias;          // [D] (SigLIP) or undefined (CLIP has none)
  Tensor class_embedding;     // [D] (CLIP) or undefined
  Tensor position_embedding;  // [positions, D] (positions = patches (+1 for CLIP's class token))
  Tensor pre_ln_weight, pre_ln_bias;  // [D] (CLIP's pre_layrnorm) or undefined
  // Layers 0 .. n-1 where n is the deepest layer the feature selection reads (all of them for
  // vision_feature_layer -1); later layers are never run, so they are not bound.
  std::vector<EncoderLayerWeights> layers;
};

// mlp2x_gelu: y = linear_2(act(linear_1(x))). Biases undefined when multimodal_projector_bias is
// false.
struct ProjectorWeights {
  Tensor linear1_weight, linear1_bias;  // [H, D·nL], [H]
  Tensor linear2_weight, linear2_bias;  // [H, H], [H]
};

// Every tensor slot of each weight struct, for code that treats them all alike (device copies,
// byte counts). W: the struct or its const.
template <class W>
auto EncoderLayerTensors(W& l) {
  using T = std::conditional_t<std::is_const_v<W>, const Tensor, Tensor>;
  return std::array<T*, 22>{&l.ln1_weight, &l.ln1_bias, &l.q_weight,   &l.q_bias,     &l.k_weight,
                            &l.k_bias,     &l.v_weight, &l.v_bias,     &l.out_weight, &l.out_bias,
                            &l.ln2_weight, &l.ln2_bias, &l.fc1_weight, &l.fc1_bias,   &l.fc2_weight,
                            &l.fc2_bias,   &l.q_scale,  &l.k_scale,    &l.v_scale,    &l.out_scale,
                            &l.fc1_scale,  &l.fc2_scale};
}
// The tower's tensors outside its layers.
template <class W>
auto TowerEmbeddingTensors(W& t) {
  using T = std::conditional_t<std::is_const_v<W>, const Tensor, Tensor>;
  return std::array<T*, 6>{&t.patch_weight,       &t.patch_bias,    &t.class_embedding,
                           &t.position_embedding, &t.pre_ln_weight, &t.pre_ln_bias};
}
template <class W>
auto ProjectorTensors(W& p) {
  using T = std::conditional_t<std::is_const_v<W>, const Tensor, Tensor>;
  return std::array<T*, 4>{&p.linear1_weight, &p.linear1_bias, &p.linear2_weight, &p.linear2_bias};
}

struct LlavaVisionWeights {
  VisionTowerWeights tower;
  ProjectorWeights projector;
  Tensor image_newline;  // [H], undefined for models without one (LLaVA-1.5)
};

// Returns the tensor stored under a canonical name, or NOT_FOUND naming it.
using WeightLookup = std::function<StatusOr<Tensor>(const std::string& name)>;

// Number of encoder layers the tower must run so that every configured feature layer exists:
// the deepest index into hidden_states (0 = embeddings, k = output of layer k-1; negative counts
// from the end). INVALID_ARGUMENT naming vision_feature_layer when an index is out of range.
StatusOr<int64_t> LayersNeeded(const model::LlavaConfig& config);

// Binds and checks every tensor the vision path needs. Errors name the tensor: NOT_FOUND when
// missing, INVALID_ARGUMENT when its shape is not the one the config implies or its dtype is not
// f32/f16/bf16.
StatusOr<LlavaVisionWeights> BindLlavaVisionWeights(const model::LlavaConfig& config,
                                                    const WeightLookup& lookup);

// Same, from a loaded checkpoint (model::ModelWeights holds canonical names and has already
// checked shapes; this re-checks what the vision path relies on).
StatusOr<LlavaVisionWeights> BindLlavaVisionWeights(const model::LlavaConfig& config,
                                                    const model::ModelWeights& weights);

// Readies every GEMM weight of the tower and the projector for the CPU's many-row path
// (ops::PrepareLinearWeight: the AMX tile layout, where the CPU has AMX), so the first video does
// not pay the packing, and keeps int8 projections in their packed layout only
// (ops::PackLinearWeight: their row-major bytes are let go, so read them before). Engines on the
// CPU call it at load.
Status PrepareVisionWeights(LlavaVisionWeights& weights);

// The canonical name prefix of the tower ("model.vision_tower.vision_model.").
inline constexpr const char* kVisionTowerPrefix = "model.vision_tower.vision_model.";

}  // namespace framezip::engine::vision
