#include "engine/kernels/cuda/embedding.cuh"
#include "engine/kernels/cuda/float_io.cuh"

namespace framezip::engine::cuda {
namespace {

// One block per id, the row read and converted with coalesced accesses.
__global__ void EmbeddingKernel(EmbeddingParams p) {
  const int64_t row = p.ids[blockIdx.x];
  float* out = p.out + blockIdx.x * p.hidden;
  const int64_t base = row * p.hidden;
  for (int64_t j = threadIdx.x; j < p.hidden; j += blockDim.x) {
    out[j] = LoadAsFloat(p.table, p.table_kind, base + j);
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream) {
  if (params.count == 0 || params.hidden == 0) return cudaSuccess;
  if (params.count > 0x7fffffff) return cudaErrorInvalidValue;
  EmbeddingKernel<<<static_cast<unsigned>(params.count), 256, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
