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

}  // namespace

cudaError_t LaunchKvSlotWrite(const KvSlotWriteParams& params, cudaStream_t stream) {
  if (params.rows == 0 || params.channels == 0) return cudaSuccess;
  if (params.rows > 0x7fffffff) return cudaErrorInvalidValue;
  KvSlotWriteKernel<<<static_cast<unsigned>(params.rows), 128, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
