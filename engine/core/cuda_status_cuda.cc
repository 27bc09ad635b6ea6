#include "engine/core/cuda_status_cuda.h"

#include "engine/core/cuda_error_class.h"

namespace framezip::engine {
namespace {

// cuda_error_class.cc classifies by number so that it builds without CUDA; these pin each number
// to the toolkit's enum.
static_assert(cudaSuccess == 0);
static_assert(cudaErrorMemoryAllocation == 2);
static_assert(cudaErrorInitializationError == 3);
static_assert(cudaErrorInsufficientDriver == 35);
static_assert(cudaErrorDevicesUnavailable == 46);
static_assert(cudaErrorNoDevice == 100);
static_assert(cudaErrorStartupFailure == 127);
static_assert(cudaErrorECCUncorrectable == 214);
static_assert(cudaErrorNvlinkUncorrectable == 220);
static_assert(cudaErrorContained == 226);
static_assert(cudaErrorIllegalAddress == 700);
static_assert(cudaErrorLaunchTimeout == 702);
static_assert(cudaErrorAssert == 710);
static_assert(cudaErrorHardwareStackError == 714);
static_assert(cudaErrorIllegalInstruction == 715);
static_assert(cudaErrorMisalignedAddress == 716);
static_assert(cudaErrorInvalidAddressSpace == 717);
static_assert(cudaErrorInvalidPc == 718);
static_assert(cudaErrorLaunchFailure == 719);
static_assert(cudaErrorTensorMemoryLeak == 721);
static_assert(cudaErrorSystemNotReady == 802);
static_assert(cudaErrorSystemDriverMismatch == 803);
static_assert(cudaErrorCompatNotSupportedOnDevice == 804);
static_assert(cudaErrorExternalDevice == 911);
static_assert(cudaErrorUnknown == 999);

}  // namespace

Status CudaErrorToStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const int code = static_cast<int>(err);
  if (ClassifyCudaError(code) != CudaErrorClass::kSticky) cudaGetLastError();
  return CudaErrorCodeToStatus(code, cudaGetErrorName(err), what);
}

}  // namespace framezip::engine
