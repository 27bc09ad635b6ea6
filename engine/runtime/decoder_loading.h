// From a Hugging Face text config and a bound checkpoint to llm::Decoder's plain inputs
// (llm/decoder_shape.h): the decoder knows no model format, this file knows both.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/llm/decoder.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace framezip::engine::runtime {

// The RoPE of `config` (rope_theta, and the llama3 band scaling when rope_scaling asks for it).
ops::RopeParams RopeParamsOf(const model::TextConfig& config);

// The decoder shape of `config`. UNIMPLEMENTED for what the decoder does not run (an activation
// other than silu, sliding-window attention), naming it.
StatusOr<llm::DecoderShape> DecoderShapeOf(const model::TextConfig& config);

// The text-model tensors of a bound LLaVA checkpoint (lm_head already tied by Bind), as views.
StatusOr<llm::DecoderWeights> DecoderWeightsFromModel(const model::ModelWeights& weights,
                                                      const model::TextConfig& config);

// DecoderShapeOf(config), then llm::Decoder::Create on `device`.
StatusOr<std::unique_ptr<llm::Decoder>> CreateDecoder(const model::TextConfig& config,
                                                      llm::DecoderWeights weights,
                                                      Device device = Device::Cpu());

}  // namespace framezip::engine::runtime
