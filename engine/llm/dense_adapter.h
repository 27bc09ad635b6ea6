// The inputs of dense::DenseDecoder (which knows no model format) from a loaded checkpoint's
// decoder: the shape from its TextConfig, the tensors from its DecoderWeights (views, no copy).
#pragma once

#include "engine/dense/dense_decoder.h"
#include "engine/llm/decoder.h"
#include "engine/model/config.h"

namespace framezip::engine::llm {

dense::DecoderShape DenseShapeOf(const model::TextConfig& config);
dense::DecoderTensors DenseTensorsOf(const DecoderWeights& weights);

}  // namespace framezip::engine::llm
