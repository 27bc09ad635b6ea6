#include "engine/kernels/cuda/float_io.cuh"
#include "engine/kernels/cuda/kv_slots.cuh"

namespace framezip::engine::cuda {
namespace {

// One block per row: keys and values of that row, converted with coalesced accesses
// (round-to-nearest-even for f16, as the host's F32ToF16).
__global__ void KvSlotWriteKernel(KvSlotWriteParams p) {
  const KvSlotDesc slot = p.slots[blockIdx.x];
  const float* k = p.k + blockIdx.x * p.channels;
  const float* v = p.v + blockIdx.x * p.channels;
  for (int64_t j = threadIdx.x; j < p.channels; j += blockDim.x) {
    StoreFloat(slot.k, slot.kind, j, k[j]);
    StoreFloat(slot.v, slot.kind, j, v[j]);
  }
}

__global__ void KvPageRunsKernel(KvPageRunsParams p) {
  const KvPageRunDesc run = p.runs[blockIdx.x];
  const int64_t n = int64_t{run.rows} * p.channels;
  const float* k = p.k + run.src_row * p.channels;
  const float* v = p.v + run.src_row * p.channels;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    StoreFloat(run.k, run.kind, j, k[j]);
    StoreFloat(run.v, run.kind, j, v[j]);
  }
}

}  // namespace

cudaError_t LaunchKvPageRuns(const KvPageRunsParams& params, cudaStream_t stream) {
  if (params.count == 0 || params.channels == 0) return cudaSuccess;
  if (params.count < 0 || params.count > kMaxKvPageRuns) return cudaErrorInvalidValue;
  KvPageRunsKernel<<<static_cast<unsigned>(params.count), 256, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t LaunchKvSlotWrite(const KvSlotWriteParams& params, cudaStream_t stream) {
  if (params.rows == 0 || params.channels == 0) return cudaSuccess;
  if (params.rows > 0x7fffffff) return cudaErrorInvalidValue;
  KvSlotWriteKernel<<<static_cast<unsigned>(params.rows), 128, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
