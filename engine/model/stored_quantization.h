// Checkpoints stored quantised: config.json's quantization_config, as transformers reads it.
//
// framezip loads two layouts of Hugging Face `compressed-tensors` (the format llm-compressor
// writes and vLLM serves), for Linear layers, symmetric, one scale per output channel
// (docs/models.md §5.4):
//   int8 ("int-quantized" or "naive-quantized"): `<linear>.weight` I8 [N, K] and
//        `<linear>.weight_scale` [N, 1] (or [N]); activations may be declared dynamic int8 per
//        token, which is what framezip's int8 kernels do anyway (ops/gemm_int8.h).
//   FP8 ("float-quantized"): `<linear>.weight` F8_E4M3 [N, K] with the same scales, or one scale
//        for the tensor ([1] or []); activations may be declared dynamic FP8 per token. The CPU
//        has no FP8 arithmetic: the weights are decoded at load to bf16 (q · scale, as transformers
//        decompresses them) and the activations stay 16-bit.
// Any Linear the config's `ignore` list names stays in 16 or 32 bits. Everything else (GPTQ, AWQ,
// bitsandbytes, int4 packed, NVFP4/MXFP, group or block scales, static activation scales, a
// quantised KV cache, sparsity) is refused with UNIMPLEMENTED naming the field and value, rather
// than loaded wrongly.
#pragma once

#include <string_view>

#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/json_util.h"

namespace framezip::engine::model {

// `quantization_config`, found in `file_name` (for messages): the layout it describes, or
// UNIMPLEMENTED naming the first field that is not one of the two above.
StatusOr<StoredQuantization> ParseStoredQuantization(const Json& quantization_config,
                                                     std::string_view file_name);

}  // namespace framezip::engine::model
