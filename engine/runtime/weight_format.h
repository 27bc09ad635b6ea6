// How the decoder's projection weights are held in memory (EngineOptions::weight_format, the
// CLI's and the server's --weight-format):
//   bf16: as the checkpoint stores them (bf16 for the shipped and the published models; an f32
//         checkpoint stays f32): today's behaviour, and the default.
//   int8: the seven projections of every decoder layer (q/k/v/o, gate/up/down) and the LM head
//         quantised at load to symmetric int8 per output channel with f32 scales
//         (ops/quantize_int8.h): half the bytes a decode step reads; the CPU only
//         (ops/gemm_int8.h). The token embedding stays 16-bit: it is a row gather per token,
//         not a GEMM. The head is quantised although Qwen2-0.5B ties it to the embedding, so the
//         int8 head is a second copy (136 M parameters, 130 MiB): it is 27 % of the model's
//         weights and decode reads all of it every step, so keeping it 16-bit would leave decode
//         reading 0.63 GB a token instead of 0.50 (llama.cpp's Q8_0 quantises it as well).
//   fp8:  the same seven projections and the LM head quantised at load to FP8 E4M3 per output
//         channel (ops/quantize_fp8.h), for GPUs whose cuBLASLt applies per-channel scales in an
//         FP8 GEMM (sm_90, Hopper: ops::Fp8LinearAvailable): half a bf16 model's weight bytes,
//         and x quantised per row to E4M3 at each GEMM. On another GPU the engine keeps bf16
//         weights and says so in its log and in GetModelInfo; the CPU refuses it (no FP8
//         arithmetic: int8 is the CPU's 8-bit format). cuBLASLt's FP8 GEMM needs in % 16 == 0
//         and out % 4 == 0, as every published Qwen2 size has; a projection without them keeps
//         its 16-bit weight (logged at load).
// The vision tower has its own format (EngineOptions::vision_weight_format,
// --vision-weight-format): bf16 by default (fp8 is not offered for it); int8 quantises the six
// projections of every encoder layer (q/k/v/out, fc1, fc2) at load the same way, CPU only. The
// patch embedding and the projector stay 16-bit: they are under 1 % of the tower's FLOPs. A ViT's
// activations carry outlier channels that per-row activation quantisation spreads over the whole
// row, so int8 is an option whose accuracy the eval measures (bench/RESULTS.md), not the default. A
// checkpoint stored in int8 (compressed-tensors, model/stored_quantization.h) arrives with its
// projections int8 already: they run as stored under every format (int8 quantises only what is
// still 16-bit, such as the head), on the CPU only. A checkpoint stored in FP8 arrives with its
// projections decoded to bf16 (model/quantized_tensors.h): every format treats them as a bf16
// checkpoint's.
#pragma once

#include <string_view>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/llm/decoder_shape.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::runtime {

enum class WeightFormat { kBf16, kInt8, kFp8 };

std::string_view WeightFormatName(WeightFormat format);  // "bf16", "int8", "fp8"

// INVALID_ARGUMENT naming the accepted values for anything else.
StatusOr<WeightFormat> ParseWeightFormat(std::string_view name);

// OK where `format` can be asked for on `device`; UNIMPLEMENTED naming what is missing otherwise
// (int8 off the CPU, fp8 on the CPU). fp8 on a GPU passes: EffectiveWeightFormat says what runs.
Status CheckWeightFormat(WeightFormat format, Device device);

// The format the decoder's projections are held in when `format` is asked for on `device`: fp8
// becomes bf16 on a GPU without FP8 GEMMs with per-channel scales (before sm_90); the rest as
// asked.
WeightFormat EffectiveWeightFormat(WeightFormat format, Device device);

// The decoder's projections are quantised by llm::QuantizeProjectionsInt8 / Fp8
// (llm/quantized_projections.h).

// Replaces the six projections of every encoder layer of `tower` (CPU tensors, f32/bf16/f16) by
// owning int8 copies with their scales (EncoderLayerWeights::*_scale), in place.
Status QuantizeVisionProjections(vision::VisionTowerWeights& tower);

}  // namespace framezip::engine::runtime
