// The decoder's projections quantised at load (--weight-format int8 or fp8;
// runtime/weight_format.h says which format runs where): the seven projections of every layer
// (q/k/v/o, gate/up/down) and the LM head become owning 8-bit copies with per-output-channel f32
// scales (LayerWeights::*_scale, DecoderWeights::lm_head_scale), in place; the views they replace
// are dropped (the checkpoint's mmap stays with its owner). The embedding is kept as it is: it is a
// row gather per token, not a GEMM. Tensors already int8 or FP8 stay.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/llm/decoder_shape.h"

namespace framezip::engine::llm {

// int8 (ops/quantize_int8.h), for the CPU's int8 kernels; the head only with `lm_head`.
Status QuantizeProjectionsInt8(DecoderWeights& weights, bool lm_head = true);

// FP8 E4M3 (ops/quantize_fp8.h), for cuBLASLt's FP8 GEMMs. A projection whose shape that GEMM
// cannot take (in % 16 != 0 or out % 4 != 0) keeps its 16-bit weight: the list names those
// ("layers.0.q_proj [N, K]"), for the caller to log.
StatusOr<std::vector<std::string>> QuantizeProjectionsFp8(DecoderWeights& weights);

}  // namespace framezip::engine::llm
