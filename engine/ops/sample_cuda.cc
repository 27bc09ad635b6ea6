// SampleTokens on the GPU: the per-row parameters and penalised ids go up in one small copy, the
// kernel samples every row in place, the B token ids come back.
#include <cstring>
#include <vector>

#include "engine/core/buffer.h"
#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/sample.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status SampleTokensCuda(Tensor& logits, std::span<const RowSampling> rows,
                        std::span<int32_t> tokens) {
  const Device device = logits.device();
  std::vector<cuda::SampleRowParams> params(rows.size());
  std::vector<int32_t> penalized;
  for (size_t b = 0; b < rows.size(); ++b) {
    const RowSampling& r = rows[b];
    cuda::SampleRowParams& p = params[b];
    p.greedy = r.greedy ? 1 : 0;
    p.top_k = r.top_k;
    p.temperature = r.temperature;
    p.top_p = r.top_p;
    p.repetition_penalty = r.repetition_penalty;
    p.uniform = r.uniform;
    p.penalized_begin = static_cast<int>(penalized.size());
    if (r.repetition_penalty != 1.0f) {
      penalized.insert(penalized.end(), r.penalized.begin(), r.penalized.end());
    }
    p.penalized_end = static_cast<int>(penalized.size());
  }
  const size_t params_bytes = params.size() * sizeof(cuda::SampleRowParams);
  const size_t penalized_bytes = penalized.size() * sizeof(int32_t);
  const size_t tokens_bytes = tokens.size() * sizeof(int32_t);
  FZ_ASSIGN_OR_RETURN(Buffer scratch,
                      Buffer::Allocate(device, params_bytes + tokens_bytes + penalized_bytes));
  char* base = static_cast<char*>(scratch.data());
  // SampleRowParams first: the allocation's alignment covers its double.
  auto* dev_params = reinterpret_cast<cuda::SampleRowParams*>(base);
  auto* dev_tokens = reinterpret_cast<int32_t*>(base + params_bytes);
  auto* dev_penalized = reinterpret_cast<int32_t*>(base + params_bytes + tokens_bytes);
  // The parameters and the penalised ids in one copy (the tokens' bytes between them are sent
  // too, unused: one transfer costs less than two).
  std::vector<char> host(params_bytes + tokens_bytes + penalized_bytes);
  std::memcpy(host.data(), params.data(), params_bytes);
  if (penalized_bytes > 0) {
    std::memcpy(host.data() + params_bytes + tokens_bytes, penalized.data(), penalized_bytes);
  }
  FZ_RETURN_IF_ERROR(CopyBytes(base, device, host.data(), Device::Cpu(), host.size()));

  ScopedCudaDevice scope(device);
  cuda::SampleParams p;
  p.logits = static_cast<float*>(logits.raw_data());
  p.rows = logits.dim(0);
  p.vocab = logits.dim(1);
  p.row_params = dev_params;
  p.penalized = dev_penalized;
  p.tokens = dev_tokens;
  FZ_RETURN_IF_ERROR(LaunchStatus(cuda::LaunchSample(p, nullptr), "SampleTokens"));
  return CopyBytes(tokens.data(), Device::Cpu(), dev_tokens, device, tokens_bytes);
}

}  // namespace framezip::engine::ops
