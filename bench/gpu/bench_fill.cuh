// Device-side input generators for `framezip bench gpu` (deterministic in the seed, never zeros:
// zeros time faster than real data and hide unwritten outputs; docs/DEVELOPING.md §5).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::benchgpu {

// x[i] ~ N(0, stddev²), f32.
cudaError_t FillNormal(float* x, int64_t n, uint64_t seed, float stddev, cudaStream_t stream);

// Random bytes.
cudaError_t FillBytes(void* x, int64_t bytes, uint64_t seed, cudaStream_t stream);

// "Random but structured" prefill activations for the ZipVL benchmark, standing in for a real
// model's: on top of N(0, 1) q [T, H, d] and k [T, G, d], a `salient_fraction` of the tokens
// (picked by a hash of the position) get strength·u_g added to their keys and every query of
// KV group g gets strength·u_g, u_g a fixed N(0, 1) direction. Attention mass then concentrates
// on the salient tokens (as it does on a video model's few informative patches), so ZipVL's
// top-p keeps about that fraction.
cudaError_t PlantSalientTokens(float* q, float* k, int64_t t, int heads, int kv_heads, int head_dim,
                               float salient_fraction, float strength, uint64_t seed,
                               cudaStream_t stream);

}  // namespace framezip::benchgpu
