#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {

Status EmbeddingCpu(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t h = table.dim(1);
  const size_t row_bytes = static_cast<size_t>(h) * DTypeSize(table.dtype());
  const char* tp = static_cast<const char*>(table.raw_data());
  const int32_t* id = ids.data<int32_t>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < ids.dim(0); ++i) {
    cpu::ToF32(tp + static_cast<size_t>(id[i]) * row_bytes, table.dtype(), h, op + i * h);
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
