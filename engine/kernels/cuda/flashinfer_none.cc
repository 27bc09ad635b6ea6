// A CUDA build without FlashInfer (FRAMEZIP_FLASHINFER=OFF, or its headers could not be fetched):
// the project's own kernels serve every case, and this says so to whoever asks for FlashInfer.
#include "engine/kernels/cuda/flashinfer_prefill.cuh"

namespace framezip::engine::cuda {

bool FlashInferBuilt() { return false; }

bool FlashInferPrefillSupports(int /*head_dim*/) { return false; }

cudaError_t LaunchFlashInferPrefill(const FlashInferPrefillParams& /*params*/,
                                    cudaStream_t /*stream*/, std::string* error) {
  if (error != nullptr) *error = "this framezip binary was built without FlashInfer";
  return cudaErrorNotSupported;
}

}  // namespace framezip::engine::cuda
