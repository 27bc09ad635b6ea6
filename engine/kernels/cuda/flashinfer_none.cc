// A CUDA build without FlashInfer (FRAMEZIP_FLASHINFER=OFF, or its headers could not be fetched):
// the project's own kernels serve every case, and these say so to whoever asks for FlashInfer.
#include "engine/kernels/cuda/flashinfer_paged.cuh"
#include "engine/kernels/cuda/flashinfer_prefill.cuh"

namespace framezip::engine::cuda {
namespace {

cudaError_t NotBuilt(std::string* error) {
  if (error != nullptr) *error = "this framezip binary was built without FlashInfer";
  return cudaErrorNotSupported;
}

}  // namespace

bool FlashInferBuilt() { return false; }

bool FlashInferPrefillSupports(int /*head_dim*/) { return false; }

cudaError_t LaunchFlashInferPrefill(const FlashInferPrefillParams& /*params*/,
                                    cudaStream_t /*stream*/, std::string* error) {
  return NotBuilt(error);
}

bool FlashInferPagedSupports(int /*head_dim*/) { return false; }

cudaError_t PlanFlashInferPaged(const FlashInferWorkspace& /*workspace*/,
                                const int32_t* /*qo_indptr*/, const int32_t* /*page_indptr*/,
                                int64_t /*batch*/, int /*heads*/, int /*kv_heads*/,
                                int /*head_dim*/, int /*page_tokens*/, cudaStream_t /*stream*/,
                                FlashInferPagedPlan* /*plan*/, std::string* error) {
  return NotBuilt(error);
}

cudaError_t LaunchFlashInferPaged(const FlashInferPagedRun& /*run*/,
                                  const FlashInferPagedPlan& /*plan*/,
                                  const FlashInferWorkspace& /*workspace*/,
                                  cudaStream_t /*stream*/, std::string* error) {
  return NotBuilt(error);
}

}  // namespace framezip::engine::cuda
