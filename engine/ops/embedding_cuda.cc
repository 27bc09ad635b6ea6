// Embedding on the GPU. The ids are validated on the host first, so a bad id is OUT_OF_RANGE for
// that request rather than an out-of-bounds read on the device: from the caller's host copy when
// it has one (a step plan's), else by copying them back (N int32 and one synchronisation).
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/embedding.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status EmbeddingCuda(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t count = ids.dim(0), vocab = table.dim(0);
  std::vector<int32_t> host_ids(static_cast<size_t>(count));
  FZ_RETURN_IF_ERROR(CopyBytes(host_ids.data(), Device::Cpu(), ids.raw_data(), ids.device(),
                               host_ids.size() * sizeof(int32_t)));
  for (int64_t i = 0; i < count; ++i) {
    if (host_ids[i] < 0 || host_ids[i] >= vocab) {
      return OutOfRangeError("Embedding: token id {} at index {} is outside the vocabulary [0, {})",
                             host_ids[i], i, vocab);
    }
  }
  return EmbeddingCheckedCuda(table, ids, out);
}

Status EmbeddingCheckedCuda(const Tensor& table, const Tensor& ids, Tensor& out) {
  ScopedCudaDevice scope(table.device());
  cuda::EmbeddingParams p;
  p.table = table.raw_data();
  p.table_kind = KindOf(table.dtype());
  p.ids = static_cast<const int32_t*>(ids.raw_data());
  p.out = static_cast<float*>(out.raw_data());
  p.count = ids.dim(0);
  p.hidden = table.dim(1);
  return LaunchStatus(cuda::LaunchEmbedding(p, CurrentFramezipStream()), "Embedding");
}

}  // namespace framezip::engine::ops
