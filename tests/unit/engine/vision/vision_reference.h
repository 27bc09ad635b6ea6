// A deliberately naive f64 transcription of transformers' SigLIP/CLIP vision towers, the LLaVA
// projector and OV's video pooling, used as the higher-precision reference of the vision tests.
// Weights are read from a canonical-name tensor map (any float dtype, widened exactly).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/model/config.h"

namespace framezip::testing {

using WeightMap = std::map<std::string, engine::Tensor>;

// How the encoder layers' six projections take their inputs: exactly, or quantised per row to
// int8 as ops::Linear's int8 overload does (scale max|row| / 127, codes rounded half to even),
// the reference of --vision-weight-format int8 (whose weights the map then holds as q · scale).
enum class EncoderInputs { kExact, kInt8PerRow };

// hidden_states[0 .. L] of the tower for pixels [N, C, S, S] (f32 values, rounded to the patch
// weight's dtype first, as the reference does): each [N·T·D] row-major.
std::vector<std::vector<double>> ReferenceHiddenStates(
    const engine::model::VisionConfig& config, const WeightMap& w, const std::vector<float>& pixels,
    int64_t N, EncoderInputs inputs = EncoderInputs::kExact);

// Selected + concatenated features [N, T_sel, D·nL] (vision_feature_layer, select strategy).
std::vector<double> ReferenceFeatures(const engine::model::LlavaConfig& config, const WeightMap& w,
                                      const std::vector<float>& pixels, int64_t N);

// Projector on rows of width D·nL -> rows of width H.
std::vector<double> ReferenceProject(const engine::model::LlavaConfig& config, const WeightMap& w,
                                     const std::vector<double>& x);

// OV video features: [F·p² + 1, H] (p = ceil(G/2)), newline last.
std::vector<double> ReferenceVideo(const engine::model::LlavaConfig& config, const WeightMap& w,
                                   const std::vector<float>& frames, int64_t F);

}  // namespace framezip::testing
