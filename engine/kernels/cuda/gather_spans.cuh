// A sequence's KV spans (engine/ops/paged_kv.h: f32, f16, int4 and int2 pages) read back to dense
// f32 rows on the device, every format converted in the kernel (the codes unpacked and
// dequantised as engine/ops/kv_quant.h lays them out, key parameters per channel, value
// parameters per token and 32-channel group), so no page goes through the host. The span list
// travels by value in the launch's parameters (under the 4 KiB limit): up to kMaxGatherSpans per
// launch, one grid row per span.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

inline constexpr int kMaxGatherSpans = 40;

struct GatherSpanDesc {
  const void* k = nullptr;  // dense: [num_tokens, C]; quantised: code rows of C·bits/8 bytes
  const void* v = nullptr;
  const __half* k_scale = nullptr;  // [C]
  const __half* k_zero = nullptr;
  const __half* v_scale = nullptr;  // [C/32, v_param_stride]
  const __half* v_zero = nullptr;
  int64_t dst_row = 0;  // the span's first row in the outputs
  int32_t num_tokens = 0;
  int32_t v_param_stride = 0;
  int32_t format = 0;  // kv::KvFormat: 0 f32, 1 f16, 2 int4, 3 int2
};

struct GatherSpansParams {
  float* k = nullptr;  // [*, channels] or null (keys not read)
  float* v = nullptr;  // [*, channels] or null
  int64_t channels = 0;
  int32_t count = 0;  // <= kMaxGatherSpans
  GatherSpanDesc spans[kMaxGatherSpans];
};

// cudaErrorInvalidValue for a count out of range or a format it does not read.
cudaError_t LaunchGatherSpans(const GatherSpansParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
