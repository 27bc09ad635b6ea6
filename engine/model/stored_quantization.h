// Checkpoints stored quantised: config.json's quantization_config, as transformers reads it.
//
// framezip loads one layout: Hugging Face `compressed-tensors` (the format llm-compressor writes
// and vLLM serves) with int8 weights, symmetric, one scale per output channel, for Linear layers
// ("int-quantized" or "naive-quantized"; docs/models.md §5.4). The tensors are `<linear>.weight`
// int8 [N, K] and `<linear>.weight_scale` [N, 1] (or [N]), and any Linear the config's `ignore`
// list names stays in 16 or 32 bits; activations may be declared dynamic int8 per token, which
// is what framezip's int8 kernels do anyway (ops/gemm_int8.h). Everything else (GPTQ, AWQ,
// bitsandbytes, FP8, int4 packed, group or block scales, static activation scales, a quantised
// KV cache, sparsity) is refused with UNIMPLEMENTED naming the field and value, rather than
// loaded wrongly.
#pragma once

#include <string_view>

#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/json_util.h"

namespace framezip::engine::model {

// `quantization_config`, found in `file_name` (for messages); kInt8PerChannel when it is the
// layout above, UNIMPLEMENTED naming the first field that is not.
StatusOr<StoredQuantization> ParseStoredQuantization(const Json& quantization_config,
                                                     std::string_view file_name);

}  // namespace framezip::engine::model
